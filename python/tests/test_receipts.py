"""Load receipts (``TensorDeserializer.receipt``) and strict module loads
(``load_into_module(strict=True)``): ours, tensorizer has neither."""

from __future__ import annotations

import io
import json
import os
import pathlib
import struct

import pytest
import torch

import remote_servers
import tensorizer_rs
from tensorizer_rs import LoadReceipt, StrictLoadError, TensorDeserializer, TensorSerializer


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))


NAMES = ["0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked",
         "2.weight", "2.bias"]


@pytest.fixture()
def model_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "m.tensors"
    with TensorSerializer(str(path)) as s:
        s.write_module(_model())
    return path


def _data_bytes(path: pathlib.Path) -> int:
    with TensorDeserializer(str(path), device="cpu", lazy_load=True) as d:
        return sum(e.data_length for e in d._all)


def test_eager_verified_load(model_file: pathlib.Path) -> None:
    with TensorDeserializer(str(model_file), device="cpu", verify_hash=True) as d:
        r = d.receipt
    assert isinstance(r, LoadReceipt)
    assert list(r.expected) == NAMES
    assert r.loaded == r.expected == r.verified
    assert r.skipped_by_filter == r.unverified == r.failed == r.pending == ()
    assert r.complete
    # Every byte the native reader read: at least all data, at most the file.
    assert set(r.bytes_by_source) == {"file"}
    assert _data_bytes(model_file) <= r.bytes_by_source["file"] <= os.path.getsize(model_file)
    assert r.total_bytes == r.bytes_by_source["file"]
    # The same after close, and immutable.
    assert d.receipt == r
    with pytest.raises(AttributeError):
        r.loaded = ()  # type: ignore[misc]
    assert hash(r) == hash(d.receipt)


def test_lazy_filter_and_unverified(model_file: pathlib.Path) -> None:
    keep = lambda name: not name.startswith("2.")  # noqa: E731
    d = TensorDeserializer(str(model_file), device="cpu", lazy_load=True, filter_func=keep)
    before = d.receipt
    # Before any load: nothing loaded, the index read.
    assert before.loaded == () and before.skipped_by_filter == ("2.weight", "2.bias")
    assert before.pending == tuple(NAMES[:7]) and not before.complete
    assert 0 < before.bytes_by_source["file"] <= os.path.getsize(model_file) - _data_bytes(model_file)
    d["0.weight"]
    r = d.receipt
    assert "0.weight" in r.loaded and r.unverified == r.loaded and r.verified == ()
    assert r.bytes_by_source["file"] > before.bytes_by_source["file"]
    assert r != before and before == before and r != object() and hash(r) != hash(before)
    # Checking later moves them to verified.
    m = _model()
    d.load_into_module(m, verify_hash=True)
    r = d.receipt
    assert r.loaded == r.verified == tuple(NAMES[:7]) and r.unverified == () and r.complete
    d.close()


def test_to_dict_is_json_and_repr_is_short(model_file: pathlib.Path) -> None:
    with TensorDeserializer(str(model_file), device="cpu") as d:
        r = d.receipt
    doc = json.loads(json.dumps(r.to_dict()))
    assert doc["loaded"] == NAMES and doc["verified"] == [] and doc["unverified"] == NAMES
    assert doc["bytes_by_source"] == dict(r.bytes_by_source)
    assert repr(r).startswith("LoadReceipt(expected=9, loaded=9, skipped_by_filter=0, verified=0, unverified=9,")


def test_mmap_bytes_are_their_own_source(model_file: pathlib.Path) -> None:
    with TensorDeserializer(str(model_file), device="cpu", mmap=True) as d:
        r = d.receipt
    assert r.bytes_by_source["mmap"] == _data_bytes(model_file)
    # The index and headers (and the small tensors' data between them,
    # which grouped header reads take in passing).
    assert 0 < r.bytes_by_source["file"] <= os.path.getsize(model_file)


def test_failed_tensor_is_named(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bad.tensors"
    with TensorSerializer(str(path)) as s:
        s.write_state_dict({"a": torch.arange(64, dtype=torch.float32), "b": torch.ones(64)})
    with TensorDeserializer(str(path), device="cpu", lazy_load=True) as d:
        offset = next(e for e in d._all if e.name == "b").data_offset
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))
    d = TensorDeserializer(str(path), device="cpu", lazy_load=True, verify_hash=True)
    with pytest.raises(tensorizer_rs.HashMismatchError):
        list(d.values())
    r = d.receipt
    # The window failed as a whole; the retry of "a" alone succeeded.
    assert r.loaded == r.verified == ("a",)
    with pytest.raises(tensorizer_rs.HashMismatchError):
        d["b"]
    assert d.receipt.failed == ("b",) and d.receipt.pending == ()
    d.close()


def _strip_hashes(path: pathlib.Path, name: str) -> None:
    """Rewrites tensor `name`'s hash block as empty (spec §7: hash_block_len
    1, hash_count 0); the freed bytes become the header's gap, so every
    offset stays the same. tensorizer's format allows it; no writer does it."""
    with TensorDeserializer(str(path), device="cpu", lazy_load=True) as d:
        e = next(e for e in d._all if e.name == name)
    raw = bytearray(path.read_bytes())
    h = e.header_offset
    n = struct.unpack_from("<H", raw, h + 11)[0]
    dlen = raw[h + 13 + n]
    ndim = raw[h + 14 + n + dlen]
    at = h + 15 + n + dlen + 4 * ndim
    struct.pack_into("<HB", raw, at, 1, 0)
    path.write_bytes(bytes(raw))


