"""``tensorizer_rs.safetensors`` against the published safetensors 0.8.

Every case calls the same function of both libraries with the same
arguments and must end the same way: equal results (tensors equal, in the
same order where safetensors fixes one; bytes equal for the writers), or
an exception in ours of the class the original raised (its
``SafetensorError`` matched to ours by name). Deliberate differences are
listed in ``DIFFERENT`` (spec §26) and must still differ, so that the list
cannot outlive its reason.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

import remote_servers
import tzhelpers

safetensors = pytest.importorskip("safetensors")
import safetensors.torch  # noqa: E402

import tensorizer_rs.safetensors  # noqa: E402
import tensorizer_rs.safetensors.torch  # noqa: E402

if tzhelpers.IS_ORACLE:
    pytest.skip("compares tensorizer_rs with the original itself", allow_module_level=True)

THEIRS = types.SimpleNamespace(top=safetensors, torch=safetensors.torch)
OURS = types.SimpleNamespace(top=tensorizer_rs.safetensors, torch=tensorizer_rs.safetensors.torch)

#: Every dtype both write, a 0-d tensor and an empty one.
SAMPLE = {
    "b": torch.arange(10.0),
    "a.weight": torch.arange(12.0).reshape(3, 4).to(torch.bfloat16),
    "empty": torch.zeros(0, 3),
    "c": torch.tensor([1, -2], dtype=torch.int64),
    "flag": torch.tensor([True, False]),
    "f8": torch.arange(5.0).to(torch.float8_e4m3fn),
    "h": torch.arange(7.0).half(),
    "scalar": torch.tensor(3.0),
    "i8": torch.tensor([-1, 2], dtype=torch.int8),
    "u8": torch.tensor([250], dtype=torch.uint8),
    "d": torch.arange(3.0, dtype=torch.float64),
    "z": torch.tensor([1 + 2j], dtype=torch.complex64),
    "i32": torch.tensor([7], dtype=torch.int32),
    "i16": torch.tensor([7], dtype=torch.int16),
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("st") / "sample.safetensors"
    safetensors.torch.save_file(SAMPLE, str(path), metadata={"format": "pt", "note": "ok"})
    return path


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except Exception as e:  # noqa: BLE001 (every outcome is compared)
        return "raised", e


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        if type(a) is not type(b) or (a.dtype, a.shape, a.requires_grad) != (b.dtype, b.shape, b.requires_grad):
            return False
        return bool(torch.equal(a.view(torch.uint8) if a.dtype.itemsize == 1 else a, b.view(torch.uint8) if b.dtype.itemsize == 1 else b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


def same_end(theirs: tuple[str, Any], ours: tuple[str, Any]) -> bool:
    if theirs[0] != ours[0]:
        return False
    if theirs[0] == "ok":
        return same_value(theirs[1], ours[1])
    t, o = type(theirs[1]), type(ours[1])
    return isinstance(ours[1], t) or t.__name__ == o.__name__


def cases(path: str) -> dict[str, Callable[[Any], Any]]:
    """Each case, as a call on one library's namespace."""
    out: dict[str, Callable[[Any], Any]] = {}
    good = {"path": path, "pathlib": pathlib.Path(path)}
    for label, name in good.items():
        out[f"load_file({label})"] = lambda lib, name=name: lib.torch.load_file(name)
    for label, name in {"missing": path + ".missing", "bytes": os.fsencode(path), "int": 3}.items():
        out[f"load_file({label})"] = lambda lib, name=name: lib.torch.load_file(name)
    for backend in ("mmap", "pread", "xyz", None, 1):
        out[f"load_file(backend={backend!r})"] = lambda lib, b=backend: lib.torch.load_file(path, backend=b)
    for device in ("cpu", None, -1, "meta", "xyz", torch.device("cpu"), 1.5, "CPU", "cpu:0", "cuda", "cuda:0", 0):
        out[f"load_file(device={device!r})"] = lambda lib, d=device: lib.torch.load_file(path, device=d)
    for framework in ("pt", "torch", "pytorch", "np", "numpy", "xyz", None, 1):
        out[f"safe_open(framework={framework!r}).keys()"] = lambda lib, f=framework: _keys(lib, path, f)
    out["safe_open: offset_keys, metadata, get_tensors"] = lambda lib: _tour(lib, path)
    out["safe_open: get_tensor of a missing name"] = lambda lib: _with(lib, path, lambda f: f.get_tensor("nope"))
    out["safe_open: get_slice"] = lambda lib: _with(lib, path, lambda f: _slices(f.get_slice("a.weight")))
    out["safe_open: a slice out of range"] = lambda lib: _with(lib, path, lambda f: f.get_slice("a.weight")[5])
    advanced: dict[str, Any] = {
        "a list": [1, 2], "a list in a tuple": (slice(None), [0, 3]), "a tensor": torch.tensor([1, 2]),
        "booleans": [True, False, True], "an int and a list": (0, [1, 2]), "a str": "a", "a float": 1.5,
    }  # fmt: skip
    for label, key in advanced.items():
        out[f"safe_open: get_slice[{label}]"] = lambda lib, k=key: _with(lib, path, lambda f: f.get_slice("a.weight")[k])
    out["safe_open(np): get_slice"] = lambda lib: _with(lib, path, lambda f: _np(f.get_slice("b")[2:5]), "np")
    for label, key in {**advanced, "None": None, "an empty list": []}.items():
        out[f"safe_open(np): get_slice[{label}]"] = lambda lib, k=key: _with(lib, path, lambda f: _np(f.get_slice("b")[k]), "np")
    for framework in ("tf", "flax", "jax", "mlx", "paddle"):
        out[f"safe_open(framework={framework!r}).get_tensor"] = lambda lib, f=framework: _with(
            lib, path, lambda o: o.get_tensor("b"), f
        )
    out["safe_open: closed after with"] = lambda lib: _closed(lib, path)
    out["safe_open: numpy"] = lambda lib: _with(lib, path, lambda f: f.get_tensor("b").tolist(), "np")
    out["load(bytes)"] = lambda lib: dict(sorted(lib.torch.load(pathlib.Path(path).read_bytes()).items()))
    out["load(not safetensors)"] = lambda lib: lib.torch.load(b"abc")
    out["load(str)"] = lambda lib: lib.torch.load("abc")
    out["save(sample)"] = lambda lib: lib.torch.save(SAMPLE)
    out["save(metadata)"] = lambda lib: lib.torch.save(SAMPLE, metadata={"format": "pt"})
    bad: dict[str, tuple[Any, Any]] = {
        "non-contiguous": ({"x": torch.ones(4, 4).t()}, None),
        "shared": ({"x": (t := torch.ones(4)), "y": t}, None),
        "views overlapping": ({"x": (u := torch.arange(10.0))[:6], "y": u[4:]}, None),
        "views of one storage, disjoint": ({"x": u[:5], "y": u[5:]}, None),
        "a fused weight's chunks": (dict(zip("qkv", torch.arange(12.0).reshape(6, 2).chunk(3))), None),
        "metadata not str": ({"x": torch.ones(4)}, {"a": 1}),
        "metadata a list": ({"x": torch.ones(4)}, [("a", "b")]),
        "metadata a str": ({"x": torch.ones(4)}, "ab"),
        "complex128": ({"x": torch.ones(2, dtype=torch.complex128)}, None),
        "a list": ([torch.ones(4)], None),
        "a key not str": ({1: torch.ones(4)}, None),
        "not a tensor": ({"x": 3}, None),
    }
    for label, (tensors, metadata) in bad.items():
        out[f"save({label})"] = lambda lib, t=tensors, m=metadata: lib.torch.save(t, metadata=m)
    folder = os.path.dirname(path)
    out["save_file(into a folder)"] = lambda lib: lib.torch.save_file({"x": torch.ones(2)}, folder)
    out["save_file(a missing folder)"] = lambda lib: lib.torch.save_file({"x": torch.ones(2)}, os.path.join(folder, "no", "x"))
    return out


