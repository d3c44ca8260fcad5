"""tensorizer_rs._syscalls, the private module tensorizer's own tests import,
behaves as tensorizer 2.12.1's: checked side by side with the real one."""

from __future__ import annotations

import ctypes
import errno
import importlib
import inspect
import mmap
import os
import tempfile
from types import ModuleType

import pytest

import tzhelpers


@pytest.fixture(params=["ours", "tensorizer"])
def syscalls(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "tensorizer":
        return importlib.import_module(f"{tzhelpers.import_oracle().__name__}._syscalls")
    return importlib.import_module(f"{tzhelpers.TZ_NAME}._syscalls")


def test_same_names_and_signatures() -> None:
    ours = importlib.import_module(f"{tzhelpers.TZ_NAME}._syscalls")
    theirs = importlib.import_module(f"{tzhelpers.import_oracle().__name__}._syscalls")
    assert set(ours.__all__) == set(theirs.__all__)
    for name in theirs.__all__:
        params = [
            [(p.name, p.kind, p.default) for p in inspect.signature(getattr(m, name)).parameters.values()]
            for m in (ours, theirs)
        ]
        assert params[0] == params[1], name


def test_fallocate_grows_the_file(syscalls: ModuleType) -> None:
    assert syscalls.has_fallocate()
    with tempfile.NamedTemporaryFile("wb+") as f:
        assert syscalls.try_fallocate(fd=f.fileno(), offset=50, length=1000) is True
        assert os.stat(f.fileno()).st_size == 1050


def test_fallocate_errors(syscalls: ModuleType) -> None:
    with tempfile.NamedTemporaryFile("wb+") as f:
        assert syscalls.try_fallocate(fd=f.fileno(), offset=-1, length=0, suppress_all_errors=True) is False
        with pytest.raises(OSError) as bad_range:
            syscalls.try_fallocate(fd=f.fileno(), offset=-1, length=0)
        assert bad_range.value.errno == errno.EINVAL
        assert os.stat(f.fileno()).st_size == 0
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(OSError) as on_pipe:
            syscalls.try_fallocate(fd=write_end, offset=0, length=1000)
        assert on_pipe.value.errno == errno.ESPIPE
    finally:
        os.close(read_end)
        os.close(write_end)


def test_prefault_keeps_or_zeroes(syscalls: ModuleType) -> None:
    page = mmap.PAGESIZE
    with mmap.mmap(-1, 2 * page) as region:
        region[:3] = b"abc"
        view = (ctypes.c_ubyte * (2 * page)).from_buffer(region)
        try:
            syscalls.prefault(ctypes.addressof(view), 2 * page)
        finally:
            del view
        # MADV_POPULATE_WRITE keeps the contents; the fallback zero-fills.
        assert region[:3] in (b"abc", b"\0\0\0")
