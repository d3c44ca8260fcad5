"""torch.save zip checkpoints load through the one native reader, as
safetensors files do (spec §16.10): ``TensorDeserializer`` and
``load_state_dict`` give torch.load's tensors, eager and lazy, mapped,
cold around the page cache, from a ``*.bin.index.json`` folder; what the
reader cannot load (a view that is not one run of its storage, a value that
is not a tensor) is refused in one line naming what can."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tensorizer_rs
from tensorizer_rs import _native
from tzhelpers import evict

MIB = 1 << 20


def _state_dict() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    base = torch.arange(40, dtype=torch.int64)
    return {
        "embed.weight": torch.randn(3 * MIB, generator=g).to(torch.bfloat16),  # 6 MiB
        "layer.weight": torch.randn(64, 33, generator=g),
        "layer.bias": torch.zeros(33, dtype=torch.float16),
        "tied_a": base,
        "tied_b": base,  # the same storage: loaded as two copies
        "tail": base[30:],  # contiguous, 30 elements into its storage
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 3),
        "empty_odd": torch.zeros(0, 2).t(),  # strides that are not row-major: nothing to read
    }


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert torch.equal(got[k], v), k


def _load(path: Path, **kw: object) -> dict[str, torch.Tensor]:
    with tensorizer_rs.TensorDeserializer(str(path), **kw) as d:  # type: ignore[arg-type]
        return {k: v.detach().clone() for k, v in d.items()}


@pytest.mark.parametrize(
    "options",
    [{}, {"lazy_load": True}, {"mmap": True}, {"num_readers": 1}, {"plaid_mode": True}],
    ids=["eager", "lazy", "mmap", "one-reader", "plaid"],
)
def test_a_checkpoint_loads_as_torch_load_gives_it(tmp_path: Path, options: dict[str, object]) -> None:
    path = tmp_path / "model.pt"
    torch.save(_state_dict(), path)
    _same(_load(path, **options), torch.load(path, weights_only=True))


def test_the_options_mean_what_they_mean_for_other_files(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save(_state_dict(), path)
    want = torch.load(path, weights_only=True)
    got = _load(path, dtype=torch.float32, filter_func=lambda name: name.startswith("layer."))
    assert list(got) == ["layer.weight", "layer.bias"]
    assert all(v.dtype == torch.float32 for v in got.values())
    assert torch.equal(got["layer.bias"], want["layer.bias"].float())
    with tensorizer_rs.TensorDeserializer(str(path)) as d:
        assert d._reader.format == "torch" and d._reader.version is None


def test_a_cold_checkpoint_reads_around_the_page_cache_to_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "big.pt"
    g = torch.Generator().manual_seed(7)
    sd = {f"w{i}": torch.randn(MIB + 17 * i, generator=g) for i in range(6)}  # 24 MiB
    torch.save(sd, path)
    evict(path)
    _same(_load(path), sd)


def test_a_bin_index_folder_loads_as_one_state_dict(tmp_path: Path) -> None:
    sd = _state_dict()
    names = list(sd)
    halves = {"pytorch_model-00001-of-00002.bin": names[:4], "pytorch_model-00002-of-00002.bin": names[4:]}
    for shard, keys in halves.items():
        torch.save({k: sd[k].clone() for k in keys}, tmp_path / shard)
    weight_map = {k: shard for shard, keys in halves.items() for k in keys}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    got = tensorizer_rs.load_state_dict(tmp_path)
    _same({k: got[k] for k in names}, sd)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"w": torch.zeros(4, 6).t()}, 'tensor "w" is not contiguous in its storage'),
        ({"w": torch.zeros(2), "step": 3}, '"step" is not a tensor'),
    ],
    ids=["transposed", "an-int"],
)
def test_what_the_reader_cannot_load_is_named_with_what_can(tmp_path: Path, value: object, named: str) -> None:
    path = tmp_path / "x.pt"
    torch.save(value, path)
    with pytest.raises(ValueError) as caught:
        tensorizer_rs.TensorDeserializer(str(path))
    message = str(caught.value)
    assert named in message and "tzr convert" in message and "zipslicer" in message
    assert "\n" not in message
    assert not isinstance(caught.value, _native.CheckpointUnpicklingError)


def test_nested_tensors_keep_their_structure(tmp_path: Path) -> None:
    path = tmp_path / "nested.pt"
    w, b = torch.ones(2, 3), torch.arange(4)
    torch.save({"model": {"w": w}, "layers": [b, b * 2]}, path)
    with tensorizer_rs.TensorDeserializer(str(path)) as d:
        assert torch.equal(d["model"]["w"], w)
        assert torch.equal(d["layers"][1], b * 2)


def test_names_of_one_storage_cannot_claim_memory_the_file_does_not_hold(tmp_path: Path) -> None:
    path = tmp_path / "tied.pt"
    shared = torch.zeros(64 * 1024, dtype=torch.uint8)
    torch.save({f"t{i}": shared for i in range(8)}, path)  # 8 names, 64 KiB stored once
    with pytest.raises(ValueError, match="share storages so often"):
        tensorizer_rs.TensorDeserializer(str(path))
    torch.save({f"t{i}": shared for i in range(2)}, path)  # tied weights load, as copies
    with tensorizer_rs.TensorDeserializer(str(path)) as d:
        a, b = d["t0"], d["t1"]
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
