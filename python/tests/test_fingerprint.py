"""``tensorizer_rs.fingerprint`` (spec §21): the MiniLM weights written by
the real tensorizer, by us, by safetensors and by ``torch.save`` give one
fingerprint, equal to a pure-Python implementation of the spec; each kind
of change gives another one and its ``tzr diff`` line."""

from __future__ import annotations

import hashlib
import os
import pathlib
import struct
import subprocess
from typing import Any

import pytest
import torch

import remote_servers
import tensorizer_rs
from tzhelpers import import_oracle, minilm_dir

ROOT = pathlib.Path(__file__).resolve().parents[2]


# ---- the spec, in Python ------------------------------------------------------


def _data(t: torch.Tensor) -> bytes:
    """C-contiguous little-endian bytes (this host is little-endian)."""
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _record(name: str, t: torch.Tensor) -> tuple[bytes, str]:
    n, d = name.encode(), str(t.dtype).removeprefix("torch.").encode()
    digest = hashlib.sha256(_data(t))
    head = struct.pack("<Q", len(n)) + n + struct.pack("<Q", len(d)) + d + struct.pack("<Q", t.dim())
    return head + b"".join(struct.pack("<Q", s) for s in t.shape) + b"\0" + digest.digest(), digest.hexdigest()


def reference(sd: dict[str, torch.Tensor]) -> str:
    names = sorted(sd, key=lambda n: n.encode())
    h = hashlib.sha256(b"tzr-fingerprint-v1\0" + struct.pack("<Q", len(names)))
    for name in names:
        h.update(_record(name, sd[name])[0])
    return h.hexdigest()


def test_the_spec_worked_example(tmp_path: pathlib.Path) -> None:
    st = pytest.importorskip("safetensors.torch")
    sd = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor(7)}
    st.save_file(sd, str(tmp_path / "ex.safetensors"))
    want = "eaee47bb4a4bb4a0ec23fd6fa9796776e0b8caeded42c31c0a5d364cb927ed30"
    assert reference(sd) == want
    assert tensorizer_rs.fingerprint(tmp_path / "ex.safetensors") == want


# ---- MiniLM in every format -----------------------------------------------------


def _write(serializer: Any, sd: dict[str, torch.Tensor]) -> None:
    serializer.write_state_dict(sd)
    serializer.close()


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, torch.Tensor], dict[str, pathlib.Path]]:
    st = pytest.importorskip("safetensors.torch")
    src = sorted(minilm_dir().glob("*.safetensors"))[0]
    sd = dict(st.load_file(str(src)))
    d = tmp_path_factory.mktemp("fingerprint")
    files = {"shipped safetensors": src, "safetensors": d / "st.safetensors", "torch.save": d / "m.pt"}
    st.save_file(sd, str(files["safetensors"]))
    torch.save(sd, files["torch.save"])
    tensorizer = import_oracle()
    files["tensorizer"] = d / "real.tensors"
    _write(tensorizer.TensorSerializer(str(files["tensorizer"])), sd)
    files["tensorizer_rs"] = d / "ours.tensors"
    _write(tensorizer_rs.TensorSerializer(str(files["tensorizer_rs"])), sd)
    files["converted"] = d / "converted.tensors"
    tensorizer_rs.convert(files["torch.save"], files["converted"])
    return sd, files


def test_minilm_has_one_fingerprint_in_every_format(
    minilm: tuple[dict[str, torch.Tensor], dict[str, pathlib.Path]],
) -> None:
    sd, files = minilm
    want = reference(sd)
    got = {what: tensorizer_rs.fingerprint(path) for what, path in files.items()}
    assert got == {what: want for what in files}
    # One thread gives the same; a str path too.
    assert tensorizer_rs.fingerprint(str(files["tensorizer"]), num_threads=1) == want


