"""``get_slice(key)[...]`` on ``LazyStateDict`` (torch.save checkpoints) and
``TensorDeserializer`` (tensorizer files, plain and encrypted): every dtype,
strided views, basic indexing compared with torch's own indexing of the
whole tensor, bytes read counted, tensor-parallel shards, and the same over
HTTP (nginx) and S3 (moto)."""

from __future__ import annotations

import os
import pathlib
import re

import pytest
import torch

import remote_servers
import tensorizer_rs
from tensorizer_rs import DecryptionParams, EncryptionParams, TensorDeserializer, TensorSerializer, tp_shard, zipslicer
from tensorizer_rs._native import HashMismatchError
from tensorizer_rs._slices import shard_range

ROOT = pathlib.Path(__file__).resolve().parents[2]
MIB = 1 << 20

DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint16, torch.uint32, torch.uint64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex32, torch.complex64, torch.complex128,
    torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
]  # fmt: skip

KEYS = [
    (), ..., 0, -1, 2, slice(1, 3), slice(None, None, 2), slice(-2, None), slice(3, 3), slice(10, 20),
    slice(-100, 100, 3), (slice(None), 1), (..., -1), (0, ..., slice(1, None, 2)), (None, slice(1, 2)),
    (slice(None), None, slice(0, 2)), (1, 2), (-1, -2, -3), (slice(None, None, 3), slice(1, None), 2),
    (slice(1, None), ..., None), (..., None, 0), (2, slice(0, 0)), (slice(None), slice(4, 1)),
]  # fmt: skip


def _bytes_of(t: torch.Tensor) -> bytes:
    flat = torch.empty(t.numel(), dtype=t.dtype).copy_(t.detach().reshape(-1))
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _values(dtype: torch.dtype, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        real = torch.complex64 if dtype == torch.complex32 else dtype
        return torch.randn(shape, dtype=real, generator=g).to(dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 4).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def _same(got: torch.Tensor, want: torch.Tensor, what: object) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape, want.shape)
    assert got.is_contiguous(), what
    assert _bytes_of(got) == _bytes_of(want), what


def _check_keys(sl: tzslice, full: torch.Tensor, name: object, keys: list[object] = KEYS) -> int:
    checked = 0
    for key in keys:
        try:
            want = full[key]  # type: ignore[index]
        except IndexError:
            with pytest.raises(IndexError):
                sl[key]
            continue
        _same(sl[key], want, (name, key))
        checked += 1
    return checked


tzslice = tensorizer_rs.TensorSlice


def _hand_built() -> dict[str, torch.Tensor]:
    sd: dict[str, torch.Tensor] = {}
    for n, dtype in enumerate(DTYPES):
        sd[f"d.{n}"] = _values(dtype, (4, 5, 6), n)
    base = torch.arange(7 * 9, dtype=torch.float32).reshape(7, 9)
    sd["base"] = base
    sd["transposed"] = base.t()  # shares base's storage
    sd["column"] = base[:, 3]
    sd["offset_rows"] = base[2:5]
    sd["strided"] = base[1::2, ::3]
    sd["expanded"] = torch.arange(5, dtype=torch.int16).reshape(5, 1).expand(5, 4)
    sd["scalar"] = torch.tensor(3.5, dtype=torch.float64)
    sd["empty"] = torch.empty(0, 3)
    sd["cube_permuted"] = torch.arange(2 * 3 * 4, dtype=torch.int32).reshape(2, 3, 4).permute(2, 0, 1)
    return sd


# ---- torch checkpoints --------------------------------------------------------------


def test_checkpoint_slices_equal_torch_indexing(tmp_path):
    torch.save(_hand_built(), tmp_path / "hand.pt")
    ref = torch.load(tmp_path / "hand.pt", weights_only=True)
    sd = zipslicer.load(tmp_path / "hand.pt")
    checked = 0
    for k, full in ref.items():
        sl = sd.get_slice(k)
        assert sl.shape == full.shape and sl.dtype == full.dtype and sl.get_shape() == list(full.shape), k
        checked += _check_keys(sl, full, k)
    assert checked > 300


def test_big_endian_checkpoints_are_swapped():
    path = ROOT / "tests" / "vectors" / "torch" / "big_endian.pt"
    ref = torch.load(path, weights_only=True)
    sd = zipslicer.load(path)
    assert sd._native.byte_order() == "big"
    checked = 0
    for k, full in ref.items():
        if isinstance(full, torch.Tensor):
            checked += _check_keys(sd.get_slice(k), full, k)
    assert checked > 10


