"""Cold loads (a file not in the page cache, as a serving pod's first load
finds it) read around the cache into memory placed at each tensor's place
in a file block, and give exactly the bytes of a cached load: our files
and tensorizer's, arenas and large tensors, encrypted and verified."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import tensorizer_rs
from tensorizer_rs import _native
from tzhelpers import evict

MIB = 1 << 20


def _state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    sd = {f"layer{i}.weight": torch.randn(MIB // 2 + 3 * i, generator=g).to(torch.bfloat16) for i in range(20)}
    sd["embed.weight"] = torch.randn(72 * MIB // 4 + 5, generator=g)  # over one arena: memory of its own
    sd["layer0.bias"] = torch.arange(7, dtype=torch.int16)
    return sd


def _load(path: Path, **kw: object) -> dict[str, torch.Tensor]:
    with tensorizer_rs.TensorDeserializer(str(path), **kw) as d:  # type: ignore[arg-type]
        return {k: v.clone() for k, v in d.items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)), k


@pytest.mark.parametrize("writer", ["ours", "tensorizer"])
def test_a_cold_load_equals_a_cached_one(tmp_path: Path, writer: str) -> None:
    sd = _state_dict()
    path = tmp_path / "m.tensors"
    if writer == "ours":
        s = tensorizer_rs.TensorSerializer(str(path))
    else:
        tensorizer = pytest.importorskip("tensorizer")
        s = tensorizer.TensorSerializer(str(path))
    s.write_state_dict(sd)
    s.close()
    evict(path)
    cold = _load(path)
    _same(cold, sd)
    _same(_load(path, verify_hash=True), sd)


def test_long_tensors_sit_at_their_place_in_a_file_block(tmp_path: Path) -> None:
    sd = _state_dict()
    path = tmp_path / "m.tensors"
    with tensorizer_rs.TensorSerializer(str(path)) as s:
        s.write_state_dict(sd)
    evict(path)
    with tensorizer_rs.TensorDeserializer(str(path)) as d:
        offsets = {e.name: e.data_offset for e in d._all}
        loaded = dict(d.items())
        for name, t in loaded.items():
            if t.nbytes >= 64 << 10:
                assert t.data_ptr() % _native.ALLOCATION_ALIGN == offsets[name] % _native.ALLOCATION_ALIGN, name
            assert t.data_ptr() % _native.ARENA_ALIGN == 0, name


def test_long_safetensors_tensors_sit_at_their_place_in_a_file_block(tmp_path: Path) -> None:
    # safetensors aligns data to 8 bytes only: placed there, it reads straight in.
    st = pytest.importorskip("safetensors.torch")
    sd = _state_dict()
    path = tmp_path / "m.safetensors"
    st.save_file(sd, str(path))
    evict(path)
    with tensorizer_rs.TensorDeserializer(str(path)) as d:
        offsets = {e.name: e.data_offset for e in d._all}
        loaded = dict(d.items())
    placed = {n for n, t in loaded.items() if t.nbytes >= 64 << 10 and offsets[n] % 8 == 0}
    assert any(offsets[n] % _native.ARENA_ALIGN for n in placed), "no tensor 8- but not 64-aligned"
    for name, t in loaded.items():
        assert torch.equal(t, sd[name]), name
        if name in placed:
            assert t.data_ptr() % _native.ALLOCATION_ALIGN == offsets[name] % _native.ALLOCATION_ALIGN, name
        assert t.data_ptr() % 8 == 0, name


def test_a_cold_encrypted_load_is_checked(tmp_path: Path) -> None:
    sd = _state_dict()
    path = tmp_path / "m.tensors"
    key = tensorizer_rs.EncryptionParams.random()
    with tensorizer_rs.TensorSerializer(str(path), encryption=key) as s:
        s.write_state_dict(sd)
    evict(path)
    dec = tensorizer_rs.DecryptionParams.from_key(key.key)
    _same(_load(path, encryption=dec, verify_hash=True), sd)
    # One flipped bit in the big tensor fails the cold load, naming it.
    with path.open("r+b") as f:
        f.seek(-(40 * MIB), os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 1]))
    evict(path)
    with pytest.raises(Exception, match="embed.weight"):
        _load(path, encryption=dec)
