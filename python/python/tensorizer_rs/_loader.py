"""The allocator of the load engine.

``_native.Loader`` (python/src/loader.rs) opens the file, owns a load's
state and carries out the native load plan; it decides everything and calls
torch (or numpy) only through the one ``TorchAllocator`` it is given, which
makes tensors and decides nothing. ``TensorDeserializer`` is the
tensorizer-compatible mapping over the loader.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _cuda, _dtypes, _native


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

    def ranks(self, group: Any) -> tuple[int, list[int]]:
        """This process's rank in process `group`, and each rank's global rank."""
        import torch.distributed as dist

        return dist.get_rank(group), [dist.get_global_rank(group, r) for r in range(dist.get_world_size(group))]

    def broadcast(self, t: Any, src: int, group: Any) -> None:
        """Broadcasts the bytes of `t` (a tensor, or host memory) from global rank `src`."""
        import torch
        import torch.distributed as dist

        raw = t.detach().reshape(-1).view(torch.uint8) if isinstance(t, torch.Tensor) else torch.frombuffer(t, dtype=torch.uint8)
        dist.broadcast(raw, src=src, group=group)

    def synchronize(self, device: Any) -> None:
        import torch

        torch.cuda.synchronize(device)

    def numpy_kind(self, stored: str) -> tuple[Any, str | None]:
        return _dtypes.numpy_dtype(stored)

    def array(self, e: Any, dtype: Any) -> Any:
        return np.empty(e.shape, dtype=dtype)

    # -- meta tensors: the loader decides dtype, size and form ----------------

    def meta_kind(self, stored: str) -> tuple[Any, int, bool]:
        """(torch dtype after ``dtype=``, its item size, requires grad) of a
        stored dtype string."""
        t = _dtypes.torch_dtype(stored)
        cast = self.cast_target(t) or t
        return cast, cast.itemsize, _dtypes.is_float_like(t)

    def zeros(self, form: str, dtype: Any, shape: Any, device: Any, nbytes: int, grad: bool | None) -> Any:
        """Zeros in `form`: ``"meta"`` (on the meta device), ``"expand"`` (a
        zero scalar expanded), ``"calloc"`` (`nbytes` of lazily zeroed CPU
        pages) or ``"zeros"`` (on `device`); a ``Parameter`` unless `grad`
        is None."""
        import torch

        if form == "meta":
            t = torch.empty(shape, dtype=dtype, device="meta")
        elif form == "expand":
            t = torch.zeros((), dtype=dtype, device=device).expand(shape)
        elif form == "calloc":  # the uint8 view covers every dtype
            t = torch.from_numpy(np.zeros(nbytes, dtype=np.uint8)).view(dtype).reshape(shape)
        else:
            t = torch.zeros(shape, dtype=dtype, device=device)
        return t if grad is None else torch.nn.Parameter(t, requires_grad=grad)

    def array_zeros(self, dtype: Any, shape: Any, expand: bool) -> Any:
        """Lazily zeroed pages, or with `expand` a read-only broadcast zero."""
        return np.broadcast_to(np.zeros((), dtype=dtype), shape) if expand else np.zeros(shape, dtype=dtype)
