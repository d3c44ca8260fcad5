"""Small tensors are read into slabs (spec §11.3), each still with a storage
of its own: values, dtypes, shapes, grad flags and storages are as if each
were allocated alone, and what users do next with a loaded state dict
(safetensors.save_file, torch.save, in-place updates) behaves."""

from __future__ import annotations

import io

import pytest
import torch

import tzhelpers
from tensorizer_rs import _native
from tzhelpers import all_dtypes_state_dict, assert_same_tensor, tz, write_with

pytestmark = pytest.mark.skipif(tzhelpers.IS_ORACLE, reason="slabs are tensorizer_rs's own layout")


def _small_state_dict():
    sd = all_dtypes_state_dict()
    for i in range(300):
        sd[f"layer.{i}.bias"] = torch.randn(7 + i % 5)
        sd[f"layer.{i}.norm"] = torch.randn(2, 3)
    sd["big"] = torch.randn(4096)  # 16 KiB: loaded on its own
    return sd


@pytest.mark.parametrize("lazy", [False, True])
def test_values_and_bounds(tmp_path, lazy):
    sd = _small_state_dict()
    path = tmp_path / "small.tensors"
    write_with(tz, path, lambda s: s.write_state_dict(sd))
    with tz.TensorDeserializer(str(path), device="cpu", lazy_load=lazy) as d:
        got = dict(d)
    assert list(got) == list(sd)
    for k, v in sd.items():
        assert_same_tensor(got[k], v, k)
        assert isinstance(got[k], torch.nn.Parameter)
        assert got[k].requires_grad == (v.dtype.is_floating_point or v.dtype.is_complex)
    # every tensor has a storage of its own, exactly its bytes (what code
    # hashing or saving t.untyped_storage() relies on, as tensorizer's tests do)
    ptrs = set()
    for k, t in got.items():
        storage = t.untyped_storage()
        assert storage.nbytes() == t.numel() * t.element_size(), k
        assert t.storage_offset() == 0, k
        if t.numel():
            assert storage.data_ptr() % _native.ARENA_ALIGN == 0, k
            ptrs.add(storage.data_ptr())
    assert len(ptrs) == sum(1 for t in got.values() if t.numel())


def test_what_users_do_next(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    sd = {f"b{i}": torch.randn(5) for i in range(50)}
    path = tmp_path / "small.tensors"
    write_with(tz, path, lambda s: s.write_state_dict(sd))
    with tz.TensorDeserializer(str(path), device="cpu") as d:
        got = {k: v.detach() for k, v in d.items()}
    out = tmp_path / "again.safetensors"
    safetensors_torch.save_file(got, str(out))
    again = safetensors_torch.load_file(str(out))
    for k in sd:
        assert torch.equal(again[k], sd[k])
    # torch.save of one tensor writes its own bytes, not its slab's
    buf = io.BytesIO()
    torch.save(got["b7"], buf)
    assert len(buf.getvalue()) < 2000
    buf = io.BytesIO()
    torch.save(got, buf)
    buf.seek(0)
    for k, v in torch.load(buf, weights_only=True).items():
        assert torch.equal(v, sd[k])
    # in-place updates stay in their own tensor
    got["b0"].add_(1)
    assert torch.equal(got["b1"], sd["b1"])


def test_arena_loads_refuse_bad_offsets(tmp_path):
    """load_arenas checks offsets against each arena."""
    import numpy as np

    sd = {"a": torch.arange(4, dtype=torch.int32), "b": torch.arange(3, dtype=torch.int64)}
    path = tmp_path / "two.tensors"
    write_with(tz, path, lambda s: s.write_state_dict(sd))
    reader = tz._native.NativeReader(str(path))
    buf = np.zeros(128, dtype=np.uint8)
    load = tz._native.load_arenas
    load(reader, [[0, 1]], [buf], [[0, 64]])
    assert buf[:16].view(np.int32).tolist() == [0, 1, 2, 3]
    assert buf[64:88].view(np.int64).tolist() == [0, 1, 2]
    for offsets in ([0, 8], [64, 0], [0, 120]):  # overlapping, descending, past the end
        with pytest.raises(ValueError):
            load(reader, [[0, 1]], [buf], [offsets])
    with pytest.raises(ValueError):
        load(reader, [[0, 1]], [buf], [[0]])
    with pytest.raises(IndexError):
        load(reader, [[7]], [buf], [[0]])
