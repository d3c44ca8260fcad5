"""Loading tensors straight into CUDA device memory (spec §19).

``TensorDeserializer(..., device="cuda")`` (and so ``load_into_module`` and
``torch_compat``'s ``tensorizer_loading``) loads through the native staging
ring when this build has it and a CUDA driver is present: Rust reads each
piece of the file into a page-locked buffer, decrypts and hashes it there,
and copies it with ``cuMemcpyHtoDAsync`` into memory torch allocated on
the device, on torch's current stream. Host memory stays at the ring's
size whatever the model size.

The environment variables ``ENV_NATIVE``, ``ENV_ALLOC`` and ``ENV_STREAMS``
name are read natively at every load (python/src/cuda_env.rs); spec §19
says what each does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from . import _dtypes, _native

#: The environment variables (read natively, python/src/cuda_env.rs).
ENV_NATIVE = _native.CUDA_ENV_NATIVE
ENV_ALLOC = _native.CUDA_ENV_ALLOC
ENV_STREAMS = _native.CUDA_ENV_STREAMS
#: The allocation modes, the default first.
ALLOC_MODES = _native.CUDA_ALLOC_MODES

#: Alignment of each tensor inside a carved allocation (what CUDA kernels
#: and cuBLAS expect of a tensor's start; torch's allocator gives 512).
VIEW_ALIGN = _native.DEVICE_VIEW_ALIGN
# Set by torch_compat: its sidecar storages must be the tensors' own.
_per_tensor_only: ContextVar[bool] = ContextVar("tensorizer_rs_cuda_per_tensor", default=False)


Entry = _native.Entry
#: ``_native.reader_load_cuda``'s signature; tests put a host stand-in here.
Loader = Callable[..., None]


def _reader_load(reader: Any, indices: list[int], tensors: list[Any], verify_hash: bool | None, streams: int) -> None:
    _native.reader_load_cuda(reader, indices, tensors, verify_hash, streams=streams)


def native_enabled() -> bool:
    """Whether ``device="cuda"`` loads go through the native staging ring:
    the build has it, a driver and a device are present, and
    ``TENSORIZER_RS_NATIVE_CUDA`` is not ``0``."""
    return _native.cuda_env_allows() and bool(_native.cuda_available())


def alloc_mode() -> str:
    """``"per_tensor"`` or ``"carved"``, from ``TENSORIZER_RS_CUDA_ALLOC``
    (``per_tensor`` inside ``torch_compat``)."""
    return "per_tensor" if _per_tensor_only.get() else _native.cuda_alloc_mode()


#: Copy streams of our own, from ``TENSORIZER_RS_CUDA_STREAMS`` (0:
#: torch's current stream).
copy_streams = _native.cuda_copy_streams


@contextlib.contextmanager
def per_tensor() -> Iterator[None]:
    """Loads inside use one allocation per tensor, whatever ``ENV_ALLOC``
    says."""
    token = _per_tensor_only.set(True)
    try:
        yield
    finally:
        _per_tensor_only.reset(token)


#: ``carve_offsets(sizes)``: the start of each piece of ``sizes`` bytes in
#: one allocation, each ``VIEW_ALIGN``-aligned, and the allocation's length
#: (laid out natively, as every packed allocation is).
carve_offsets = _native.carve_offsets


def destinations(entries: Sequence[Entry], device: Any, mode: str) -> list[Any]:
    """Uninitialised tensors on ``device`` for ``entries`` (their stored
    dtype and shape): one allocation each, or views of one allocation."""
    import torch

    dtypes = [_dtypes.torch_dtype(e.dtype) for e in entries]
    if mode == "per_tensor":
        return [torch.empty(e.shape, dtype=dt, device=device) for e, dt in zip(entries, dtypes)]
    if mode != "carved":
        raise ValueError(f"unknown CUDA allocation mode {mode!r}: use one of {', '.join(ALLOC_MODES)}")
    offsets, total = carve_offsets([e.nbytes for e in entries])
    raw = torch.empty(total, dtype=torch.uint8, device=device)
    return [raw[at : at + e.nbytes].view(dt).view(e.shape) for e, dt, at in zip(entries, dtypes, offsets)]


def load(
    reader: Any,
    entries: Sequence[Entry],
    device: Any,
    verify_hash: bool | None,
    *,
    loader: Loader | None = None,
    mode: str | None = None,
) -> list[Any]:
    """Loads ``entries`` (none of them meta) of the native ``reader`` into
    new tensors on ``device``, in one native call: decrypted with the
    reader's key, hashes checked when ``verify_hash`` (None: the reader's
    setting). Every copy has completed on return."""
    streams = copy_streams()
    load_fn = _reader_load if loader is None else loader
    with _device_context(device):
        tensors = destinations(entries, device, alloc_mode() if mode is None else mode)
        load_fn(reader, [e.index for e in entries], tensors, verify_hash, streams)
    return tensors


def _device_context(device: Any) -> contextlib.AbstractContextManager[Any]:
    """``torch.cuda.device(device)`` for a CUDA device: the native call makes
    the device's primary context current on this thread, and torch puts its
    own current device back on exit."""
    import torch

    if getattr(device, "type", None) == "cuda":
        return torch.cuda.device(device)
    return contextlib.nullcontext()
