"""dtype strings as tensorizer stores them, and their torch/numpy types."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

OPAQUE_DTYPE_SEP = "\0"

# numpy's dtype.str for every torch dtype that numpy can represent.
_NUMPY_STRINGS = {
    "bool": "|b1",
    "uint8": "|u1",
    "int8": "|i1",
    "int16": "<i2",
    "int32": "<i4",
    "int64": "<i8",
    "uint16": "<u2",
    "uint32": "<u4",
    "uint64": "<u8",
    "float16": "<f2",
    "float32": "<f4",
    "float64": "<f8",
    "complex64": "<c8",
    "complex128": "<c16",
}
_FROM_NUMPY = {v: k for k, v in _NUMPY_STRINGS.items()}


def _torch() -> Any:
    import torch

    return torch


def _torch_name(dtype: torch.dtype) -> str:
    return str(dtype).split(".", 1)[1]


def dtype_string(dtype: torch.dtype) -> str:
    """The string tensorizer writes for a torch dtype."""
    torch = _torch()
    name = _torch_name(dtype)
    if name in _NUMPY_STRINGS:
        return _NUMPY_STRINGS[name]
    if dtype in (torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, getattr(torch, "quint2x4", None)):
        raise NotImplementedError(f"Serialization for {dtype} is not implemented.")
    size = torch.empty((), dtype=dtype).element_size()
    order = "|" if size == 1 else "<"
    return f"{order}V{size}{OPAQUE_DTYPE_SEP}{dtype}"


def numpy_dtype_string(dtype: np.dtype[Any]) -> str:
    """The string stored for a numpy array's dtype."""
    s = dtype.str
    if s.startswith(">"):
        raise ValueError(f"big-endian arrays ({s}) cannot be stored; convert with .astype('{'<' + s[1:]}')")
    return s


@functools.lru_cache(maxsize=256)
def torch_dtype(stored: str) -> torch.dtype:
    """The torch dtype for a stored dtype string (memoized: a file has a
    handful of distinct dtype strings and thousands of tensors)."""
    torch = _torch()
    numpy_part, _, torch_part = stored.partition(OPAQUE_DTYPE_SEP)
    if torch_part:
        name = torch_part.split(".", 1)[1] if torch_part.startswith("torch.") else torch_part
        found = getattr(torch, name, None)
        if not isinstance(found, torch.dtype):
            raise ValueError(f"unknown torch dtype {torch_part!r} in dtype string {stored!r}")
        return found  # type: ignore[no-any-return]
    if numpy_part.startswith(">") and numpy_part[2:] != "1":
        raise ValueError(
            f"dtype {stored!r} is big-endian and torch has no big-endian tensors: read it with "
            "read_numpy_arrays(), or convert the file (`tzr convert` swaps the bytes)"
        )
    key = numpy_part if numpy_part[0] in "<>|" else "<" + numpy_part
    if key[1:] in ("u1", "i1", "b1"):
        key = "|" + key[1:]
    if key not in _FROM_NUMPY:
        raise ValueError(f"dtype {stored!r} has no torch equivalent")
    return getattr(torch, _FROM_NUMPY[key])  # type: ignore[no-any-return]


def numpy_dtype(stored: str) -> tuple[np.dtype[Any], str | None]:
    """The numpy dtype to view stored bytes with, and the torch name of an
    opaque dtype (whose bytes are then viewed as a same-sized int)."""
    numpy_part, _, torch_part = stored.partition(OPAQUE_DTYPE_SEP)
    if torch_part:
        size = int(numpy_part[2:])
        ints = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
        if size not in ints:
            raise ValueError(f"opaque dtype {stored!r} has no integer view")
        return np.dtype(ints[size]), torch_part
    return np.dtype(numpy_part), None


def is_float_like(dtype: torch.dtype) -> bool:
    return bool(dtype.is_floating_point or dtype.is_complex)
