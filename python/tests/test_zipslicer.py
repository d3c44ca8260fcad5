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


def test_values_without_tensors_come_back_as_values(tmp_path):
    """As zipslicer (and torch.load) return them: an ``_extra_state`` dict,
    lists, tuples, empty containers; not nested lazy mappings."""
    path = tmp_path / "extra.pt"
    extra = {"a": 2**64 - 1, "b": "this is extra state", "c": [1, 2, 3], "d": (1.5, None), "e": {}, "f": []}
    state = {
        "lin.weight": torch.randn(2, 2),
        "lin._extra_state": extra,
        "hyper": [0.9, 0.999],
        "empty": {},
        "tuple": (1, "x"),
    }
    torch.save(state, path)
    sd = zipslicer.load(path)
    assert list(sd.keys()) == list(state.keys())
    assert sd["lin._extra_state"] == extra and type(sd["lin._extra_state"]) is dict
    assert type(sd["lin._extra_state"]["c"]) is list and type(sd["lin._extra_state"]["d"]) is tuple
    assert sd["hyper"] == [0.9, 0.999] and type(sd["hyper"]) is list
    assert sd["empty"] == {} and sd["tuple"] == (1, "x")
    assert sd.get_meta("lin._extra_state") is None
    assert dict(sd.items()).keys() == state.keys()


def test_a_pickled_module_raises_unpickling_error_naming_the_global(tmp_path):
    """zipslicer raises pickle.UnpicklingError with its bootstrap message;
    ours is that class (and a FormatError) and names the global."""
    import pickle

    path = tmp_path / "module.pt"
    torch.save(torch.nn.ModuleList([torch.nn.Linear(3, 2)]), path)
    with pytest.raises(pickle.UnpicklingError) as err:
        zipslicer.load(path)
    assert isinstance(err.value, FormatError)
    assert "Error at zipslicer.load bootstrap stage" in str(err.value)
    assert "torch.nn.modules.container" in str(err.value)


def test_every_public_name_of_zipslicer_exists():
    real = pytest.importorskip("zipslicer")
    import types

    names = {n for n in vars(real) if not n.startswith("_") and not isinstance(getattr(real, n), types.ModuleType)}
    # Names zipslicer merely imports (typing helpers, stdlib) are not its API.
    names -= {"reduce", "OrderedDict"}
    missing = sorted(n for n in names if not hasattr(zipslicer, n))
    assert not missing, missing
    assert zipslicer.dtype_sizes == real.dtype_sizes
    assert zipslicer.dtype_by_name == real.dtype_by_name


def _resnet18() -> torch.nn.Module:
    """resnet18's layout (torchvision's), built locally: zipslicer's
    example fetches it from torch.hub, which cannot run offline."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else None
            )

    def layer(cin: int, cout: int, stride: int) -> nn.Sequential:
        return nn.Sequential(Block(cin, cout, stride), Block(cout, cout, 1))

    net = nn.Module()
    net.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
    net.bn1 = nn.BatchNorm2d(64)
    net.layer1, net.layer2 = layer(64, 64, 1), layer(64, 128, 2)
    net.layer3, net.layer4 = layer(128, 256, 2), layer(256, 512, 2)
    net.fc = nn.Linear(512, 1000)
    return net


def test_zipslicer_resnet18_example(tmp_path):
    """zipslicer's examples/example_resnet18.py, on a local resnet18."""
    s_dict = _resnet18().state_dict()
    path = tmp_path / "my_network_checkpoint_v123.pth"
    torch.save(s_dict, path)
    lazy_s_dict = zipslicer.load(str(path))
    layer3_tensors = {k: lazy_s_dict[k] for k in lazy_s_dict.keys() if k.startswith("layer3")}
    want = {k: v for k, v in s_dict.items() if k.startswith("layer3")}
    assert layer3_tensors.keys() == want.keys() and len(want) == 30
    for k, v in want.items():
        assert torch.equal(layer3_tensors[k], v), k
    assert lazy_s_dict.bytes_read()[0] < os.path.getsize(path) // 2


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
    pytest.skip("tzr is not built (cargo build -p tzr)")


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
