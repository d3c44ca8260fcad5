"""``tensorizer_rs.zipslicer``: torch.save checkpoints read lazily with range
reads, compared key by key with ``torch.load(weights_only=True)``."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest
import torch

import remote_servers
from tzhelpers import minilm_dir
from tensorizer_rs import zipslicer
from tensorizer_rs._native import FormatError

ROOT = pathlib.Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "vectors" / "torch"


def _bytes_of(t: torch.Tensor) -> bytes:
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def assert_same(got, want, path=()) -> None:
    """Same structure, and tensors with the same dtype, shape and bits."""
    if isinstance(want, dict):
        assert list(got.keys()) == list(want.keys()), path
        for k in want:
            assert_same(got[k], want[k], (*path, k))
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), path
        for i, w in enumerate(want):
            assert_same(got[i], w, (*path, i))
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), path
        assert got.dtype == want.dtype and got.shape == want.shape, (path, got.dtype, want.dtype)
        assert got.is_contiguous(), path
        if want.dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16, torch.bool):
            assert torch.equal(got, want), path
        assert _bytes_of(got) == _bytes_of(want), path
    else:
        assert got == want, path


def _check_meta(sd, ref) -> None:
    for k, v in ref.items():
        meta = sd.get_meta(k)
        if isinstance(v, torch.Tensor):
            assert meta.shape == v.shape and meta.size() == v.size() and meta.dtype == v.dtype, k
        else:
            assert meta is None, k


# ---- committed vectors ----------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["dtypes.pt", "nested.pt", "views.pt", "module.pt", "params.pt", "big_endian.pt"]
)
def test_committed_vectors_equal_torch_load(name):
    path = VECTORS / name
    ref = torch.load(path, weights_only=True)
    sd = zipslicer.load(path)
    assert_same(sd, ref)
    assert len(sd) == len(ref)


@pytest.mark.parametrize(
    "name,match",
    [
        ("hostile_os_system.pt", "posix"),
        ("hostile_eval.pt", "eval"),
        ("hostile_legacy.pt", "legacy"),
        ("hostile_deflated.pt", "compression"),
        ("hostile_short_view.pt", "past the end"),
        ("hostile_module.pt", "torch.nn.modules.linear.Linear"),
        ("hostile_bcomplex32.pt", "bcomplex32"),
    ],
)
def test_hostile_checkpoints_raise_format_errors(name, match):
    with pytest.raises(FormatError, match=match):
        zipslicer.load(VECTORS / name)


# ---- hand-built state dicts -------------------------------------------------------

DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
    torch.int64, torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool, torch.complex64,
    torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2,
]


def _hand_built() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(6, 8, generator=g)
    tied = torch.arange(20, dtype=torch.int64)
    sd: dict[str, torch.Tensor] = {
        "base": base,
        "transposed": base.t(),
        "column": base[:, 3],
        "rows": base[2:5],
        "strided": base[::2, 1::3],
        "expanded": torch.tensor([1.5, -2.0]).expand(5, 2),
        "permuted": torch.randn(2, 3, 4, generator=g).permute(2, 0, 1),
        "scalar": torch.tensor(3.25, dtype=torch.float64),
        "empty": torch.empty(0, 4),
        "tied_a": tied,
        "tied_b": tied,
        "tied_slice": tied[5:9],
    }
    for dt in DTYPES:
        x = torch.randn(3, 5, generator=g) * 10
        sd[f"dtype.{str(dt).split('.')[1]}"] = x.to(dt)
    sd["dtype.complex64.view"] = (torch.randn(4, 3, generator=g) + 1j).to(torch.complex64).t()
    return sd


def test_hand_built_views_tied_weights_and_dtypes(tmp_path):
    path = tmp_path / "hand.pt"
    torch.save(_hand_built(), path)
    ref = torch.load(path, weights_only=True)
    sd = zipslicer.load(str(path))
    assert list(sd.keys()) == list(ref.keys())
    _check_meta(sd, ref)
    assert sd.get_meta("transposed").stride == (1, 8)
    assert_same(sd, ref)
    assert torch.equal(sd["tied_a"], sd["tied_b"])


def test_dtype_converts_on_load(tmp_path):
    path = tmp_path / "hand.pt"
    state = {"a": torch.randn(4, 4), "b": torch.randn(3).t(), "h": torch.randn(2).half()}
    torch.save(state, path)
    sd = zipslicer.load(path, dtype=torch.bfloat16)
    for k, v in state.items():
        assert sd[k].dtype == torch.bfloat16
        assert torch.equal(sd[k], v.to(torch.bfloat16)), k


def test_reads_only_what_is_asked(tmp_path):
    path = tmp_path / "big.pt"
    state = {f"layer.{i}.weight": torch.randn(512, 1024) for i in range(8)}  # 16 MiB
    torch.save(state, path)
    sd = zipslicer.load(path)
    opened, requests = sd.bytes_read()
    assert opened < 1 << 20 and requests <= 8, (opened, requests)
    assert len(sd) == 8 and "layer.3.weight" in sd
    assert sd.get_meta("layer.3.weight").shape == (512, 1024)
    assert sd.bytes_read()[0] == opened
    t = sd["layer.3.weight"]
    assert torch.equal(t, state["layer.3.weight"])
    extra = sd.bytes_read()[0] - opened - 512 * 1024 * 4
    assert 0 <= extra <= 512, extra


def test_mapping_api_mirrors_zipslicer(tmp_path):
    path = tmp_path / "m.pt"
    state = {"a": torch.ones(2), "b": torch.zeros(3), "c": torch.arange(4)}
    torch.save(state, path)
    sd = zipslicer.load(path)
    assert len(sd) == 3 and "a" in sd and "z" not in sd
    sd["a"] = torch.full((2,), 7.0)
    assert torch.equal(sd["a"], torch.full((2,), 7.0))
    with pytest.raises(KeyError):
        sd["new"] = torch.ones(1)
    with pytest.raises(KeyError):
        sd["missing"]
    del sd["b"]
    assert list(sd.keys()) == ["a", "c"] and len(sd) == 2 and "b" not in sd
    with pytest.raises(KeyError):
        del sd["b"]
    items = sd.items()
    before = sd.bytes_read()[0]
    k, v = next(iter(items))
    assert k == "a"
    assert [k for k, _ in sd.items()] == ["a", "c"]
    assert [v.shape for v in sd.values()] == [(2,), (4,)]
    assert sd.bytes_read()[0] > before
    assert dict(sd).keys() == {"a", "c"}
    assert sd.get("zzz") is None
    # cache_tensors keeps the same object.
    cached = zipslicer.load(path, cache_tensors=True)
    assert cached["c"] is cached["c"]
    assert zipslicer.load(path)["c"] is not zipslicer.load(path)["c"]
    cached.verify()


def test_nested_state_dicts_come_back_nested(tmp_path):
    path = tmp_path / "nested.pt"
    state = {
        "model": {"encoder.weight": torch.randn(3, 2), "layers": [torch.ones(2), {"w": torch.zeros(1, 2)}]},
        "optimizer": {"step": 12, "lr": 0.125, "name": "adam", "flag": True, "none": None},
        7: torch.arange(3),
    }
    torch.save(state, path)
    sd = zipslicer.load(path)
    assert list(sd.keys()) == ["model", "optimizer", 7]
    assert sd.get_meta("model") is None
    model = sd["model"]
    assert list(model.keys()) == ["encoder.weight", "layers"]
    assert torch.equal(model["encoder.weight"], state["model"]["encoder.weight"])
    assert torch.equal(model["layers"][0], torch.ones(2))
    assert torch.equal(model["layers"][1]["w"], torch.zeros(1, 2))
    assert dict(sd["optimizer"]) == state["optimizer"]
    assert torch.equal(sd[7], torch.arange(3))


# ---- real models --------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_pt(tmp_path_factory) -> pathlib.Path:
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModel.from_pretrained(str(minilm_dir()), local_files_only=True)
    path = tmp_path_factory.mktemp("minilm") / "minilm.pt"
    torch.save(model.state_dict(), path)
    return path


def test_minilm_state_dict_equals_torch_load(minilm_pt):
    ref = torch.load(minilm_pt, weights_only=True)
    sd = zipslicer.load(minilm_pt)
    assert list(sd.keys()) == list(ref.keys()) and len(ref) > 50
    assert sd.bytes_read()[0] < 1 << 20
    _check_meta(sd, ref)
    assert_same(sd, ref)


def test_tied_weights_of_a_transformers_model_from_config(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        vocab_size=500, max_position_embeddings=32, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config)
    path = tmp_path / "bert.pt"
    torch.save(model.state_dict(), path)
    ref = torch.load(path, weights_only=True)
    sd = zipslicer.load(path)
    assert_same(sd, ref)
    emb, dec = "bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"
    if dec in ref:
        assert sd.get_meta(emb).storage_key == sd.get_meta(dec).storage_key
        assert torch.equal(sd[emb], sd[dec])


def test_over_http(tmp_path, minilm_pt):
    (tmp_path / "minilm.pt").write_bytes(minilm_pt.read_bytes())
    torch.save(_hand_built(), tmp_path / "hand.pt")
    with remote_servers.nginx(str(tmp_path)) as base:
        for name in ("minilm.pt", "hand.pt"):
            ref = torch.load(tmp_path / name, weights_only=True)
            sd = zipslicer.load(f"{base}/{name}")
            assert list(sd.keys()) == list(ref.keys())
            assert_same(sd, ref)


# ---- conversion: tzr convert, then the real tensorizer ---------------------------------


def _tzr() -> str:
    env = os.environ.get("TZR_BIN")
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for cand in [env, target / "release" / "tzr", target / "debug" / "tzr"]:
        if cand and pathlib.Path(cand).exists():
            return str(cand)
    pytest.skip("tzr is not built (cargo build -p tensorizer-native)")


def test_converted_checkpoint_loads_in_tensorizer(tmp_path, minilm_pt):
    tensorizer = pytest.importorskip("tensorizer")
    if getattr(tensorizer, "__name__", "") == "tensorizer_rs":
        pytest.skip("the real tensorizer package is needed")
    out = tmp_path / "model.tensors"
    run = subprocess.run([_tzr(), "convert", str(minilm_pt), str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    ref = torch.load(minilm_pt, weights_only=True)
    with tensorizer.TensorDeserializer(str(out), device="cpu", verify_hash=True) as d:
        assert list(d.keys()) == list(ref.keys())
        for k, v in ref.items():
            assert torch.equal(d[k], v), k
    st = tmp_path / "model.safetensors"
    run = subprocess.run([_tzr(), "convert", str(minilm_pt), str(st)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    safetensors = pytest.importorskip("safetensors.torch")
    loaded = safetensors.load_file(str(st))
    for k, v in ref.items():
        assert torch.equal(loaded[k], v), k