def test_records_are_the_spec_records(minilm: tuple[dict[str, torch.Tensor], dict[str, pathlib.Path]]) -> None:
    sd, files = minilm
    records = tensorizer_rs.fingerprint_tensors(files["torch.save"])
    assert [r.name for r in records] == sorted(sd, key=lambda n: n.encode())
    for r in records:
        t = sd[r.name]
        assert (r.dtype, r.shape, r.sha256) == (str(t.dtype)[6:], tuple(t.shape), _record(r.name, t)[1]), r.name
    assert records == tensorizer_rs.fingerprint_tensors(files["tensorizer"])


def test_over_http(tmp_path: pathlib.Path, minilm: tuple[dict[str, torch.Tensor], dict[str, pathlib.Path]]) -> None:
    sd, files = minilm
    for what in ("torch.save", "tensorizer", "safetensors"):
        (tmp_path / files[what].name).write_bytes(files[what].read_bytes())
    with remote_servers.nginx(str(tmp_path)) as base:
        for what in ("torch.save", "tensorizer", "safetensors"):
            assert tensorizer_rs.fingerprint(f"{base}/{files[what].name}") == reference(sd), what


# ---- changes and tzr diff -------------------------------------------------------


def _tzr() -> str:
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for cand in [os.environ.get("TZR_BIN"), target / "release" / "tzr", target / "debug" / "tzr"]:
        if cand and pathlib.Path(cand).exists():
            return str(cand)
    pytest.skip("tzr is not built (cargo build -p tzr)")


def test_each_change_gives_another_fingerprint_and_its_diff_line(
    tmp_path: pathlib.Path, minilm: tuple[dict[str, torch.Tensor], dict[str, pathlib.Path]]
) -> None:
    st = pytest.importorskip("safetensors.torch")
    sd, files = minilm
    base = files["torch.save"]
    name = "encoder.layer.0.attention.self.query.weight"
    w = sd[name]
    shape = list(w.shape)
    one = dict(sd)
    one[name] = w.clone()
    one[name][3, 5] += 1
    cast = dict(sd)
    cast[name] = w.to(torch.bfloat16)
    renamed = {(k if k != name else name + "_renamed"): v for k, v in sd.items()}
    reshaped = dict(sd)
    reshaped[name] = w.reshape(shape[1] * 2, shape[0] // 2)
    cases = {
        "element": (one, f"changed  {name}  data"),
        "dtype": (cast, f"changed  {name}  dtype float32 -> bfloat16"),
        "rename": (renamed, f"renamed  {name} -> {name}_renamed  float32 {shape}"),
        "reshape": (reshaped, f"changed  {name}  shape {shape} -> {[shape[1] * 2, shape[0] // 2]}"),
    }
    fingerprints = {tensorizer_rs.fingerprint(base)}
    for what, (changed, line) in cases.items():
        path = tmp_path / f"{what}.safetensors"
        st.save_file(changed, str(path))
        fp = tensorizer_rs.fingerprint(path)
        assert fp == reference(changed), what
        fingerprints.add(fp)
        run = subprocess.run([_tzr(), "diff", str(base), str(path)], capture_output=True, text=True)
        assert run.returncode == 1, (what, run.stderr)
        assert run.stdout.splitlines()[0] == line, (what, run.stdout)
        assert len(run.stdout.splitlines()) == 2, (what, run.stdout)
    assert len(fingerprints) == 1 + len(cases)
    same = subprocess.run([_tzr(), "diff", str(base), str(files["tensorizer"])], capture_output=True, text=True)
    assert same.returncode == 0 and "hold the same" in same.stdout, same.stdout


# ---- views, dtypes, encryption, hostile input ------------------------------------


def test_strided_checkpoint_views_hash_as_contiguous_bytes(tmp_path: pathlib.Path) -> None:
    st = pytest.importorskip("safetensors.torch")
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    views = {
        "transposed": base.t(),
        "columns": base[:, ::3],
        "offset": base[2:, 1:5],
        "expanded": torch.arange(3, dtype=torch.int16).expand(4, 3),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": base[:0],
        "base": base,
    }
    torch.save(views, tmp_path / "views.pt")
    contiguous = {k: v.contiguous() for k, v in views.items()}
    st.save_file(contiguous, str(tmp_path / "views.safetensors"))
    want = reference(contiguous)
    assert tensorizer_rs.fingerprint(tmp_path / "views.pt") == want
    assert tensorizer_rs.fingerprint(tmp_path / "views.safetensors") == want


def test_dtypes(tmp_path: pathlib.Path) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, generator=g)
    sd = {
        "bf16": x.to(torch.bfloat16),
        "f16": x.to(torch.float16),
        "f64": x.to(torch.float64),
        "e4m3": x.to(torch.float8_e4m3fn),
        "e5m2": x.to(torch.float8_e5m2),
        "bool": x > 0,
        "c64": torch.complex(x, -x),
        "c128": torch.complex(x, x).to(torch.complex128),
        "i8": (x * 10).to(torch.int8),
        "u8": (x.abs() * 10).to(torch.uint8),
        "i64": (x * 1000).to(torch.int64),
    }
    want = reference(sd)
    torch.save(sd, tmp_path / "d.pt")
    _write(tensorizer_rs.TensorSerializer(str(tmp_path / "d.tensors")), sd)
    assert tensorizer_rs.fingerprint(tmp_path / "d.pt") == want
    assert tensorizer_rs.fingerprint(tmp_path / "d.tensors") == want
    dtypes = {r.name: r.dtype for r in tensorizer_rs.fingerprint_tensors(tmp_path / "d.tensors")}
    assert dtypes["bf16"] == "bfloat16" and dtypes["e4m3"] == "float8_e4m3fn" and dtypes["c64"] == "complex64"
    # safetensors has no complex128: the rest agrees there too.
    st = pytest.importorskip("safetensors.torch")
    del sd["c128"]
    st.save_file(sd, str(tmp_path / "d.safetensors"))
    assert tensorizer_rs.fingerprint(tmp_path / "d.safetensors") == reference(sd)


