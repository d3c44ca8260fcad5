"""Exceptions carry what they are about as attributes: ``offset`` (the
absolute byte offset), ``tensor`` (the tensor's name) and ``location`` (the
path or URI), each ``None`` when the error has none, so callers need not
parse messages."""

from __future__ import annotations

import pytest
import torch

import remote_servers

import tensorizer_rs
from tensorizer_rs import _native
from tensorizer_rs.serialization import TensorDeserializer, TensorSerializer


def write(path, tensors):
    s = TensorSerializer(str(path))
    s.write_state_dict(tensors)
    s.close()


def test_a_truncated_file_names_the_offset_and_the_file(tmp_path):
    path = tmp_path / "m.tensors"
    write(path, {"w": torch.arange(64, dtype=torch.float32)})
    data = path.read_bytes()
    path.write_bytes(data[:100])
    with pytest.raises(_native.FormatError) as err:
        TensorDeserializer(str(path))
    e = err.value
    assert isinstance(e.offset, int) and 0 <= e.offset <= 100, e.offset
    assert e.location is not None and e.location.endswith("m.tensors")
    assert e.tensor is None


def test_a_hash_mismatch_names_the_tensor(tmp_path):
    path = tmp_path / "m.tensors"
    write(path, {"a": torch.zeros(16), "b": torch.arange(256, dtype=torch.float32)})
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # inside b's data, the last tensor
    path.write_bytes(bytes(data))
    with pytest.raises(_native.HashMismatchError) as err:
        with TensorDeserializer(str(path), verify_hash=True) as d:
            d["b"]
    assert err.value.tensor == "b"
    assert err.value.location is not None and err.value.location.endswith("m.tensors")


def test_a_missing_remote_object_names_its_location(tmp_path):
    with remote_servers.nginx(str(tmp_path)) as base:
        url = f"{base}/no-such.tensors"
        with pytest.raises(FileNotFoundError) as err:
            TensorDeserializer(url)
    assert getattr(err.value, "location", None) == url


def test_every_class_has_the_attributes():
    for cls in (
        _native.FormatError,
        _native.HashMismatchError,
        _native.CryptographyError,
        _native.ObjectChangedError,
        _native.RangeNotSupportedError,
        tensorizer_rs._native.TruncatedError,
    ):
        e = cls("raised from Python")
        assert (e.offset, e.tensor, e.location) == (None, None, None), cls
