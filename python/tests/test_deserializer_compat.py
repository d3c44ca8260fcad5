"""Deserializer behaviours real code depends on, checked against the real
tensorizer side by side (issue 14's list of smaller differences)."""

from __future__ import annotations

import pytest
import torch

from tzhelpers import import_oracle, module_with_buffers, tz, write_with


def _mixed_file(path):
    sd = {
        "a": torch.arange(4, dtype=torch.float32),
        "b": torch.ones(3, dtype=torch.bfloat16),
        "c": torch.arange(2, dtype=torch.int64),
    }
    write_with(tz, path, lambda s: s.write_state_dict(sd))


def _read_until_error(module, path):
    names, error = [], None
    # lazy: a non-lazy deserializer has consumed every tensor at
    # construction, and read_numpy_arrays then yields nothing (both libraries).
    with module.TensorDeserializer(str(path), device="cpu", lazy_load=True) as d:
        try:
            for _, _, name, arr, _, _ in d.read_numpy_arrays():
                names.append((name, arr.tolist()))
        except ValueError as e:
            error = str(e)
    return names, error


def test_read_numpy_arrays_yields_the_arrays_before_an_opaque_one(tmp_path):
    path = tmp_path / "mixed.tensors"
    _mixed_file(path)
    ours = _read_until_error(tz, path)
    assert ours[0] == [("a", [0.0, 1.0, 2.0, 3.0])]
    assert ours[1] is not None and "allow_raw_data" in ours[1]
    theirs = _read_until_error(import_oracle(), path)
    assert ours == theirs


def test_read_numpy_arrays_opaque_first_raises_at_once(tmp_path):
    path = tmp_path / "bf16.tensors"
    write_with(tz, path, lambda s: s.write_state_dict({"b": torch.ones(2, dtype=torch.bfloat16)}))
    with tz.TensorDeserializer(str(path), device="cpu", lazy_load=True) as d:
        with pytest.raises(ValueError, match="opaque datatype"):
            next(iter(d.read_numpy_arrays()))


def _loaded_state_dict_keys(module, path):
    fresh = module_with_buffers(seed=1)
    with module.TensorDeserializer(str(path), device="cpu") as d:
        d.load_into_module(fresh)
    return list(fresh.state_dict().keys()), fresh


def test_load_into_module_registers_buffers_as_tensorizer_does(tmp_path):
    """tensorizer registers every loaded buffer as persistent; we do the same,
    so code comparing state_dict() keys after a load sees the same set."""
    path = tmp_path / "module.tensors"
    write_with(tz, path, lambda s: s.write_module(module_with_buffers()))
    ours, fresh = _loaded_state_dict_keys(tz, path)
    theirs, _ = _loaded_state_dict_keys(import_oracle(), path)
    assert ours == theirs
    assert "1.scratch" in ours
    assert torch.equal(fresh[1].scratch, torch.arange(3, dtype=torch.int32))
