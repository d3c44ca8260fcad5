"""The allocator of the load engine, and how a loader is opened.

``_native.Loader`` (python/src/loader.rs) owns a load's state and carries
out the native load plan; it decides everything and calls torch (or numpy)
only through the one ``TorchAllocator`` it is given, which makes tensors and
decides nothing. ``TensorDeserializer`` is the tensorizer-compatible mapping
over the loader.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from . import _cuda, _dtypes, _native

MmapFallbackWarning = _native.MmapFallbackWarning


def resolve_device(device: Any) -> Any:
    """The ``torch.device`` a load goes to: `device` as given, or CUDA
    when available, else the CPU."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA was requested but is not available")
    return device


def _carve_kind(dtype: str) -> tuple[Any, int, bool]:
    """(torch dtype, item size, requires grad) of a stored dtype string."""
    t = _dtypes.torch_dtype(dtype)
    return t, t.itemsize, _dtypes.is_float_like(t)


def _private_map(source: Any, options: Any, encrypted: bool) -> Any:
    """The private, copy-on-write memory map ``mmap=True`` or ``"auto"``
    hands out views of, or None: only a local, unencrypted, non-empty file,
    and with ``"auto"`` only one that provably cannot change (§23.6), asked
    of the same open file through /proc, so a path replaced since cannot
    mislead it."""
    if options.mmap == "off" or encrypted or not isinstance(source, str) or not os.path.isfile(source):
        return None
    import mmap

    with open(source, "rb") as f:
        frozen = options.mmap == "on" or _native.file_frozen(f"/proc/self/fd/{f.fileno()}") is not None
        if frozen and os.fstat(f.fileno()).st_size > 0:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return None


def open_loader(source: Any, options: Any, name: str | None, partial: bool) -> _native.Loader:
    """A ``_native.Loader`` over `source` (a path, URI, opened source or
    bytes) with the deserializer's `options`."""
    reader = _native.NativeReader(source, options, name=name, partial=partial)
    return _native.Loader(reader, options, TorchAllocator(options), _private_map(source, options, reader.encrypted))


class TorchAllocator:
    """Every torch and numpy call a load makes, for the native loader."""

    def __init__(self, options: Any) -> None:
        self._options = options

    def device(self, requested: Any) -> Any:
        return resolve_device(requested)

    def native_cuda(self) -> bool:
        return _cuda.native_enabled()

    def cast_target(self, stored: Any) -> Any:
        return _dtypes.cast_target(self._options.dtype, stored)

    def adopt(self, t: Any, device: Any, pin: bool) -> Any:
        """`t` moved to `device` (None: stays), cast as ``dtype=`` asks,
        as a ``Parameter`` (requiring grad as its stored dtype does)."""
        import torch

        grad = _dtypes.is_float_like(t.dtype)
        if device is not None:
            t = t.to(device, non_blocking=pin)
        target = self.cast_target(t.dtype)
        if target is not None:
            t = t.to(target)
        return torch.nn.Parameter(t, requires_grad=grad)

    def recast(self, t: Any) -> Any:
        """A carved ``Parameter`` cast as ``dtype=`` asks."""
        import torch

        target = self.cast_target(t.dtype)
        if target is None:
            return t
        return torch.nn.Parameter(t.detach().to(target), requires_grad=t.requires_grad)

    def carve(self, members: list[Any], buffer: Any, offsets: list[int]) -> list[Any]:
        """``Parameter``s over `buffer`, one per member at its offset, each
        with a storage of its own (python/src/carve.rs)."""
        import torch

        return _native.carve(
            members, buffer, offsets, _carve_kind, torch.frombuffer, torch.empty,
            torch.Tensor._make_subclass, torch.nn.Parameter,
        )

    def empty(self, e: Any, pin: bool) -> Any:
        """An uninitialised CPU tensor for `e` (page-locked when `pin`)."""
        import torch

        return torch.empty(e.shape, dtype=_dtypes.torch_dtype(e.dtype), pin_memory=pin)

    def arena(self, size: int, huge: bool) -> Any:
        """The memory of one arena of small tensors."""
        return _native.HostMemory(size, huge)

    def over(self, e: Any, memory: Any) -> Any:
        """A tensor for `e` over `memory` (a ``_native.HostMemory``)."""
        import torch

        return torch.frombuffer(memory, dtype=_dtypes.torch_dtype(e.dtype)).view(e.shape)

    def byte_view(self, t: Any) -> Any:
        """The bytes of a tensor or array, as a flat uint8 numpy array."""
        if isinstance(t, np.ndarray):
            return t.reshape(-1).view(np.uint8)
        import torch

        return t.reshape(-1).view(torch.uint8).numpy()

    def describe(self, t: Any) -> tuple[str, tuple[int, ...]]:
        """A module tensor's stored dtype string and shape."""
        return _dtypes.dtype_string(t.dtype), tuple(t.shape)

    def host_bytes(self, t: Any) -> Any:
        """A tensor's bytes in host memory (a uint8 numpy array)."""
        import torch

        return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()

    def cuda(self, reader: Any, entries: list[Any], device: Any, verify: bool) -> list[Any]:
        return _cuda.load(reader, entries, device, verify)

    def synchronize(self, device: Any) -> None:
        import torch

        torch.cuda.synchronize(device)

    def numpy_kind(self, stored: str) -> tuple[Any, str | None]:
        return _dtypes.numpy_dtype(stored)

    def array(self, e: Any, dtype: Any) -> Any:
        return np.empty(e.shape, dtype=dtype)

    # -- meta tensors: the form ``meta_tensors`` names --------------------------

    def _meta_dtype(self, e: Any) -> Any:
        stored = _dtypes.torch_dtype(e.dtype)
        return self.cast_target(stored) or stored

    def meta_nbytes(self, e: Any, shape: Any) -> int:
        n = 1
        for d in e.shape if shape is None else shape:
            n *= d
        return int(n * self._meta_dtype(e).itemsize)

    def meta_tensor(self, e: Any, device: Any) -> Any:
        import torch

        t = self.meta_zeros(e, e.shape, device)
        return torch.nn.Parameter(t, requires_grad=_dtypes.is_float_like(_dtypes.torch_dtype(e.dtype)))

    def meta_zeros(self, e: Any, shape: Any, device: Any) -> Any:
        import torch

        form, dtype = self._options.meta_tensors, self._meta_dtype(e)
        if form == "meta":
            return torch.empty(shape, dtype=dtype, device="meta")
        if form == "expand":
            return torch.zeros((), dtype=dtype, device=device).expand(shape)
        if device.type == "cpu":
            # calloc: untouched anonymous pages that read as zeros and are
            # committed only when written. The uint8 view covers every dtype.
            raw = np.zeros(self.meta_nbytes(e, shape), dtype=np.uint8)
            return torch.from_numpy(raw).view(dtype).reshape(shape)
        return torch.zeros(shape, dtype=dtype, device=device)

    def meta_array(self, e: Any, dtype: Any) -> Any:
        """numpy has no meta device: ``"meta"`` gives a read-only broadcast
        zero, as ``"expand"``."""
        if self._options.meta_tensors == "zeros":
            return np.zeros(e.shape, dtype=dtype)  # calloc: lazily zeroed pages
        return np.broadcast_to(np.zeros((), dtype=dtype), e.shape)
