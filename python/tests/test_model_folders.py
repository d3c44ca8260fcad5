"""A model stored as shards (a folder, its ``*.index.json``) as one model in
``tensorizer_rs.fingerprint``, ``convert`` and ``load_state_dict`` (spec
§26.5), written by the real safetensors (its numpy API): the same answers
as the same tensors in one file, and shards loaded at once giving what one
after another gives."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import tensorizer_rs
from tensorizer_rs import _model

NAMES = [f"model-{k:05d}-of-00004.safetensors" for k in range(1, 5)]


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    out: dict[str, np.ndarray] = {}
    for i in range(12):
        dtype = (np.float32, np.float16, np.int64)[i % 3]
        out[f"layers.{i}.w"] = (rng.standard_normal((i + 1, 33)) * 100).astype(dtype)
    return out


def _folder(d: pathlib.Path, arrays: dict[str, np.ndarray], index: bool = True) -> pathlib.Path:
    d.mkdir()
    names = list(arrays)
    weight_map = {}
    for k, shard in enumerate(NAMES):
        part = {n: arrays[n] for n in names[k * 3 : (k + 1) * 3]}
        save_file(part, str(d / shard))
        weight_map.update(dict.fromkeys(part, shard))
    if index:
        doc = {"metadata": {}, "weight_map": weight_map}
        (d / "model.safetensors.index.json").write_text(json.dumps(doc))
    return d


def _numpy(t: object) -> np.ndarray:
    """A loaded tensor as numpy (a torch tensor when torch is installed)."""
    detach = getattr(t, "detach", None)
    return detach().numpy() if detach is not None else np.asarray(t)


def test_a_folder_fingerprints_and_converts_as_one_file(tmp_path: pathlib.Path) -> None:
    arrays = _arrays()
    model = _folder(tmp_path / "model", arrays)
    one = tmp_path / "one.safetensors"
    save_file(dict(reversed(arrays.items())), str(one))
    want = tensorizer_rs.fingerprint(one)
    assert tensorizer_rs.fingerprint(model) == want
    assert tensorizer_rs.fingerprint(model / "model.safetensors.index.json") == want
    out = tmp_path / "out.safetensors"
    done = tensorizer_rs.convert(model, out)
    assert done.tensors == len(arrays)
    got = load_file(str(out))
    assert sorted(got) == sorted(arrays) and all(np.array_equal(got[k], arrays[k]) for k in arrays)
    assert tensorizer_rs.fingerprint(out) == want


def test_an_index_naming_a_tensor_its_shard_lacks_is_refused(tmp_path: pathlib.Path) -> None:
    model = _folder(tmp_path / "model", _arrays())
    index = model / "model.safetensors.index.json"
    doc = json.loads(index.read_text())
    doc["weight_map"]["ghost"] = NAMES[0]
    index.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="IDX-005"):
        tensorizer_rs.fingerprint(model)
    with pytest.raises(ValueError, match="IDX-005"):
        tensorizer_rs.convert(model, tmp_path / "out.tensors")
    assert not (tmp_path / "out.tensors").exists()


@pytest.mark.parametrize("num_readers", [None, 1, 2, 3, 8])
def test_shards_loaded_at_once_give_what_one_after_another_gives(tmp_path: pathlib.Path, num_readers) -> None:
    arrays = _arrays()
    model = _folder(tmp_path / "model", arrays, index=num_readers != 3)
    options = {} if num_readers is None else {"num_readers": num_readers}
    one_by_one = dict(_model.iter_state_dict(model, **options))
    at_once = tensorizer_rs.load_state_dict(model, **options)
    assert list(at_once) == list(one_by_one) and sorted(at_once) == sorted(arrays)
    assert all(np.array_equal(_numpy(at_once[k]), arrays[k]) for k in arrays)


@pytest.mark.parametrize(("readers", "each"), [(8, 2), (6, 1), (2, 1), (1, 1)])
def test_the_shards_share_the_reader_threads(tmp_path: pathlib.Path, monkeypatch, readers: int, each: int) -> None:
    model = _folder(tmp_path / "model", _arrays())
    seen: list[int] = []
    real = _model.TensorDeserializer

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:
            seen.append(kwargs["num_readers"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(_model, "TensorDeserializer", Counting)
    tensorizer_rs.load_state_dict(model, num_readers=readers)
    # At least one reader a shard: the next shard prepares beside this one's reads.
    at_once = max(1, min(tensorizer_rs._native.MAX_SHARDS_AT_ONCE, len(NAMES), readers))
    assert seen == [each] * len(NAMES) and at_once * each <= readers


def test_a_cooperative_load_takes_one_shard_at_a_time(tmp_path: pathlib.Path, monkeypatch) -> None:
    model = _folder(tmp_path / "model", _arrays())
    seen: list[int] = []

    class Refused(Exception):
        pass

    def opening(*args: object, **kwargs: Any) -> None:
        seen.append(kwargs["num_readers"])
        raise Refused

    monkeypatch.setattr(_model, "TensorDeserializer", opening)
    with pytest.raises(Refused):
        tensorizer_rs.load_state_dict(model, num_readers=8, process_group=object())
    assert seen and set(seen) == {8}
