"""CPU memory for loaded tensors: arenas that many small tensors are carved
from, and huge-page-backed memory for large ones."""

from __future__ import annotations

from typing import Any

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


#: Transparent huge page size: memory of ``HUGE_PAGE_MIN`` bytes and more
#: starts on a multiple of it (``_native.HostMemory``).
HUGE_PAGE = _native.HUGE_PAGE


def host_memory(size: int, huge: bool = True, lead: int = 0) -> Any:
    """`size` writable bytes (a ``_native.HostMemory``, a buffer), `lead`
    bytes after an ``ALLOCATION_ALIGN`` boundary; from ``HUGE_PAGE_MIN`` up
    in a mapping of their own that starts on a ``HUGE_PAGE`` boundary,
    advised for huge pages when `huge` (``LoadPlan.huge_pages``). Freed when
    the last tensor or array over it dies."""
    return _native.HostMemory(size, huge, lead)


def arena(size: int, huge: bool = True) -> Any:
    """The memory of one arena of small tensors."""
    return host_memory(size, huge)


def staging_tensor(e: Any, pin: bool, lead: int = 0, huge: bool = True) -> Any:
    """An uninitialised tensor for an entry loaded alone: on the CPU and
    from ``HUGE_PAGE_MIN`` bytes, over memory of its own (``host_memory``),
    starting `lead` bytes into it (``LoadPlan.large_leads``)."""
    import torch

    dtype = _dtypes.torch_dtype(e.dtype)
    if pin or e.data_length < HUGE_PAGE_MIN or e.data_length != e.nbytes:
        return torch.empty(e.shape, dtype=dtype, pin_memory=pin)
    return torch.frombuffer(host_memory(e.data_length, huge, lead), dtype=dtype).view(e.shape)