def test_encrypted_tensorizer_fingerprints_as_its_plaintext(tmp_path: pathlib.Path) -> None:
    from tensorizer_rs import DecryptionParams, EncryptionParams

    sd = {"a": torch.arange(1000, dtype=torch.float32), "b": torch.ones(3, 3, dtype=torch.bfloat16)}
    enc = EncryptionParams.random()
    _write(tensorizer_rs.TensorSerializer(str(tmp_path / "e.tensors"), encryption=enc), sd)
    fp = tensorizer_rs.fingerprint(tmp_path / "e.tensors", encryption=DecryptionParams.from_key(enc.key))
    assert fp == reference(sd)
    with pytest.raises(tensorizer_rs.CryptographyError):
        tensorizer_rs.fingerprint(tmp_path / "e.tensors")
    with pytest.raises(tensorizer_rs.CryptographyError):
        tensorizer_rs.fingerprint(tmp_path / "e.tensors", encryption=DecryptionParams.from_key(bytes(32)))


def test_hostile_input_raises_and_tzr_diff_exits_2(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.tensors"
    bad.write_bytes(b"|TZR|" + b"\xff" * 100)
    good = tmp_path / "good.safetensors"
    pytest.importorskip("safetensors.torch").save_file({"x": torch.zeros(2)}, str(good))
    with pytest.raises(ValueError):
        tensorizer_rs.fingerprint(bad)
    with pytest.raises(OSError):
        tensorizer_rs.fingerprint(tmp_path / "missing.tensors")
    run = subprocess.run([_tzr(), "diff", str(good), str(bad)], capture_output=True, text=True)
    assert run.returncode == 2 and run.stdout == "", run
    assert run.stderr.startswith("tzr: ") and len(run.stderr.splitlines()) == 1, run.stderr
