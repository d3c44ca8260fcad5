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


class _MetaTensors:
    """``TensorDeserializer``'s handling of meta tensors (a mixin)."""

    _options: _native.DeserializerOptions
    _meta_bytes: int
    _reader: Any

    @property
    def _device(self) -> Any:
        raise NotImplementedError

    def _cast_to(self, stored: Any) -> Any:
        raise NotImplementedError

    def _check_open(self) -> None:
        raise NotImplementedError

    def _meta_dtype(self, e: _Entry) -> Any:
        stored = _dtypes.torch_dtype(e.dtype)
        return self._cast_to(stored) or stored

    def _meta_nbytes_torch(self, e: _Entry) -> int:
        return int(math.prod(e.shape) * self._meta_dtype(e).itemsize)

    def _claim_meta_bytes(self, metas: list[_Entry], nbytes: Callable[[_Entry], int], what: str = "") -> None:
        """Counts the zero-filled bytes ``metas`` will take against
        ``max_meta_bytes``; raises, before anything is allocated, when the
        file's claims go past it. ``what`` names a part (a slice)."""
        if self._options.meta_tensors != "zeros":
            return
        total = self._meta_bytes
        for e in metas:
            size = nbytes(e)
            total += size
            if self._options.max_meta_bytes is not None and total > self._options.max_meta_bytes:
                raise ValueError(
                    f"{what}meta tensor {e.name!r} (dtype {e.dtype!r}, shape {e.shape}) would be materialized as "
                    f"{size:,} zero bytes, {total:,} bytes of meta tensors in all, more than "
                    f"max_meta_bytes={self._options.max_meta_bytes:,}. The file stores no data for it; pass "
                    "meta_tensors='expand' (a read-only zero expanded to the shape, no memory), "
                    "meta_tensors='meta' (a tensor on the meta device), or a larger max_meta_bytes "
                    "(None for no bound)"
                )
        self._meta_bytes = total

    def _check_meta_headers(self, metas: list[_Entry], verify: bool) -> None:
        """What the native load does for a meta tensor: parse its header
        (checked against the index) and, with ``verify``, check its hashes,
        which cover the header alone."""
        if not verify:
            self._reader.module_indices([e.index for e in metas])
            return
        for e in metas:
            self._reader.verify_bytes(e.index, b"")

    def _meta_tensor(self, e: _Entry, device: Any) -> Any:
        """A meta entry as ``meta_tensors`` asks, wrapped like loaded ones."""
        import torch

        t = self._meta_zeros(e.shape, self._meta_dtype(e), device)
        return torch.nn.Parameter(t, requires_grad=_dtypes.is_float_like(_dtypes.torch_dtype(e.dtype)))

    def _meta_zeros(self, shape: Any, dtype: Any, device: Any) -> Any:
        """Zeros of ``shape`` in the form ``meta_tensors`` names (the caller
        has counted them against ``max_meta_bytes``)."""
        import torch

        if self._options.meta_tensors == "meta":
            return torch.empty(shape, dtype=dtype, device="meta")
        if self._options.meta_tensors == "expand":
            return torch.zeros((), dtype=dtype, device=device).expand(shape)
        if device.type == "cpu":
            # calloc: untouched anonymous pages that read as zeros and are
            # committed only when written. The uint8 view covers every dtype.
            raw = np.zeros(math.prod(shape) * dtype.itemsize, dtype=np.uint8)
            return torch.from_numpy(raw).view(dtype).reshape(shape)
        return torch.zeros(shape, dtype=dtype, device=device)

    def _meta_slice(self, e: _Entry, shape: list[int]) -> Any:
        """A slice of meta entry ``e`` (``get_slice``), of ``shape``, in the
        form ``meta_tensors`` names. A zero-filled slice is new memory each
        time: its bytes join the running total that ``max_meta_bytes``
        bounds, checked before allocating, as ``d[name]`` does for the
        whole tensor."""
        self._check_open()
        dtype = self._meta_dtype(e)
        self._claim_meta_bytes([e], lambda _: math.prod(shape) * dtype.itemsize, f"a slice {shape} of ")
        self._check_meta_headers([e], self._options.verify_hash)
        return self._meta_zeros(shape, dtype, self._device)
