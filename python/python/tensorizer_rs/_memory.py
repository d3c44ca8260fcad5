"""CPU memory for loaded tensors: arenas that many small tensors are carved
from, and huge-page-backed memory for large ones."""

from __future__ import annotations

import contextlib
import mmap
from typing import Any

import numpy as np

from . import _dtypes

#: On the CPU, the tensors loaded together are packed into arenas of at
#: most this many bytes, each tensor at a ``PIECE_ALIGN``-aligned place, and
#: each becomes a tensor with a storage of its own over exactly its bytes
#: (``torch.frombuffer``). One allocation, one buffer hand-off and, from
#: ``HUGE_PAGE_MIN`` up, transparent huge pages per arena instead of per
#: tensor. A surviving tensor keeps its arena (at most this much) mapped.
ARENA_BYTES = 64 << 20
#: Alignment of each tensor's data inside an arena (torch's CPU allocator's).
PIECE_ALIGN = 64
#: Arenas and tensors of at least this many bytes get memory of their own
#: mapped with ``MADV_HUGEPAGE``, so first touches fault 2 MiB pages instead
#: of 4 KiB ones. Measured here: 5-10 % off a CPU load (the reads fault
#: pages from inside the kernel, where faults are cheap), and 4x faster for
#: code that then writes such memory from user space (BENCHMARKS.md).
HUGE_PAGE_MIN = 2 << 20


def huge_region(size: int) -> mmap.mmap:
    """Anonymous private memory of `size` bytes, advised for transparent huge
    pages (when the kernel allows; 4 KiB pages otherwise)."""
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        with contextlib.suppress(OSError):
            region.madvise(advice)
    return region


def arena(size: int) -> np.ndarray[Any, Any]:
    """`size` writable bytes starting ``PIECE_ALIGN``-aligned: huge-page
    memory from ``HUGE_PAGE_MIN`` up, else from the allocator (small loads
    must not cost a mapping each: the kernel caps their number)."""
    if size >= HUGE_PAGE_MIN:
        return np.frombuffer(huge_region(size), dtype=np.uint8)
    raw = np.empty(size + PIECE_ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % PIECE_ALIGN
    return raw[start : start + size]


def staging_tensor(e: Any, pin: bool) -> Any:
    """An uninitialised tensor for an entry loaded alone: on the CPU and
    from ``HUGE_PAGE_MIN`` bytes, over memory of its own advised for
    huge pages (the storage owns the mapping and frees it)."""
    import torch

    dtype = _dtypes.torch_dtype(e.dtype)
    if pin or e.data_length < HUGE_PAGE_MIN or e.data_length != e.nbytes:
        return torch.empty(e.shape, dtype=dtype, pin_memory=pin)
    return torch.frombuffer(huge_region(e.data_length), dtype=dtype).view(e.shape)
