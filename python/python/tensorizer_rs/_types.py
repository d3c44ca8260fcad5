"""Enumerations shared by the reader and writer."""

import dataclasses
import enum
from collections.abc import Callable
from typing import Union

#: A tensor filter: called with each tensor's name (a str, or a path of
#: components for structured names), true to keep it.
FilterFuncType = Callable[[Union[str, tuple[Union[str, int], ...]]], bool]


class TensorType(enum.IntEnum):
    """What a tensor was written as."""

    PARAM = 0
    BUFFER = 1
    STATE_DICT = 2


class _FileFeatureFlags(enum.IntFlag):
    """The header's feature flags (tensorizer's private name, which its
    tests and some tools read)."""

    encrypted = enum.auto()
    versioned_headers = enum.auto()


@dataclasses.dataclass
class _FileHeader:
    """The file header as tensorizer's ``TensorDeserializer._file_header``
    (``version_number`` is ``None`` for a safetensors file)."""

    __slots__ = ("version_number", "feature_flags", "tensor_size", "tensor_count")
    version_number: int | None
    feature_flags: _FileFeatureFlags
    tensor_size: int
    tensor_count: int
