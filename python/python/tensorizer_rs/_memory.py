"""CPU memory for loaded tensors: arenas that many small tensors are carved
from, and huge-page-backed memory for large ones."""

from __future__ import annotations

import contextlib
import mmap
from typing import Any

import numpy as np

from . import _dtypes, _native

#: On the CPU, the tensors loaded together are packed into arenas of at
#: most this many bytes, each tensor at a ``PIECE_ALIGN``-aligned place, and
#: each becomes a tensor with a storage of its own over exactly its bytes
#: (``torch.frombuffer``). One allocation, one buffer hand-off and, from
#: ``HUGE_PAGE_MIN`` up, transparent huge pages per arena instead of per
#: tensor. A surviving tensor keeps its arena (at most this much) mapped.
ARENA_BYTES = _native.ARENA_BYTES
#: Alignment of each tensor's data inside an arena (torch's CPU allocator's).
PIECE_ALIGN = _native.ARENA_ALIGN
#: Arenas and tensors of at least this many bytes get memory of their own,
#: mapped with ``MADV_HUGEPAGE`` where the load plan says so
#: (``LoadPlan.huge_pages``, spec §23.4), so first touches fault 2 MiB pages
#: instead of 4 KiB ones. Measured here: 5-10 % off a CPU load (the reads fault
#: pages from inside the kernel, where faults are cheap), and 4x faster for
#: code that then writes such memory from user space (BENCHMARKS.md).
HUGE_PAGE_MIN = _native.HUGE_PAGE_MIN
#: Every arena and every large tensor's memory starts at a multiple of
#: this; the load plan places long tensors at their place in a file block,
#: so a cold load reads them straight in around the page cache.
ALLOCATION_ALIGN = _native.ALLOCATION_ALIGN


#: Transparent huge page size: each huge-page region starts at a multiple
#: of it and is mapped in whole multiples of it, so that every byte of it
#: can be backed by huge pages (a region that starts or ends inside a 2 MiB
#: frame gets 4 KiB pages there, which fault about 3x slower).
HUGE_PAGE = _native.HUGE_PAGE


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def huge_region(size: int, huge: bool = True) -> mmap.mmap:
    """Anonymous private memory of `size` bytes, advised for transparent huge
    pages when `huge` (and the kernel allows; 4 KiB pages otherwise)."""
    region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if huge and advice is not None:
        with contextlib.suppress(OSError):
            region.madvise(advice)
    return region


def huge_bytes(size: int, huge: bool = True) -> np.ndarray[Any, Any]:
    """`size` writable bytes starting at a ``HUGE_PAGE`` boundary, in a
    mapping of whole huge pages, advised for them when `huge`
    (``LoadPlan.huge_pages``). Linux 6.7+ places such
    mappings on a boundary by itself; elsewhere the mapping is one huge page
    longer and the bytes start at the first boundary in it (the slack is
    never touched, so it costs address space, not memory). The mapping is
    freed when the last array or tensor over it dies."""
    length = _round_up(max(size, 1), HUGE_PAGE)
    region = huge_region(length, huge)
    whole = np.frombuffer(region, dtype=np.uint8)
    if whole.ctypes.data % HUGE_PAGE:
        del whole
        region.close()
        region = huge_region(length + HUGE_PAGE, huge)
        whole = np.frombuffer(region, dtype=np.uint8)
    start = -whole.ctypes.data % HUGE_PAGE
    return whole[start : start + size]


def arena(size: int, huge: bool = True) -> np.ndarray[Any, Any]:
    """`size` writable bytes starting ``ALLOCATION_ALIGN``-aligned:
    huge-page memory from ``HUGE_PAGE_MIN`` up (`huge_bytes`), else from
    the allocator (small loads must not cost a mapping each: the kernel caps
    their number)."""
    if size >= HUGE_PAGE_MIN:
        return huge_bytes(size, huge)
    raw = np.empty(size + ALLOCATION_ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % ALLOCATION_ALIGN
    return raw[start : start + size]


def staging_tensor(e: Any, pin: bool, lead: int = 0, huge: bool = True) -> Any:
    """An uninitialised tensor for an entry loaded alone: on the CPU and
    from ``HUGE_PAGE_MIN`` bytes, over memory of its own (the storage owns
    the mapping and frees it), advised for huge pages when `huge`
    (``LoadPlan.huge_pages``), starting `lead` bytes into it
    (``LoadPlan.large_leads``)."""
    import torch

    dtype = _dtypes.torch_dtype(e.dtype)
    if pin or e.data_length < HUGE_PAGE_MIN or e.data_length != e.nbytes:
        return torch.empty(e.shape, dtype=dtype, pin_memory=pin)
    return torch.frombuffer(huge_bytes(lead + e.data_length, huge)[lead:], dtype=dtype).view(e.shape)