def _np(a: Any) -> Any:
    return type(a).__name__, a.tolist()


def _keys(lib: Any, path: str, framework: Any) -> list[str]:
    with lib.top.safe_open(path, framework=framework) as f:
        return list(f.keys())


def _with(lib: Any, path: str, use: Callable[[Any], Any], framework: str = "pt") -> Any:
    with lib.top.safe_open(path, framework) as f:
        return use(f)


def _tour(lib: Any, path: str) -> Any:
    with lib.top.safe_open(path, "pt") as f:
        # safetensors keeps __metadata__ in a hash map: its order is not the file's.
        return f.offset_keys(), sorted(f.metadata().items()), f.get_tensors(), f.get_tensor("scalar")


def _slices(s: Any) -> Any:
    return s.get_shape(), s.get_dtype(), s[1:, :2], s[..., 3], s[-1]


def _closed(lib: Any, path: str) -> Any:
    f = lib.top.safe_open(path, "pt")
    f.get_tensor("b")  # usable without `with`
    with f:
        pass
    return f.keys()


#: Cases that end differently on purpose, with the reason (spec §26.2).
DIFFERENT: dict[str, str] = {
    **{
        f"safe_open(framework={f!r}).get_tensor": "only pt and np: SafetensorError naming them, where safetensors "
        "imports the framework (ModuleNotFoundError here)"
        for f in ("tf", "flax", "jax", "mlx", "paddle")
    },
    "save(complex128)": "ValueError naming the tensor and the dtype, where safetensors' lookup raises KeyError",
}


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence:UserWarning")  # (torch's, in both libraries)
def test_every_case_ends_as_in_safetensors(sample: pathlib.Path) -> None:
    mismatched = []
    for label, call in cases(str(sample)).items():
        theirs, ours = outcome(lambda: call(THEIRS)), outcome(lambda: call(OURS))
        if same_end(theirs, ours) == (label in DIFFERENT):
            mismatched.append(f"{label}: safetensors {theirs[0]} {theirs[1]!r:.120}, ours {ours[0]} {ours[1]!r:.120}")
    assert not mismatched, "\n".join(mismatched)


