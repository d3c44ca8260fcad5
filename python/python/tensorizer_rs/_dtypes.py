"""dtype strings as tensorizer stores them, and their torch/numpy types."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _native

if TYPE_CHECKING:
    import torch

OPAQUE_DTYPE_SEP = "\0"


def _torch() -> Any:
    import torch

    return torch


def _torch_name(dtype: torch.dtype) -> str:
    return str(dtype).split(".", 1)[1]


@functools.lru_cache(maxsize=64)
def dtype_string(dtype: torch.dtype) -> str:
    """The string tensorizer writes for a torch dtype (the core's table;
    a dtype the format does not list is stored opaquely, as tensorizer
    does, by its element size and name)."""
    torch = _torch()
    stored = _native.dtype_string_for(_torch_name(dtype))
    if stored is not None:
        return stored
    if dtype in (torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, getattr(torch, "quint2x4", None)):
        raise NotImplementedError(f"Serialization for {dtype} is not implemented.")
    size = torch.empty((), dtype=dtype).element_size()
    order = "|" if size == 1 else "<"
    return f"{order}V{size}{OPAQUE_DTYPE_SEP}{dtype}"


def cast_target(target: Any, stored: Any) -> Any:
    """The dtype a tensor stored as `stored` becomes under ``dtype=target``,
    or None to keep it. The cast applies as ``Module.to(dtype)`` applies it:
    to floating-point tensors for a floating-point dtype, to complex ones
    for a complex dtype; integer and bool tensors keep theirs (tensorizer
    casts every non-bool tensor, so complex values lose their imaginary
    part and int64 positions are rounded: spec §11.1)."""
    if target is None or stored == target:
        return None
    if (stored.is_floating_point and target.is_floating_point) or (stored.is_complex and target.is_complex):
        return target
    return None


def numpy_dtype_string(dtype: np.dtype[Any]) -> str:
    """The string stored for a numpy array's dtype."""
    s = dtype.str
    if s.startswith(">"):
        raise ValueError(f"big-endian arrays ({s}) cannot be stored; convert with .astype('{'<' + s[1:]}')")
    return s


@functools.lru_cache(maxsize=256)
def torch_dtype(stored: str) -> torch.dtype:
    """The torch dtype for a stored dtype string, as the core reads it
    (memoized: a file has a handful of distinct dtype strings and thousands
    of tensors)."""
    torch = _torch()
    name = _native.dtype_torch_name(stored)
    found = getattr(torch, name, None)
    if not isinstance(found, torch.dtype):
        raise ValueError(f"dtype {stored!r} is torch.{name}, which this torch ({torch.__version__}) does not have")
    return found  # type: ignore[no-any-return]


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
