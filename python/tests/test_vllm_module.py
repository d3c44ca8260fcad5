"""``tensorizer_rs.vllm``: writing a Hugging Face model folder per
tensor-parallel rank (``serialize_for_tp``, ``python -m tensorizer_rs.vllm``).
vLLM itself reads these files in ``tests/vllm-plugin-smoke.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tzhelpers

if tzhelpers.IS_ORACLE:
    pytest.skip("tensorizer_rs.vllm is tensorizer_rs's own", allow_module_level=True)

from safetensors.torch import save_file  # noqa: E402

import tensorizer_rs  # noqa: E402
from tensorizer_rs import vllm as tv  # noqa: E402


def _state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {
        "model.embed_tokens.weight": torch.randn(10, 4, dtype=torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(6, 4),
        "model.norm.weight": torch.rand(4),
        "lm_head.weight": torch.randn(10, 4),
    }


def _hf_folder(root: Path, state: dict[str, torch.Tensor]) -> Path:
    """Two safetensors shards with their index, and a stray file the index
    does not name (vLLM skips it too)."""
    names = list(state)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for file, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(root / file))
    save_file({"stray": torch.zeros(1)}, str(root / "consolidated.safetensors"))
    weight_map = {k: file for file, keys in shards.items() for k in keys}
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (root / "config.json").write_text("{}")
    return root


def _read(uri: str, **kw: object) -> dict[str, torch.Tensor]:
    with tensorizer_rs.TensorDeserializer(uri, device="cpu", **kw) as d:
        return {str(k): v.clone() for k, v in d.items()}


def _same(loaded: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(loaded) == sorted(expected)
    for k, v in expected.items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k], v), k


def test_a_safetensors_folder_becomes_one_full_file_per_rank(tmp_path: Path) -> None:
    state = _state()
    (tmp_path / "hf").mkdir()
    folder = _hf_folder(tmp_path / "hf", state)
    written = tv.serialize_for_tp(folder, str(tmp_path / "out" / "model-%02d.tensors"), 2)
    assert written == [str(tmp_path / "out" / f"model-{r:02d}.tensors") for r in range(2)]
    for uri in written:
        _same(_read(uri), state)
    # The scratch folder beside the outputs is gone.
    assert sorted(os.listdir(tmp_path / "out")) == ["model-00.tensors", "model-01.tensors"]


def test_torch_shards_a_module_and_a_state_dict(tmp_path: Path) -> None:
    state = _state()
    folder = tmp_path / "bin"
    folder.mkdir()
    torch.save(state, folder / "pytorch_model.bin")
    torch.save({"lr": torch.ones(1)}, folder / "training_args.bin")
    (out,) = tv.serialize_for_tp(folder, str(tmp_path / "bin.tensors"), 1)
    _same(_read(out), state)

    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    written = tv.serialize_for_tp(module, str(tmp_path / "module-%01d.tensors"), 2)
    for uri in written:
        _same(_read(uri), {k: v.detach() for k, v in module.state_dict().items()})
    (out,) = tv.serialize_for_tp(state, str(tmp_path / "sd.tensors"), 1)
    _same(_read(out), state)


def test_to_s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import remote_servers

    (tmp_path / "hf").mkdir()
    folder = _hf_folder(tmp_path / "hf", _state())
    with remote_servers.s3_bucket("models") as (endpoint, client):
        for name, value in (("S3_ENDPOINT_URL", endpoint), ("S3_ACCESS_KEY_ID", "testing"),
                            ("S3_SECRET_ACCESS_KEY", "testing")):  # fmt: skip
            monkeypatch.setenv(name, value)
        written = tv.serialize_for_tp(folder, "s3://models/qwen/m-%02d.tensors", 2)
        assert written == ["s3://models/qwen/m-00.tensors", "s3://models/qwen/m-01.tensors"]
        for r, uri in enumerate(written):
            local = tmp_path / f"{r}.tensors"
            client.download_file("models", uri.removeprefix("s3://models/"), str(local))  # type: ignore[attr-defined]
            _same(_read(str(local)), _state())
    assert not Path("s3:").exists()


def test_encrypted(tmp_path: Path) -> None:
    key = tensorizer_rs.EncryptionParams.random()
    written = tv.serialize_for_tp(_state(), str(tmp_path / "enc-%02d.tensors"), 2, encryption=key)
    for uri in written:
        _same(_read(uri, encryption=tensorizer_rs.DecryptionParams.from_key(key.key)), _state())


@pytest.mark.parametrize(
    ("uri", "tp", "words"),
    [
        ("m.tensors", 2, "needs one rank directive"),
        ("m-%d.tensors", 2, "needs one rank directive"),  # vLLM's test wants %0 and one digit
        ("m-%02d-%02d.tensors", 2, "needs one rank directive"),
        ("m-%02d.tensors", 1, "reads the URI as written"),
        ("m.tensors", 0, "tp_size must be"),
        ("m.tensors", True, "tp_size must be"),
    ],
)
def test_rank_uris_refuses(uri: str, tp: int, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        tv.rank_uris(uri, tp)


def test_rank_uris_as_vllm_formats_them() -> None:
    assert tv.rank_uris("s3://b/m-%04d.tensors", 3) == [f"s3://b/m-{r:04d}.tensors" for r in range(3)]
    assert tv.rank_uris("s3://b/m%20x.tensors", 1) == ["s3://b/m%20x.tensors"]


def test_a_tensor_in_two_shards_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "dup"
    folder.mkdir()
    save_file({"w": torch.ones(2)}, str(folder / "a.safetensors"))
    save_file({"w": torch.zeros(2)}, str(folder / "b.safetensors"))
    with pytest.raises(ValueError, match="more than one weight file holds"):
        tv.serialize_for_tp(folder, str(tmp_path / "out" / "m-%02d.tensors"), 2)
    assert os.listdir(tmp_path / "out") == []


def test_an_index_larger_than_tensorizers_from_many_shards(tmp_path: Path) -> None:
    """The index is sized from every file's header before the first is
    written (a small first file must not size it)."""
    folder = tmp_path / "many"
    folder.mkdir()
    save_file({"a": torch.ones(1)}, str(folder / "model-00001-of-00002.safetensors"))
    many = {f"model.layers.{i}.self_attn.rotary_emb.inv_freq_and_a_long_name.weight": torch.ones(1) for i in range(3000)}
    save_file(many, str(folder / "model-00002-of-00002.safetensors"))
    written = tv.serialize_for_tp(folder, str(tmp_path / "m-%02d.tensors"), 2)
    with tensorizer_rs.TensorDeserializer(written[1], device="cpu", lazy_load=True) as d:
        assert len(d.keys()) == 3001


def test_a_folder_without_weights(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        tv.serialize_for_tp(tmp_path, str(tmp_path / "m.tensors"), 1)


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    _hf_folder(folder, _state())
    key = tmp_path / "key"
    key.write_bytes(bytes(range(32)))
    args = [str(folder), str(tmp_path / "m-%02d.tensors"), "--tp-size", "2", "--key-file", str(key)]
    done = subprocess.run([sys.executable, "-m", "tensorizer_rs.vllm", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / f"m-{r:02d}.tensors") for r in range(2)]
    _same(_read(done.stdout.split()[1], encryption=tensorizer_rs.DecryptionParams.from_key(bytes(range(32)))), _state())
    # Errors: one line on stderr, exit 1.
    for bad, words in (
        (args[:2], "reads the URI as written"),
        ([str(folder), str(tmp_path / "m.tensors"), "--key-file", str(tmp_path / "nope")], "nope"),
    ):
        assert tv.main(bad) == 1
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


# -- one file, each rank's share (the plugin's tp_slices) ----------------------


class _Stand(torch.nn.Module):
    """A stand-in for a vLLM model at tensor-parallel size `tp`: a
    vocabulary-parallel embedding and a column-parallel layer (cut along
    their first dimension), a row-parallel layer (weight cut along its
    second, bias whole), a replicated norm and a top-level parameter."""

    def __init__(self, tp: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(8 // tp, 4)
        self.up = torch.nn.Linear(4, 6 // tp)
        self.down = torch.nn.Linear(6 // tp, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.scale = torch.nn.Parameter(torch.rand(4))
        self.register_buffer("steps", torch.arange(3))


#: Each stand-in tensor's tensor-parallel cut (None: replicated).
_CUTS = {"embed.weight": 0, "up.weight": 0, "up.bias": 0, "down.weight": 1}


@pytest.mark.parametrize("encrypted", [False, True])
def test_each_rank_loads_its_share_of_one_file(tmp_path: Path, encrypted: bool) -> None:
    torch.manual_seed(0)
    full = _Stand(1)
    uri = str(tmp_path / "full.tensors")
    key = tensorizer_rs.EncryptionParams.random() if encrypted else None
    with tensorizer_rs.TensorSerializer(uri, encryption=key) as s:
        s.write_module(full)  # the top module's own tensors are named ".scale", ".steps"
    expected = full.state_dict()
    options = {"encryption": tensorizer_rs.DecryptionParams.from_key(key.key)} if key else {}
    for rank in range(2):
        model = _Stand(2)
        shares = dict(tv.load_tp_share(model, uri, rank, 2, verify_hash=True, **options))
        assert sorted(shares) == sorted(expected)
        for name, tensor in expected.items():
            dim = _CUTS.get(name)
            want = tensor if dim is None else torch.tensor_split(tensor, 2, dim)[rank]
            assert torch.equal(shares[name], want), (rank, name)
            assert shares[name].shape == model.state_dict()[name].shape


def test_the_plan() -> None:
    stored = {"a": (8, 4), "b": (4, 6), "c": (4,)}
    targets = {"a": (4, 4), "b": (4, 3), "c": (4,)}
    assert tv.tp_slice_plan(stored, targets, 1, 2) == {"a": 0, "b": 1, "c": None}
    # An uneven size splits as tensor_split does: rank 0 of 2 gets 3 of 5.
    assert tv.tp_slice_plan({"a": (5,)}, {"a": (3,)}, 0, 2) == {"a": 0}


@pytest.mark.parametrize(
    ("stored", "target", "fused", "words"),
    [
        ((8, 4), (4, 2), None, "cut along one dimension"),  # two dimensions differ
        ((8, 4), (5, 4), None, "cut along one dimension"),  # padded (vLLM's vocabulary padding)
        ((8, 4), (32,), None, "cut along one dimension"),  # reshaped
        ((8, 4), (4, 4), [4, 2, 2, 2], "not 8 positions cut evenly"),  # replicated key/value heads
        ((8, 4), (4, 4), [3, 5], "not 8 positions cut evenly"),
        ((8, 4), None, None, "no parameter or buffer"),
    ],
)
def test_the_plan_refuses(
    stored: tuple[int, ...], target: tuple[int, ...] | None, fused: list[int] | None, words: str
) -> None:
    targets = {} if target is None else {"w": target}
    with pytest.raises(ValueError, match=words):
        tv.tp_slice_plan({"w": stored}, targets, 0, 2, fused={} if fused is None else {"w": fused})


@pytest.mark.parametrize("encrypted", [False, True])
def test_a_fused_layer_is_cut_block_by_block(tmp_path: Path, encrypted: bool) -> None:
    """vLLM's merged layers (QKV, gate_up) hold each rank's part of several
    tensors side by side: the share is each block's share, concatenated."""

    class Merged(torch.nn.Linear):
        def __init__(self, tp: int) -> None:
            super().__init__(4, 12 // tp)
            self.output_sizes = [8, 2, 2]  # vLLM's: the full sizes, at any tensor-parallel size

    class Model(torch.nn.Module):
        def __init__(self, tp: int) -> None:
            super().__init__()
            self.qkv = Merged(tp)
            self.norm = torch.nn.LayerNorm(4)

    uri = str(tmp_path / "merged.tensors")
    full = Model(1)
    key = tensorizer_rs.EncryptionParams.random() if encrypted else None
    with tensorizer_rs.TensorSerializer(uri, encryption=key) as s:
        s.write_module(full)
    options = {"encryption": tensorizer_rs.DecryptionParams.from_key(key.key)} if key else {}
    for rank in range(2):
        shares = dict(tv.load_tp_share(Model(2), uri, rank, 2, verify_hash=True, **options))
        for name in ("qkv.weight", "qkv.bias"):
            t = full.state_dict()[name]
            blocks = torch.split(t, [8, 2, 2])
            want = torch.cat([torch.tensor_split(b, 2)[rank] for b in blocks])
            assert torch.equal(shares[name], want), (rank, name)
        assert torch.equal(shares["norm.weight"], full.norm.weight.detach())
    whole = dict(tv.load_tp_share(Model(1), uri, 0, 1, **options))
    assert sorted(whole) == ["norm.bias", "norm.weight", "qkv.bias", "qkv.weight"]