def _loads_as(want: dict[str, torch.Tensor], uri: str) -> None:
    """``uri`` loads as ``want`` with both backends, and slices from it."""
    for backend in ("mmap", "pread"):
        assert same_value(want, tensorizer_rs.safetensors.torch.load_file(uri, backend=backend))
    with tensorizer_rs.safetensors.safe_open(uri, "pt") as f:
        assert torch.equal(f.get_slice("a.weight")[1:, 2:], want["a.weight"][1:, 2:])


def test_a_uri_loads_as_the_local_file(sample: pathlib.Path) -> None:
    want = safetensors.torch.load_file(str(sample))
    with remote_servers.nginx(str(sample.parent)) as base:
        url = f"{base}/{sample.name}"
        _loads_as(want, url)


def test_s3_loads_as_the_local_file(sample: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = safetensors.torch.load_file(str(sample))
    monkeypatch.setenv("HOME", str(sample.parent))  # no ~/.s3cfg
    with remote_servers.s3_bucket() as (endpoint, client):
        for name, value in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                            "AWS_SECRET_ACCESS_KEY": "testing"}.items():  # fmt: skip
            monkeypatch.setenv(name, value)
        client.upload_file(str(sample), "models", sample.name)  # type: ignore[attr-defined]
        _loads_as(want, f"s3://models/{sample.name}")


def _file_backed(t: torch.Tensor, path: pathlib.Path) -> bool:
    """Whether ``t``'s memory is a mapping of the file ``path``."""
    at = t.data_ptr()
    for line in pathlib.Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)  # range, perms, offset, dev, inode[, path]
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if lo <= at < hi:
            return len(fields) == 6 and fields[5] == str(path)
    return False


@pytest.mark.skipif(os.geteuid() != 0 or not sys.platform.startswith("linux"), reason="chattr +i needs root")
def test_an_immutable_file_loads_as_views_of_its_map(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.safetensors"
    big = torch.arange(1 << 16, dtype=torch.float32)
    safetensors.torch.save_file({"big": big}, str(path))
    try:
        subprocess.run(["chattr", "+i", str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("this file system has no immutable attribute")
    try:
        views = tensorizer_rs.safetensors.torch.load_file(path)["big"]
        copies = tensorizer_rs.safetensors.torch.load_file(path, backend="pread")["big"]
        assert torch.equal(views, big) and torch.equal(copies, big)
        assert _file_backed(views, path) and not _file_backed(copies, path)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_the_backends_give_views_and_private_copies(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.safetensors"
    big = torch.arange(1 << 16, dtype=torch.float32)
    safetensors.torch.save_file({"big": big}, str(path))
    before = path.read_bytes()
    for backend in ("mmap", "pread"):
        t = tensorizer_rs.safetensors.torch.load_file(path, backend=backend)["big"]
        t += 1  # a private copy here (the file can change): the file keeps its bytes
        assert torch.equal(t, big + 1) and path.read_bytes() == before


def test_a_failed_save_leaves_the_file_that_was_there(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"previous")
    with pytest.raises(ValueError, match="safetensors cannot store"):
        tensorizer_rs.safetensors.torch.save_file({"x": torch.ones(2), "z": torch.ones(2, dtype=torch.complex128)}, path)
    assert path.read_bytes() == b"previous" and os.listdir(tmp_path) == ["m.safetensors"]
    tensorizer_rs.safetensors.torch.save_file(SAMPLE, path, metadata={"format": "pt"})
    assert path.read_bytes() == safetensors.torch.save(SAMPLE, metadata={"format": "pt"})


def test_the_deserializer_options_apply_to_safetensors_files(sample: pathlib.Path) -> None:
    from tensorizer_rs import TensorDeserializer

    keep = ("b", "h", "a.weight")
    with TensorDeserializer(str(sample), device="cpu", dtype=torch.float32, num_readers=3, plaid_mode=True,
                            filter_func=lambda name: name in keep) as d:
        assert sorted(d) == sorted(keep)
        for name in keep:
            assert d[name].dtype == torch.float32 and torch.equal(d[name], SAMPLE[name].float())
