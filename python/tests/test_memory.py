"""CPU memory of loaded tensors (python/src/host_memory.rs, loader/copies.rs):
huge-page regions start on a 2 MiB boundary and are whole huge pages, each
tensor owns a storage of exactly its bytes, arenas are filled in one native
call, and the memory is returned when the tensors die."""

from __future__ import annotations

import gc
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tensorizer_rs
from tensorizer_rs import _loader, _native

MIB = 1 << 20


def _mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    sd: dict[str, torch.Tensor] = {}
    # Sizes around the arena and huge-page limits: tiny, a few MiB (packed
    # into arenas, read whole), odd sizes, and one larger than an arena.
    for i, rows in enumerate([1, 3, 700, 1748, 1749, 2048, 5000, 1]):
        sd[f"p{i}"] = torch.randn(rows, 1024, generator=g).to(torch.bfloat16)
    sd["big"] = torch.randn(_native.ARENA_BYTES // 4 + 12345, generator=g)
    sd["odd"] = torch.arange(3 * MIB + 7, dtype=torch.uint8)
    return sd


def _write(path: Path, sd: dict[str, torch.Tensor]) -> None:
    s = tensorizer_rs.TensorSerializer(str(path))
    s.write_state_dict(sd)
    s.close()


@pytest.mark.parametrize("size", [2 * MIB, 2 * MIB + 1, 5 * MIB + 123, 64 * MIB - 3])
def test_host_memory_starts_on_a_huge_page_and_has_exactly_the_size(size: int) -> None:
    raw = _native.HostMemory(size)
    assert len(raw) == size
    assert raw.address % _native.HUGE_PAGE == 0
    view = np.frombuffer(raw, dtype=np.uint8)
    assert not view.any()  # zeroed
    view[:] = 1  # writable, all of it
    assert int(view[-1]) == 1
    led = _native.HostMemory(size, True, 4096)
    assert led.address % _native.HUGE_PAGE == 4096 and len(led) == size


def test_arenas_are_huge_page_aligned_from_the_huge_page_minimum() -> None:
    assert _native.HostMemory(_native.HUGE_PAGE_MIN).address % _native.HUGE_PAGE == 0
    small = _native.HostMemory(1000)
    assert len(small) == 1000
    assert small.address % _native.ALLOCATION_ALIGN == 0
    assert bytes(memoryview(small)) == bytes(1000)


def test_host_memory_outlives_its_last_holder_only() -> None:
    raw = _native.HostMemory(3 * MIB)
    t = torch.frombuffer(raw, dtype=torch.uint8)
    del raw
    gc.collect()
    t[:] = 7  # the tensor keeps the memory alive
    assert int(t.sum()) == 7 * 3 * MIB


def test_loaded_tensors_own_storages_of_exactly_their_bytes(tmp_path: Path) -> None:
    sd = _state_dict()
    path = tmp_path / "m.tensors"
    _write(path, sd)
    d = tensorizer_rs.TensorDeserializer(str(path))
    phase = {e.name: e.data_offset % _native.ALLOCATION_ALIGN for e in d._all}
    loaded = dict(d.items())
    for name, t in loaded.items():
        assert torch.equal(t, sd[name]), name
        nbytes = t.numel() * t.element_size()
        assert t.untyped_storage().nbytes() == nbytes, name
        assert t.data_ptr() % _native.ARENA_ALIGN == 0, name
        # torch.save of one tensor writes its bytes, not a neighbour's.
        buf = io.BytesIO()
        torch.save(t, buf)
        assert len(buf.getvalue()) < nbytes + 4096, name
    # Tensors loaded alone (larger than an arena) start in the first block
    # of a huge page, at their place in a file block (a cold load reads
    # them straight in). A short first tensor of a huge-page arena starts
    # on the huge page.
    assert loaded["big"].data_ptr() % _native.HUGE_PAGE == phase["big"]
    assert loaded["p0"].data_ptr() % _native.HUGE_PAGE == 0


def test_small_tensors_load_into_several_arenas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 40 tensors of 4 MiB: three arenas of at most ARENA_BYTES (64 MiB),
    # allocated by the allocator and then filled by one native call
    # (python/src/loader/copies.rs, `fill`).
    sd = {f"s{i}": torch.full((MIB,), float(i)) for i in range(40)}
    path = tmp_path / "m.tensors"
    _write(path, sd)
    sizes: list[int] = []
    real = _loader.TorchAllocator.arena

    def counting(self: Any, size: int, huge: bool) -> Any:
        sizes.append(size)
        return real(self, size, huge)

    monkeypatch.setattr(_loader.TorchAllocator, "arena", counting)
    loaded = dict(tensorizer_rs.TensorDeserializer(str(path), verify_hash=True).items())
    assert len(sizes) > 2 and max(sizes) <= _native.ARENA_BYTES
    for name, t in loaded.items():
        assert torch.equal(t, sd[name]), name


def test_load_arenas_rejects_overlapping_or_oversized_offsets(tmp_path: Path) -> None:
    path = tmp_path / "m.tensors"
    _write(path, {"a": torch.zeros(1000, dtype=torch.uint8), "b": torch.zeros(1000, dtype=torch.uint8)})
    d = tensorizer_rs.TensorDeserializer(str(path), lazy_load=True)
    reader = d._reader
    buf = np.zeros(4096, dtype=np.uint8)
    with pytest.raises(ValueError):
        tensorizer_rs._native.load_arenas(reader, [[0, 1]], [buf], [[0, 500]])
    with pytest.raises(ValueError):
        tensorizer_rs._native.load_arenas(reader, [[0]], [buf], [[4000]])
    with pytest.raises(ValueError):
        tensorizer_rs._native.load_arenas(reader, [[0], [1]], [buf], [[0]])
    tensorizer_rs._native.load_arenas(reader, [[0, 1]], [buf], [[0, 2048]])
    d.close()


def test_memory_is_returned_when_the_tensors_die(tmp_path: Path) -> None:
    sd = {f"w{i}": torch.full((1024, 1024), i, dtype=torch.bfloat16) for i in range(48)}  # 96 MiB
    path = tmp_path / "m.tensors"
    _write(path, sd)
    del sd
    gc.collect()
    maps0 = _mappings()
    loaded = dict(tensorizer_rs.TensorDeserializer(str(path)).items())
    assert all(int(t[0, 0]) == i for i, t in enumerate(loaded.values()))
    rss1 = _rss_kib()
    del loaded
    gc.collect()
    assert _mappings() <= maps0 + 2
    assert rss1 - _rss_kib() > 80 * 1024


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"), reason="no THP")
def test_arenas_get_the_pages_the_load_plan_chose(tmp_path: Path) -> None:
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        if "[never]" in f.read():
            pytest.skip("THP disabled")
    sd = {f"w{i}": torch.ones((1024, 1024), dtype=torch.bfloat16) for i in range(32)}  # 64 MiB
    path = tmp_path / "m.tensors"
    _write(path, sd)

    def anon_huge_kib() -> int:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
        return 0

    # Huge pages unless the load reads through the page cache on a machine
    # whose host takes free memory back (spec §23.4).
    with tensorizer_rs.TensorDeserializer(str(path), lazy_load=True) as lazy:
        huge = lazy._loader.copies(lazy._all, False, False).huge_pages
    assert isinstance(huge, bool)
    before = anon_huge_kib()
    loaded = dict(tensorizer_rs.TensorDeserializer(str(path)).items())
    grown = anon_huge_kib() - before
    if huge:
        # Huge pages are best effort (memory may be fragmented): most, not all.
        assert grown >= 32 * 1024
    else:
        assert grown < 8 * 1024
    del loaded


def test_loaded_tensors_survive_the_file_being_rewritten_and_truncated(tmp_path: Path) -> None:
    sd = _state_dict()
    path = tmp_path / "m.tensors"
    _write(path, sd)
    loaded = dict(tensorizer_rs.TensorDeserializer(str(path)).items())
    with open(path, "r+b") as f:
        f.write(b"\xff" * (8 * MIB))
        f.truncate(0)
    for name, t in loaded.items():
        assert torch.equal(t, sd[name]), name  # private copies: no fault, no change