def test_checkpoint_row_slice_reads_only_its_rows(tmp_path):
    w = torch.randn(1024, 1024)
    torch.save({"w": w, "wide": torch.randn(64, 65536)}, tmp_path / "m.pt")
    sd = zipslicer.load(tmp_path / "m.pt")
    sl = sd.get_slice("w")
    sl[0]  # reads the storage's local header once
    before = sd.bytes_read()
    _same(sl[100:110], w[100:110], "rows")
    after = sd.bytes_read()
    assert after[0] - before[0] == 10 * 4096 and after[1] - before[1] == 1
    # Columns of rows 256 KiB apart: one 4 KiB span per row, not the 16 MiB tensor.
    wide = sd.get_slice("wide")
    before = sd.bytes_read()
    _same(wide[:, :1024], torch.load(tmp_path / "m.pt", weights_only=True)["wide"][:, :1024], "columns")
    read = sd.bytes_read()[0] - before[0]
    assert 64 * 4096 <= read <= 64 * 4096 + 1024, read


def test_dtype_and_map_location_apply_to_slices(tmp_path):
    torch.save({"w": torch.randn(6, 4)}, tmp_path / "m.pt")
    sd = zipslicer.load(tmp_path / "m.pt", dtype=torch.float16)
    got = sd.get_slice("w")[1:3]
    assert got.dtype == torch.float16 and torch.equal(got, sd["w"][1:3])
    assert not got.requires_grad


def test_bad_keys_and_indexes(tmp_path):
    torch.save({"w": torch.randn(6, 4), "n": 3, "sub": {"x": torch.ones(2)}}, tmp_path / "m.pt")
    sd = zipslicer.load(tmp_path / "m.pt")
    with pytest.raises(KeyError):
        sd.get_slice("missing")
    with pytest.raises(TypeError):
        sd.get_slice("n")
    with pytest.raises(TypeError):
        sd.get_slice("sub")
    assert torch.equal(sd["sub"].get_slice("x")[:1], torch.ones(1))
    sl = sd.get_slice("w")
    with pytest.raises(IndexError):
        sl[6]
    with pytest.raises(IndexError):
        sl[0, 0, 0]
    with pytest.raises(IndexError):
        sl[..., ...]
    with pytest.raises(ValueError, match="step"):
        sl[::-1]
    with pytest.raises(ValueError, match="step"):
        sl[::0]
    with pytest.raises(TypeError):
        sl[[0, 1]]
    with pytest.raises(TypeError):
        sl[torch.tensor([True] * 6)]
    with pytest.raises(TypeError):
        sl[True]
    # Huge bounds clamp as Python's do; huge ints are out of range.
    assert torch.equal(sl[-(10**30) : 10**30], sd["w"])
    with pytest.raises(IndexError):
        sl[10**30]
    # numpy and 0-d tensor ints are ints.
    import numpy as np

    assert torch.equal(sl[np.int64(2)], sd["w"][2])
    assert torch.equal(sl[torch.tensor(-1)], sd["w"][-1])
    assert sl.get_dtype() == "F32" and sl.ndim == 2 and len(sl) == 6


