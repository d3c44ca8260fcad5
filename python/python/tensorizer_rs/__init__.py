"""tensorizer-rs: tensorizer's API on a Rust core.

``import tensorizer_rs as tensorizer`` works for code written for
tensorizer 2.12: the same classes, arguments and file format, loading with
parallel reads straight into tensors allocated by torch.
"""

from typing import Any

from . import serialization, stream_io, utils
from ._alias import install_as_tensorizer
from ._convert import convert
from ._distributed import CooperativeLoadError
from ._fingerprint import TensorFingerprint, fingerprint, fingerprint_tensors, scan
from ._model import load_state_dict
from ._modules import StrictLoadError
from ._native import LoadReceipt, MmapFallbackWarning, ObjectChangedError, RangeNotSupportedError
from ._native import __version__ as _native_version
from ._shards import load_shards
from ._slices import TensorSlice, tp_shard
from .serialization import (
    CryptographyError,
    DecryptionParams,
    EncryptionParams,
    FilterFuncType,
    HashMismatchError,
    TensorDeserializer,
    TensorSerializer,
    TensorType,
)

# The tensorizer release whose API and file format this implements, so that
# code checking ``tensorizer.__version__`` sees a compatible version; our
# own version is ``__rs_version__``.
__version__ = "2.12.1"
__rs_version__ = _native_version


def __getattr__(name: str) -> Any:
    # torch_compat imports torch, which the rest of the package does not
    # need: it is imported on first use (``tensorizer_rs.torch_compat`` or
    # ``import tensorizer_rs.torch_compat``).
    if name == "torch_compat":
        import importlib

        return importlib.import_module(".torch_compat", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "install_as_tensorizer",
    "convert",
    "fingerprint",
    "fingerprint_tensors",
    "TensorFingerprint",
    "scan",
    "serialization",
    "stream_io",
    "utils",
    "TensorSerializer",
    "TensorDeserializer",
    "TensorType",
    "CooperativeLoadError",
    "CryptographyError",
    "EncryptionParams",
    "DecryptionParams",
    "FilterFuncType",
    "HashMismatchError",
    "LoadReceipt",
    "MmapFallbackWarning",
    "StrictLoadError",
    "ObjectChangedError",
    "RangeNotSupportedError",
    "TensorSlice",
    "tp_shard",
    "load_shards",
    "load_state_dict",
]
