"""Meta tensors (data version 4): entries with a shape but no stored
bytes, handed out as ``meta_tensors`` asks ("zeros", "expand" or "meta")
and counted against ``max_meta_bytes``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _dtypes, _native

_Entry = _native.Entry


def check_meta_headers(reader: Any, metas: list[_Entry], verify: bool) -> None:
    """What the native load does for a meta tensor: parse its header
    (checked against the index) and, with `verify`, check its hashes,
    which cover the header alone."""
    if not verify:
        reader.module_indices([e.index for e in metas])
        return
    for e in metas:
        reader.verify_bytes(e.index, b"")


class MetaTensors:
    """One load's meta tensors: their form (``meta_tensors``) and the
    zero-filled bytes handed out so far, bounded by ``max_meta_bytes``."""

    def __init__(self, options: Any) -> None:
        self._options = options
        self._claimed = 0  # zero-filled meta bytes handed out so far

    def dtype(self, e: _Entry) -> Any:
        """The torch dtype meta entry `e` is handed out as (``dtype=``'s
        cast applied)."""
        stored = _dtypes.torch_dtype(e.dtype)
        return _dtypes.cast_target(self._options.dtype, stored) or stored

    def nbytes_torch(self, e: _Entry) -> int:
        return int(math.prod(e.shape) * self.dtype(e).itemsize)

    def claim(self, metas: list[_Entry], nbytes: Callable[[_Entry], int], what: str = "") -> None:
        """Counts the zero-filled bytes `metas` will take against
        ``max_meta_bytes``; raises, before anything is allocated, when the
        file's claims go past it. `what` names a part (a slice)."""
        limit = self._options.max_meta_bytes
        if self._options.meta_tensors != "zeros":
            return
        total = self._claimed
        for e in metas:
            size = nbytes(e)
            total += size
            if limit is not None and total > limit:
                raise ValueError(
                    f"{what}meta tensor {e.name!r} (dtype {e.dtype!r}, shape {e.shape}) would be materialized as "
                    f"{size:,} zero bytes, {total:,} bytes of meta tensors in all, more than "
                    f"max_meta_bytes={limit:,}. The file stores no data for it; pass "
                    "meta_tensors='expand' (a read-only zero expanded to the shape, no memory), "
                    "meta_tensors='meta' (a tensor on the meta device), or a larger max_meta_bytes "
                    "(None for no bound)"
                )
        self._claimed = total

    def tensor(self, e: _Entry, device: Any) -> Any:
        """A meta entry as ``meta_tensors`` asks, wrapped like loaded ones
        (the caller has claimed its bytes)."""
        import torch

        t = self.zeros(e.shape, self.dtype(e), device)
        return torch.nn.Parameter(t, requires_grad=_dtypes.is_float_like(_dtypes.torch_dtype(e.dtype)))

    def zeros(self, shape: Any, dtype: Any, device: Any) -> Any:
        """Zeros of `shape` in the form ``meta_tensors`` names (the caller
        has claimed them)."""
        import torch

        form = self._options.meta_tensors
        if form == "meta":
            return torch.empty(shape, dtype=dtype, device="meta")
        if form == "expand":
            return torch.zeros((), dtype=dtype, device=device).expand(shape)
        if device.type == "cpu":
            # calloc: untouched anonymous pages that read as zeros and are
            # committed only when written. The uint8 view covers every dtype.
            raw = np.zeros(math.prod(shape) * dtype.itemsize, dtype=np.uint8)
            return torch.from_numpy(raw).view(dtype).reshape(shape)
        return torch.zeros(shape, dtype=dtype, device=device)

    def array(self, e: _Entry, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        """Meta entry `e` as a numpy array (numpy has no meta device:
        ``"meta"`` gives a read-only broadcast zero, as ``"expand"``)."""
        if self._options.meta_tensors == "zeros":
            return np.zeros(e.shape, dtype=dtype)  # calloc: lazily zeroed pages
        return np.broadcast_to(np.zeros((), dtype=dtype), e.shape)

    def slice(self, reader: Any, e: _Entry, shape: list[int], device: Any, verify: bool) -> Any:
        """A slice of meta entry `e` (``get_slice``), of `shape`. A
        zero-filled slice is new memory each time: its bytes join the
        running total that ``max_meta_bytes`` bounds, checked before
        allocating, as ``d[name]`` does for the whole tensor."""
        dtype = self.dtype(e)
        self.claim([e], lambda _: math.prod(shape) * dtype.itemsize, f"a slice {shape} of ")
        check_meta_headers(reader, [e], verify)
        return self.zeros(shape, dtype, device)
