"""tensorizer's ``serialization`` module: readers, writers and their errors."""

from . import _native
from ._crypt import CryptographyError, DecryptionParams, EncryptionParams
from ._deserializer import FilterFuncType, TensorDeserializer
from ._dtypes import OPAQUE_DTYPE_SEP
from ._serializer import TensorSerializer
from ._types import TensorType

HashMismatchError = _native.HashMismatchError

TENSORIZER_MAGIC = b"|TZR|"
NON_OPAQUE_TENSORIZER_VERSION = 1
OPAQUE_TENSORIZER_VERSION = 2
ENCRYPTION_TENSORIZER_VERSION = 3
META_TENSOR_TENSORIZER_VERSION = 4
LONG_TENSOR_TENSORIZER_VERSION = 5
TENSORIZER_VERSION = LONG_TENSOR_TENSORIZER_VERSION

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
