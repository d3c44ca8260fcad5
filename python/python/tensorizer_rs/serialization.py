"""tensorizer's ``serialization`` module: readers, writers and their errors."""

from __future__ import annotations

import dataclasses
import os
from enum import IntEnum
from typing import Any, Dict, List, Optional, Tuple

from . import _native
from ._crypt import CryptographyError, DecryptionParams, EncryptionParams
from ._deserializer import TensorDeserializer
from ._types import FilterFuncType
from ._dtypes import OPAQUE_DTYPE_SEP
from ._serializer import TensorSerializer
from ._types import TensorType, _FileFeatureFlags, _FileHeader  # noqa: F401 (tensorizer's private names)

HashMismatchError = _native.HashMismatchError

TENSORIZER_MAGIC = b"|TZR|"
NON_OPAQUE_TENSORIZER_VERSION = 1
OPAQUE_TENSORIZER_VERSION = 2
ENCRYPTION_TENSORIZER_VERSION = 3
META_TENSOR_TENSORIZER_VERSION = 4
LONG_TENSOR_TENSORIZER_VERSION = 5
TENSORIZER_VERSION = LONG_TENSOR_TENSORIZER_VERSION

def _effective_cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# The CPUs this process may run on (tensorizer also honours cgroup quotas).
cpu_count: int = _effective_cpu_count()

# Read (as tensorizer does) from TENSORIZER_ENABLE_PERF_STATS; no stats
# are gathered by this implementation yet, so it only exists for code that
# sets or reads it.
_enable_perf_stats: bool = bool(os.environ.get("TENSORIZER_ENABLE_PERF_STATS"))


class HashType(IntEnum):
    """The kinds of tensor hashes in the file format."""

    CRC32 = 0
    SHA256 = 1


@dataclasses.dataclass(order=True)
class TensorHash:
    """One hash of a tensor's header and data, as in tensorizer."""

    __slots__ = ("type", "hash")
    type: HashType
    hash: bytes


@dataclasses.dataclass(order=True)
class TensorEntry:
    """One metadata index entry, as in tensorizer (``name`` is a str or a
    tuple path)."""

    __slots__ = (
        "metadata_version",
        "name",
        "type",
        "dtype",
        "shape",
        "offset",
        "data_offset",
        "data_length",
        "hashes",
        "header_hashes",
    )
    metadata_version: int
    name: Any
    type: TensorType
    dtype: str
    shape: Tuple[int, ...]
    offset: int
    data_offset: int
    data_length: int
    hashes: Optional[List[TensorHash]]
    header_hashes: Optional[Dict[HashType, Any]]

    @property
    def deserialized_length(self) -> int:
        if self.data_length > 0:
            return self.data_length
        import numpy

        return int(numpy.dtype(self.dtype).itemsize * int(numpy.prod(self.shape)))

    @property
    def is_long_tensor(self) -> bool:
        return self.metadata_version >= LONG_TENSOR_TENSORIZER_VERSION

__all__ = [
    "TensorSerializer",
    "TensorDeserializer",
    "TensorType",
    "CryptographyError",
    "EncryptionParams",
    "DecryptionParams",
    "FilterFuncType",
    "HashMismatchError",
    "OPAQUE_DTYPE_SEP",
]