def test_get_dtype_and_slices_match_safetensors(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from safetensors import safe_open

    tensors = {f"t{n}": _values(d, (4, 6), n) for n, d in enumerate(DTYPES) if d not in (
        torch.complex32, torch.complex128, torch.uint16, torch.uint32, torch.uint64,
        torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)}  # fmt: skip
    safetensors_torch.save_file(tensors, tmp_path / "m.safetensors")
    torch.save(tensors, tmp_path / "m.pt")
    sd = zipslicer.load(tmp_path / "m.pt")
    with safe_open(tmp_path / "m.safetensors", framework="pt") as f:
        for k in tensors:
            theirs, ours = f.get_slice(k), sd.get_slice(k)
            assert ours.get_dtype() == theirs.get_dtype(), k
            assert ours.get_shape() == theirs.get_shape(), k
            for key in [slice(1, 3), (slice(None), slice(2, 5)), (slice(0, 4, 2), slice(None))]:
                _same(ours[key], theirs[key].contiguous(), (k, key))


# ---- tensor-parallel shards ------------------------------------------------------------


def test_shards_concatenate_back_and_follow_tensor_split(tmp_path):
    full = torch.randn(10, 7, 3)
    torch.save({"w": full}, tmp_path / "m.pt")
    sl = zipslicer.load(tmp_path / "m.pt").get_slice("w")
    for dim in (0, 1, 2, -1):
        for world in (1, 2, 3, 4, 11):
            parts = [sl.shard(dim, rank, world) for rank in range(world)]
            for rank, (got, want) in enumerate(zip(parts, torch.tensor_split(full, world, dim))):
                _same(got, want.contiguous(), (dim, world, rank))
                assert torch.equal(tp_shard(full, dim, rank, world), want)
            assert torch.equal(torch.cat(parts, dim), full)
    assert [shard_range(10, r, 4) for r in range(4)] == [slice(0, 3), slice(3, 6), slice(6, 8), slice(8, 10)]
    assert torch.equal(sl.shard(0, 1, 2, even=True), full[5:])
    with pytest.raises(ValueError, match="evenly"):
        sl.shard(1, 0, 2, even=True)
    for bad in [(0, 2, 2), (0, -1, 2), (0, 0, 0)]:
        with pytest.raises(ValueError):
            sl.shard(*bad)
    with pytest.raises(IndexError):
        sl.shard(3, 0, 2)


# ---- tensorizer files ------------------------------------------------------------------


def _tensorizer_state() -> dict[str, torch.Tensor]:
    state = {f"d{n}": _values(d, (4, 5, 6), n) for n, d in enumerate(DTYPES) if d != torch.complex32}
    state["big"] = torch.randn(1000, 3000)  # 12 MB: six 2 MiB encryption chunks
    state["scalar"] = torch.tensor(2.5)
    return state


def _write(path: str, state: dict[str, torch.Tensor], key: bytes | None = None) -> None:
    enc = EncryptionParams(key) if key is not None else None
    s = TensorSerializer(path, encryption=enc)
    s.write_state_dict(state)
    s.close()


def _big_row_read(d: TensorDeserializer, rows: slice) -> int:
    before = d._reader.bytes_read()[0]
    d.get_slice("big")[rows]
    return int(d._reader.bytes_read()[0] - before)


@pytest.mark.parametrize("encrypted", [False, True])
def test_tensorizer_slices_equal_torch_indexing(tmp_path, encrypted):
    state = _tensorizer_state()
    key = os.urandom(32) if encrypted else None
    _write(str(tmp_path / "m.tensors"), state, key)
    dec = DecryptionParams.from_key(key) if key is not None else None
    with TensorDeserializer(tmp_path / "m.tensors", device="cpu", lazy_load=True, encryption=dec) as d:
        checked = 0
        for k, full in state.items():
            sl = d.get_slice(k)
            assert sl.shape == full.shape and sl.dtype == full.dtype
            checked += _check_keys(sl, full, k)
        assert checked > 300
        entry = next(e for e in d._all if e.name == "big")
        header = entry.data_offset - entry.header_offset
        # Rows 400..410 are bytes [4.8 MB, 4.92 MB): inside chunk 2.
        assert _big_row_read(d, slice(400, 410)) == header + (2 * MIB if encrypted else 10 * 3000 * 4)
        # Rows 500..600 are in chunks 2 and 3.
        assert _big_row_read(d, slice(500, 600)) == header + (4 * MIB if encrypted else 100 * 3000 * 4)
        assert len(d._cache) == 0  # nothing was loaded whole


def test_tensorizer_dtype_device_meta_and_paths(tmp_path):
    state = {"a": {"b": torch.arange(12.0).reshape(3, 4)}, "m": torch.ones(5, 2)}
    s = TensorSerializer(str(tmp_path / "m.tensors"))
    s.write_state_dict(state)
    s.close()
    with TensorDeserializer(tmp_path / "m.tensors", device="cpu", lazy_load=True, dtype=torch.float16) as d:
        got = d.get_slice(("a", "b"))[1:, 2]
        assert got.dtype == torch.float16 and torch.equal(got, torch.tensor([6.0, 10.0], dtype=torch.float16))
        with pytest.raises(KeyError):
            d.get_slice("a")
        with pytest.raises(KeyError):
            d.get_slice("nope")
    # Meta tensors (no stored data) slice to zeros.
    from tensorizer_rs import TensorType
    from tensorizer_rs._serializer import TensorSerializer as _S

    s2 = _S(str(tmp_path / "meta.tensors"))
    s2.write_tensor(0, "z", TensorType.STATE_DICT, torch.zeros(4, 3))
    s2.close()
    with TensorDeserializer(tmp_path / "meta.tensors", device="cpu", lazy_load=True) as d:
        _same(d.get_slice("z")[1:3], torch.zeros(2, 3), "zeros")


def test_verify_hash_checks_the_whole_tensor_once(tmp_path):
    state = {"big": torch.randn(1000, 3000), "small": torch.arange(10)}
    path = tmp_path / "m.tensors"
    _write(str(path), state)
    with TensorDeserializer(path, device="cpu", lazy_load=True, verify_hash=True) as d:
        sl = d.get_slice("big")
        before = d._reader.bytes_read()[0]
        _same(sl[3:4], state["big"][3:4], "first")
        assert d._reader.bytes_read()[0] - before >= 12_000_000  # streamed once to check the hashes
        before = d._reader.bytes_read()[0]
        _same(sl[5:6], state["big"][5:6], "second")
        assert d._reader.bytes_read()[0] - before < 20_000
        entry = next(e for e in d._all if e.name == "big")
    # Corrupt a byte near the end: slices elsewhere still read without
    # verify_hash; with it, the first slice raises.
    data = bytearray(path.read_bytes())
    data[entry.data_offset + 11_000_000] ^= 1
    path.write_bytes(bytes(data))
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        _same(d.get_slice("big")[3], state["big"][3], "unverified")
    with TensorDeserializer(path, device="cpu", lazy_load=True, verify_hash=True) as d:
        with pytest.raises(HashMismatchError):
            d.get_slice("big")[3]
        _same(d.get_slice("small")[2:4], state["small"][2:4], "other tensor")


def test_encrypted_slices_authenticate_their_chunks(tmp_path):
    state = {"big": torch.randn(1000, 3000)}
    key = os.urandom(32)
    path = tmp_path / "m.tensors"
    _write(str(path), state, key)
    with TensorDeserializer(path, device="cpu", lazy_load=True, encryption=DecryptionParams.from_key(key)) as d:
        entry = next(e for e in d._all if e.name == "big")
    data = bytearray(path.read_bytes())
    data[entry.data_offset + 8 * MIB + 100] ^= 1  # chunk 4
    path.write_bytes(bytes(data))
    with TensorDeserializer(path, device="cpu", lazy_load=True, encryption=DecryptionParams.from_key(key)) as d:
        _same(d.get_slice("big")[100], state["big"][100], "chunk 0")
        with pytest.raises(tensorizer_rs.CryptographyError):
            d.get_slice("big")[700]  # byte 8.4 MB: chunk 4


def test_tensorizer_shards(tmp_path):
    state = {"w": torch.randn(9, 6)}
    _write(str(tmp_path / "m.tensors"), state)
    with TensorDeserializer(tmp_path / "m.tensors", device="cpu", lazy_load=True) as d:
        sl = d.get_slice("w")
        for dim in (0, 1):
            parts = [tp_shard(sl, dim, r, 4) for r in range(4)]
            assert torch.equal(torch.cat(parts, dim), state["w"])


# ---- HTTP and S3 -------------------------------------------------------------------------


def test_slices_over_http(tmp_path):
    hand = _hand_built()
    torch.save(hand, tmp_path / "hand.pt")
    ref = torch.load(tmp_path / "hand.pt", weights_only=True)
    state = {"big": torch.randn(1000, 3000), "small": torch.arange(24).reshape(4, 6)}
    key = os.urandom(32)
    _write(str(tmp_path / "plain.tensors"), state)
    _write(str(tmp_path / "enc.tensors"), state, key)
    with remote_servers.nginx(str(tmp_path)) as base:
        sd = zipslicer.load(f"{base}/hand.pt")
        for k in ("base", "transposed", "strided", "d.10", "cube_permuted"):
            _check_keys(sd.get_slice(k), ref[k], k)
        for name, dec in [("plain", None), ("enc", DecryptionParams.from_key(key))]:
            with TensorDeserializer(f"{base}/{name}.tensors", device="cpu", lazy_load=True, encryption=dec) as d:
                _check_keys(d.get_slice("small"), state["small"], name)
                entry = next(e for e in d._all if e.name == "big")
                header = entry.data_offset - entry.header_offset
                before = d._reader.bytes_read()
                _same(d.get_slice("big")[10:20], state["big"][10:20], name)
                after = d._reader.bytes_read()
                assert after[0] - before[0] == header + (2 * MIB if dec else 10 * 3000 * 4), name
                assert after[1] - before[1] == 2, name  # the header, then the rows


def test_slices_over_s3(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.s3cfg
    state = {"big": torch.randn(1000, 3000), "small": torch.arange(24).reshape(4, 6)}
    key = os.urandom(32)
    torch.save(state, tmp_path / "m.pt")
    _write(str(tmp_path / "plain.tensors"), state)
    _write(str(tmp_path / "enc.tensors"), state, key)
    with remote_servers.s3_bucket() as (endpoint, client):
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        for name in ("m.pt", "plain.tensors", "enc.tensors"):
            client.upload_file(str(tmp_path / name), "models", name)  # type: ignore[attr-defined]
        sd = zipslicer.load("s3://models/m.pt")
        sl = sd.get_slice("big")
        sl[0]
        before = sd.bytes_read()[0]
        _same(sl[10:20], state["big"][10:20], "pt")
        assert sd.bytes_read()[0] - before == 10 * 3000 * 4
        for k in state:
            _check_keys(sd.get_slice(k), state[k], k)
        for name, dec in [("plain", None), ("enc", DecryptionParams.from_key(key))]:
            with TensorDeserializer(f"s3://models/{name}.tensors", device="cpu", lazy_load=True, encryption=dec) as d:
                entry = next(e for e in d._all if e.name == "big")
                before = d._reader.bytes_read()[0]
                _same(d.get_slice("big")[400:410], state["big"][400:410], name)
                want = (entry.data_offset - entry.header_offset) + (2 * MIB if dec else 10 * 3000 * 4)
                assert d._reader.bytes_read()[0] - before == want, name
                _check_keys(d.get_slice("small"), state["small"], name)


# -- load_shards: a tensor-parallel rank's tensors in one call ---------------


def _shard_file(path: pathlib.Path, encrypted: bool = False) -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    tensors = {
        "qkv.weight": torch.randn(1024, 512),  # sharded by rows (2 MiB)
        "out.weight": torch.randn(512, 1026),  # by columns, uneven (2 MiB)
        "qkv.bias": torch.randn(1024),
        "norm.weight": torch.randn(512),  # replicated
    }
    enc = EncryptionParams(bytes(range(32))) if encrypted else None
    with TensorSerializer(str(path), encryption=enc) as s:
        s.write_state_dict(tensors)
    return tensors


PLAN = {"qkv.weight": 0, "out.weight": 1, "qkv.bias": 0, "norm.weight": None}


@pytest.mark.parametrize("encrypted", [False, True])
def test_load_shards_gives_each_rank_its_share(tmp_path: pathlib.Path, encrypted: bool) -> None:
    path = tmp_path / "tp.tensors"
    tensors = _shard_file(path, encrypted)
    enc = DecryptionParams.from_key(bytes(range(32))) if encrypted else None
    world = 3
    for rank in range(world):
        got = tensorizer_rs.load_shards(str(path), PLAN, rank, world, device="cpu", encryption=enc,
                                        verify_hash=encrypted)
        assert list(got) == list(tensors)
        for name, t in tensors.items():
            dim = PLAN[name]
            want = t if dim is None else torch.tensor_split(t, world, dim)[rank]
            assert torch.equal(got[name], want), (name, rank)
    # Only what filter_func keeps; the plan may not name what is left out.
    got = tensorizer_rs.load_shards(str(path), {"qkv.weight": 0}, 1, 2, filter_func=lambda n: n.startswith("qkv."),
                                    encryption=enc)
    assert list(got) == ["qkv.weight", "qkv.bias"] and got["qkv.weight"].shape == (512, 512)
    with pytest.raises(KeyError, match="norm.weight"):
        tensorizer_rs.load_shards(str(path), PLAN, 0, 2, filter_func=lambda n: n.startswith("qkv."), encryption=enc)
    with pytest.raises(ValueError, match="even"):
        tensorizer_rs.load_shards(str(path), PLAN, 0, 4, even=True, encryption=enc)
    with pytest.raises(TypeError, match="process_group"):
        tensorizer_rs.load_shards(str(path), PLAN, 0, 2, process_group=None)


def test_load_shards_reads_only_the_shards_over_http(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "tp.tensors"
    _shard_file(path)
    size = path.stat().st_size
    log = tmp_path / "access.log"
    world = 4
    with remote_servers.nginx(str(tmp_path), f"access_log {log};") as base:
        for rank in range(world):
            # By rows: each rank's share of a weight is one byte range. (A
            # share of columns of rows this narrow is spans with small gaps
            # between them, which the slice plan reads through: §17.2.)
            # The query names the rank in the access log, so a log line
            # nginx writes late is still counted for the rank that asked.
            plan = {"qkv.weight": 0, "out.weight": 0}
            tensorizer_rs.load_shards(f"{base}/tp.tensors?rank={rank}", plan, rank, world)
    served = [0] * world
    with open(log) as f:
        for line in f:
            m = re.search(r'\?rank=(\d+) [^"]*" \d+ (\d+)', line)
            if m:
                served[int(m.group(1))] += int(m.group(2))
    # Each rank: the opening request (at most 1 MiB: header, index and the
    # first bytes) and its quarter of the two 2 MiB weights, not the file.
    for n in served:
        assert 0 < n <= (1 << 20) + 2 * (2 << 20) // world + (64 << 10), (n, size)
    assert sum(served) - world * (1 << 20) < size  # not the file per rank
