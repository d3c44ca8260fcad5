"""``tensorizer._syscalls``: the Linux ``fallocate(2)`` and page-prefault
helpers that tensorizer 2.12.1 has as a private module.

Our writer does its own preallocation in Rust; this module exists because
code written for tensorizer (its own test suite among it) imports these
names. Same names, arguments and results as tensorizer's.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
from typing import Any, Callable, Optional

__all__ = ("has_fallocate", "try_fallocate", "prefault")

# madvise(2) advice that faults pages in writable (Linux 5.14 and later).
_MADV_POPULATE_WRITE = 23


def _libc() -> Optional[ctypes.CDLL]:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except (OSError, TypeError):
        return None


_LIBC = _libc()


def _function(name: str, *argtypes: Any) -> Optional[Callable[..., int]]:
    """A libc function returning ``int``, or None where libc lacks it."""
    if _LIBC is None:
        return None
    try:
        func = getattr(_LIBC, name)
    except AttributeError:
        return None
    func.restype = ctypes.c_int
    func.argtypes = list(argtypes)
    result: Callable[..., int] = func
    return result


_fallocate = _function(
    "fallocate", ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong
)
_madvise = _function("madvise", ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def _check(result: int) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, errno.errorcode.get(code, "Unknown error"))


def has_fallocate() -> bool:
    """Whether the Linux ``fallocate(2)`` system call can be made."""
    return _fallocate is not None


def try_fallocate(fd: int, offset: int, length: int, suppress_all_errors: bool = False) -> bool:
    """Allocate ``length`` bytes at ``offset`` of the file ``fd``
    (``fallocate(2)`` with mode 0, so the file grows to cover the range).

    Returns True when the call succeeded and False when ``fallocate(2)`` is
    unavailable or the file system does not support it (``EOPNOTSUPP``).
    Raises :class:`OSError` on any other error, unless
    ``suppress_all_errors`` is set, in which case it returns False.
    """
    if _fallocate is None:
        return False
    try:
        _check(_fallocate(fd, 0, offset, length))
    except OSError as e:
        if suppress_all_errors or e.errno == errno.EOPNOTSUPP:
            return False
        raise
    return True


def _madvise_populates() -> bool:
    """Whether ``MADV_POPULATE_WRITE`` works here (tried on one page)."""
    if _madvise is None:
        return False
    page = mmap.PAGESIZE
    with mmap.mmap(-1, page) as region:
        view = (ctypes.c_ubyte * page).from_buffer(region)
        try:
            return _madvise(ctypes.addressof(view), page, _MADV_POPULATE_WRITE) == 0
        finally:
            del view


_MADVISE_POPULATES = _madvise_populates()


def prefault(address: Any, length: int) -> None:
    """Fault in the ``length`` bytes of memory at ``address`` for writing.

    With ``MADV_POPULATE_WRITE`` the contents are kept; without it the
    memory is touched by zero-filling it, as tensorizer does.
    """
    if _MADVISE_POPULATES and _madvise is not None:
        _check(_madvise(address, length, _MADV_POPULATE_WRITE))
    else:
        ctypes.memset(address, 0, length)
