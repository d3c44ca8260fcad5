"""CPU memory for loaded tensors: the load plan's constants, and the
native memory the loader packs arenas of small tensors into and reads
large tensors into (python/src/loader/copies.rs). What each constant means
is said where it is defined: host-native/src/read/plan.rs (``ARENA_BYTES``,
``ARENA_ALIGN``, ``HUGE_PAGE_MIN``, ``ALLOCATION_ALIGN``) and
host-native/src/memory.rs (``HUGE_PAGE``)."""

from __future__ import annotations

from . import _native

ARENA_BYTES = _native.ARENA_BYTES
#: Alignment of each tensor's data inside an arena.
PIECE_ALIGN = _native.ARENA_ALIGN
HUGE_PAGE_MIN = _native.HUGE_PAGE_MIN
ALLOCATION_ALIGN = _native.ALLOCATION_ALIGN
HUGE_PAGE = _native.HUGE_PAGE

#: ``host_memory(size, huge=True, lead=0)``: `size` writable bytes, `lead`
#: bytes after an ``ALLOCATION_ALIGN`` boundary; from ``HUGE_PAGE_MIN`` up
#: in a mapping of their own that starts on a ``HUGE_PAGE`` boundary,
#: advised for huge pages when `huge`. Freed when the last tensor or array
#: over it dies. An arena's memory is one of these.
host_memory = arena = _native.HostMemory