def test_a_tensor_without_hashes_is_unverified(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bare.tensors"
    with TensorSerializer(str(path)) as s:
        s.write_state_dict({"bare": torch.arange(3, dtype=torch.uint8), "hashed": torch.ones(2)})
    _strip_hashes(path, "bare")
    with TensorDeserializer(str(path), device="cpu", verify_hash=True) as d:
        assert d["bare"].tolist() == [0, 1, 2]
        r = d.receipt
    assert r.loaded == ("bare", "hashed") and r.verified == ("hashed",) and r.unverified == ("bare",)
    # After close, what was not looked up while open counts as checked:
    # closing reads nothing more.
    d = TensorDeserializer(str(path), device="cpu", verify_hash=True)
    read = d._reader.bytes_read()[0]
    d.close()
    assert d.receipt.verified == ("bare", "hashed") and d.receipt.bytes_by_source["file"] == read


def test_http_bytes(tmp_path: pathlib.Path, model_file: pathlib.Path) -> None:
    with remote_servers.nginx(str(model_file.parent)) as base:
        with TensorDeserializer(f"{base}/m.tensors", device="cpu") as d:
            r = d.receipt
    assert set(r.bytes_by_source) == {"http"} and r.bytes_by_source["http"] >= _data_bytes(model_file)
    with open(model_file, "rb") as f, TensorDeserializer(f, device="cpu") as d:
        assert set(d.receipt.bytes_by_source) == {"file"}  # a named local file is read by path
    with TensorDeserializer(tensorizer_rs.stream_io.open_stream(str(model_file)), device="cpu") as d:
        assert set(d.receipt.bytes_by_source) == {"file"}
    with TensorDeserializer(io.BytesIO(model_file.read_bytes()), device="cpu") as d:
        assert set(d.receipt.bytes_by_source) == {"stream"}


def test_s3_bytes(model_file: pathlib.Path) -> None:
    with remote_servers.s3_bucket() as (endpoint, _):
        creds = remote_servers.s3_credentials(endpoint)
        with tensorizer_rs.stream_io.open_stream("s3://models/m.tensors", "wb", **creds) as f:
            f.write(model_file.read_bytes())
        stream = tensorizer_rs.stream_io.open_stream("s3://models/m.tensors", "rb", **creds)
        with TensorDeserializer(stream, device="cpu", verify_hash=True) as d:
            r = d.receipt
    assert set(r.bytes_by_source) == {"s3"} and r.bytes_by_source["s3"] >= _data_bytes(model_file)
    assert r.verified == r.expected


# -- strict ----------------------------------------------------------------------------


def test_strict_accepts_a_matching_module(model_file: pathlib.Path) -> None:
    m = _model()
    with TensorDeserializer(str(model_file), device="cpu") as d:
        assert d.load_into_module(m, strict=True) == 9
    want = _model().state_dict()
    for k, v in m.state_dict().items():
        assert torch.equal(v, want[k]), k


def test_strict_names_missing_and_unexpected_before_changing_anything(model_file: pathlib.Path) -> None:
    # The module lacks layer "2" and has a layer "3" the file does not.
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    m.add_module("3", torch.nn.Linear(4, 2))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with TensorDeserializer(str(model_file), device="cpu", lazy_load=True) as d:
        with pytest.raises(StrictLoadError) as err:
            d.load_into_module(m, strict=True)
        # Nothing was loaded or changed.
        assert d.receipt.loaded == ()
        assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())
        assert isinstance(err.value, RuntimeError)
        assert err.value.missing_keys == ["3.weight", "3.bias"]
        assert err.value.unexpected_keys == ["2.weight", "2.bias"]
        assert str(err.value) == (
            "Error(s) in loading state_dict for Sequential:\n\t"
            'Missing key(s) in state_dict: "3.weight", "3.bias". \n\t'
            'Unexpected key(s) in state_dict: "2.weight", "2.bias". '
        )
        # torch says the same of the same state dict.
        with pytest.raises(RuntimeError) as torch_err:
            m.load_state_dict(dict(d), strict=True)
        assert str(torch_err.value) == str(err.value)
        # The default stays tensorizer's: what has a module is registered,
        # extra names too; a missing module raises KeyError.
        assert d.load_into_module(m, filter_func=lambda n: not n.startswith("2.")) == 7
        with pytest.raises(KeyError, match="Module '2'"):
            d.load_into_module(m)


def test_strict_counts_a_filter_and_shapes(model_file: pathlib.Path) -> None:
    with TensorDeserializer(str(model_file), device="cpu") as d:
        with pytest.raises(StrictLoadError, match='Missing key.*"1.running_mean"') as err:
            d.load_into_module(_model(), filter_func=lambda n: "running" not in n, strict=True)
        assert err.value.missing_keys == ["1.running_mean", "1.running_var"] and err.value.unexpected_keys == []
        wide = torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
        with pytest.raises(StrictLoadError, match=r"size mismatch for 0.weight: .* \[4, 8\] .* \[5, 8\]") as err:
            d.load_into_module(wide, strict=True)
        assert err.value.size_mismatches == [("0.weight", (4, 8), (5, 8)), ("0.bias", (4,), (5,))]


def test_numpy_arrays_count_as_loaded(model_file: pathlib.Path) -> None:
    with TensorDeserializer(str(model_file), device="cpu", lazy_load=True, verify_hash=True) as d:
        got = [name for _, _, name, *_ in d.read_numpy_arrays(num_tensors=2)]
        r = d.receipt
    assert r.loaded == r.verified == tuple(got) == tuple(NAMES[:2])
    assert r.pending == tuple(NAMES[2:])
