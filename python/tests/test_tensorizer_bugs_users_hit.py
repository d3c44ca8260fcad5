"""Bugs tensorizer users report (vLLM's tracker among them) that we do not
have: each test names the behaviour, and shows tensorizer's where it runs
here (spec §11.1, rows 17 to 19)."""

from __future__ import annotations

import os

import pytest
import torch

import remote_servers
import tzhelpers
from tensorizer_rs import HashMismatchError, TensorDeserializer, TensorSerializer, TensorType
from tensorizer_rs.stream_io import open_stream

if tzhelpers.IS_ORACLE:
    pytest.skip("these are the places where tensorizer itself differs", allow_module_level=True)


def test_dtype_casts_only_tensors_of_its_kind(tmp_path):
    """``dtype=torch.bfloat16`` (what vLLM passes) casts floating-point
    tensors; complex tensors keep their imaginary part and integer buffers
    (position ids) their values, as ``Module.to(dtype)`` leaves them.
    tensorizer casts every non-bool tensor: complex64 -> bf16 drops the
    imaginary part, int64 2049 -> bf16 is 2048."""
    path = str(tmp_path / "kinds.tensors")
    state = {
        "c": torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64),
        "f": torch.tensor([0.1, 2.5]),
        "pos": torch.tensor([0, 2049]),
        "mask": torch.tensor([True, False]),
    }
    with TensorSerializer(path) as s:
        s.write_state_dict(state)
    for lazy in (False, True):
        with TensorDeserializer(path, device="cpu", dtype=torch.bfloat16, lazy_load=lazy) as d:
            assert d["f"].dtype == torch.bfloat16
            assert torch.equal(d["c"], state["c"]), "complex values keep their imaginary part"
            assert torch.equal(d["pos"], state["pos"]) and d["pos"].dtype == torch.int64
            assert d["mask"].dtype == torch.bool
            assert d.get_slice("pos")[:].dtype == torch.int64
    with TensorDeserializer(path, device="cpu", dtype=torch.complex128) as d:
        assert d["c"].dtype == torch.complex128 and d["f"].dtype == torch.float32
    oracle = pytest.importorskip("tensorizer")
    with oracle.TensorDeserializer(path, device="cpu", dtype=torch.bfloat16) as d:
        assert d["c"].dtype == torch.bfloat16 and d["pos"].tolist() == [0, 2048]


def _tampered(tmp_path) -> str:
    path = str(tmp_path / "tampered.tensors")
    with TensorSerializer(path) as s:
        s.write_module(torch.nn.Linear(64, 64))
    raw = bytearray(open(path, "rb").read())
    raw[-200] ^= 0xFF  # inside the last tensor's data
    with open(path, "wb") as f:
        f.write(raw)
    return path


def test_verify_hash_checks_tensors_already_loaded(tmp_path):
    """``load_into_module(m, verify_hash=True)`` on a deserializer that
    loaded everything without checking (the default) checks those tensors;
    tensorizer checks nothing for tensors it already holds."""
    path = _tampered(tmp_path)
    with TensorDeserializer(path, device="cpu") as d:
        with pytest.raises(HashMismatchError):
            d.load_into_module(torch.nn.Linear(64, 64), verify_hash=True)
    with TensorDeserializer(path, device="cpu", lazy_load=True) as d:
        d[".weight"], d[".bias"]
        with pytest.raises(HashMismatchError):
            d.load_into_module(torch.nn.Linear(64, 64), verify_hash=True)
    # Checked once: an intact file loads, and a second check reads nothing new.
    good = str(tmp_path / "good.tensors")
    with TensorSerializer(good) as s:
        s.write_tensor(0, "w", TensorType.PARAM, torch.ones(4))
    with TensorDeserializer(good, device="cpu") as d:
        assert d.load_into_module(torch.nn.Module(), verify_hash=True) >= 0
        before = d._reader.bytes_read()
        d.load_into_module(torch.nn.Module(), verify_hash=True)
        assert d._reader.bytes_read() == before
    oracle = pytest.importorskip("tensorizer")
    with oracle.TensorDeserializer(path, device="cpu") as d:
        d.load_into_module(torch.nn.Linear(64, 64), verify_hash=True)  # no error


TOKEN = "tzr-session-token-123"


def test_s3_session_tokens_are_sent(tmp_path, monkeypatch):
    """Temporary credentials (STS: ``AWS_SESSION_TOKEN``) sign their token
    into every request. nginx stands for an S3 endpoint that refuses any
    request without the token."""
    bucket = tmp_path / "models"
    bucket.mkdir()
    with TensorSerializer(str(bucket / "m.tensors")) as s:
        s.write_tensor(0, "w", TensorType.PARAM, torch.arange(6.0))
    extra = f'if ($args !~ "X-Amz-Security-Token={TOKEN}") {{ return 403; }}'
    with remote_servers.nginx(str(tmp_path), extra) as endpoint:
        for name in ("S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.s3cfg
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIATEMPORARYKEY")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
        monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
        uri = "s3://models/m.tensors"
        with TensorDeserializer(open_stream(uri, s3_endpoint=endpoint, force_http=True), device="cpu") as d:
            assert d["w"].tolist() == list(range(6))
        monkeypatch.delenv("AWS_SESSION_TOKEN")
        with pytest.raises(PermissionError):
            TensorDeserializer(open_stream(uri, s3_endpoint=endpoint, force_http=True), device="cpu")
    assert os.environ.get("AWS_SESSION_TOKEN") is None
