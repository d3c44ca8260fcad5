"""``tensorizer_rs.convert``: torch checkpoints, tensorizer and safetensors
files in (local, HTTP, S3), tensorizer or safetensors out, checked with the
real tensorizer (``verify_hash=True``), safetensors and ``torch.load``."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch

import remote_servers
import tensorizer_rs
from tzhelpers import import_oracle, minilm_dir


@pytest.fixture(scope="module")
def minilm_pt(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModel.from_pretrained(str(minilm_dir()), local_files_only=True)
    path = tmp_path_factory.mktemp("minilm") / "minilm.pt"
    torch.save(model.state_dict(), path)
    return path


def _load_tensorizer(path: pathlib.Path) -> dict[str, torch.Tensor]:
    tensorizer = import_oracle()
    with tensorizer.TensorDeserializer(str(path), device="cpu", verify_hash=True) as d:
        return {k: d[k].clone() for k in d.keys()}


def _load_safetensors(path: pathlib.Path) -> dict[str, torch.Tensor]:
    st = pytest.importorskip("safetensors.torch")
    return dict(st.load_file(str(path)))


def _assert_equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], ordered: bool = True) -> None:
    if ordered:
        assert list(got) == list(want)
    else:
        assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert torch.equal(got[k], v), k


def test_minilm_checkpoint_to_tensorizer_loads_in_tensorizer(tmp_path: pathlib.Path, minilm_pt: pathlib.Path) -> None:
    ref = torch.load(minilm_pt, weights_only=True)
    reports: list[tuple[int, int]] = []
    done = tensorizer_rs.convert(minilm_pt, tmp_path / "m.tensors", progress=lambda d, t: reports.append((d, t)))
    assert (done.source_format, done.target_format) == ("torch", "tensorizer")
    assert done.tensors == len(ref) and done.skipped == () and not done.flattened
    assert done.bytes == sum(v.numel() * v.element_size() for v in ref.values())
    assert reports and reports[-1] == (done.bytes, done.bytes)
    _assert_equal(_load_tensorizer(tmp_path / "m.tensors"), ref)
    # tensorizer's exact layout, on one thread: the same tensors.
    tensorizer_rs.convert(str(minilm_pt), str(tmp_path / "t.tensors"), tensorizer_layout=True, num_threads=1)
    _assert_equal(_load_tensorizer(tmp_path / "t.tensors"), ref)


def test_minilm_checkpoint_to_safetensors(tmp_path: pathlib.Path, minilm_pt: pathlib.Path) -> None:
    ref = torch.load(minilm_pt, weights_only=True)
    done = tensorizer_rs.convert(minilm_pt, tmp_path / "m.safetensors")
    assert (done.source_format, done.target_format) == ("torch", "safetensors")
    _assert_equal(_load_safetensors(tmp_path / "m.safetensors"), ref, ordered=False)
    # `to=` names the format where the extension names none.
    done = tensorizer_rs.convert(minilm_pt, tmp_path / "m.weights", to="safetensors")
    assert done.target_format == "safetensors"
    _assert_equal(_load_safetensors(tmp_path / "m.weights"), ref, ordered=False)


def test_tensorizer_to_safetensors_and_back(tmp_path: pathlib.Path, minilm_pt: pathlib.Path) -> None:
    tensorizer = import_oracle()
    ref = torch.load(minilm_pt, weights_only=True)
    # A file written by the real tensorizer.
    serializer = tensorizer.TensorSerializer(str(tmp_path / "orig.tensors"))
    serializer.write_state_dict(ref)
    serializer.close()
    done = tensorizer_rs.convert(tmp_path / "orig.tensors", tmp_path / "m.safetensors")
    assert (done.source_format, done.target_format) == ("tensorizer", "safetensors")
    _assert_equal(_load_safetensors(tmp_path / "m.safetensors"), ref, ordered=False)
    done = tensorizer_rs.convert(tmp_path / "m.safetensors", tmp_path / "back.tensors")
    assert (done.source_format, done.target_format) == ("safetensors", "tensorizer")
    _assert_equal(_load_tensorizer(tmp_path / "back.tensors"), ref, ordered=False)


def test_non_tensor_entries_are_skipped_and_nested_keys_kept(tmp_path: pathlib.Path) -> None:
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3).t(), "b": torch.ones(3)}, "step": 7, "lr": 0.5}
    torch.save(state, tmp_path / "ckpt.pt")
    done = tensorizer_rs.convert(tmp_path / "ckpt.pt", tmp_path / "c.safetensors")
    assert sorted(done.skipped) == ["lr", "step"] and done.tensors == 2
    got = _load_safetensors(tmp_path / "c.safetensors")
    assert torch.equal(got["model.w"], state["model"]["w"]) and got["model.w"].is_contiguous()  # type: ignore[index]


def test_a_failing_conversion_leaves_dst_untouched(tmp_path: pathlib.Path) -> None:
    torch.save({"z": torch.ones(4, dtype=torch.complex128), "w": torch.ones(1 << 16)}, tmp_path / "c.pt")
    # A name without a format of its own: `to=` says which.
    dst = tmp_path / "out.weights"
    dst.write_bytes(b"previous contents")
    before = sorted(os.listdir(tmp_path))
    # safetensors has no complex128: refused, naming what to do instead.
    with pytest.raises(ValueError, match=r"safetensors has no dtype for complex128.*tensorizer"):
        tensorizer_rs.convert(tmp_path / "c.pt", dst, to="safetensors")

    # A progress callback that raises stops the conversion; its exception propagates.
    class Stop(Exception):
        pass

    def stop(done: int, total: int) -> None:
        raise Stop(done, total)

    with pytest.raises(Stop):
        tensorizer_rs.convert(tmp_path / "c.pt", dst, to="tensorizer", progress=stop)
    # A source that is not a checkpoint, tensorizer or safetensors file.
    (tmp_path / "junk.pt").write_bytes(b"not a model at all" * 100)
    with pytest.raises(ValueError):
        tensorizer_rs.convert(tmp_path / "junk.pt", dst, to="tensorizer")
    with pytest.raises(OSError):
        tensorizer_rs.convert(tmp_path / "missing.pt", dst, to="tensorizer")
    with pytest.raises(ValueError, match="to="):
        tensorizer_rs.convert(tmp_path / "c.pt", dst, to="pickle")  # type: ignore[arg-type]
    assert dst.read_bytes() == b"previous contents"
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "junk.pt"]), "no temporary file left behind"
    # A successful one replaces it.
    tensorizer_rs.convert(tmp_path / "c.pt", dst, to="tensorizer")
    assert dst.read_bytes()[:5] == b"|TZR|"


def test_expanded_views_cannot_blow_a_small_checkpoint_up(tmp_path: pathlib.Path) -> None:
    """64 expanded (stride-0) views of 960 MiB each in a checkpoint of a few
    KB: 60 GiB of output, refused before anything is written."""
    base = torch.zeros(1)
    torch.save({f"v{i}": base.expand(960 << 18) for i in range(64)}, tmp_path / "bomb.pt")
    assert (tmp_path / "bomb.pt").stat().st_size < 16 << 10

    def guard(done: int, total: int) -> None:
        assert done <= 64 << 20, "the bound did not hold"

    for out in ("bomb.tensors", "bomb.safetensors"):
        with pytest.raises(ValueError, match=r"64424509440 bytes.*max_output_bytes"):
            tensorizer_rs.convert(tmp_path / "bomb.pt", tmp_path / out, progress=guard)
        assert not (tmp_path / out).exists()
    # Small expansions pass by default; the keyword lowers or raises the bound.
    torch.save({f"v{i}": base.expand(1 << 18) for i in range(4)}, tmp_path / "small.pt")
    with pytest.raises(ValueError, match="max_output_bytes"):
        tensorizer_rs.convert(tmp_path / "small.pt", tmp_path / "s.tensors", max_output_bytes=(4 << 20) - 1)
    done = tensorizer_rs.convert(tmp_path / "small.pt", tmp_path / "s.tensors", max_output_bytes=4 << 20)
    assert done.bytes == 4 << 20


def test_sources_over_http(tmp_path: pathlib.Path, minilm_pt: pathlib.Path) -> None:
    ref = torch.load(minilm_pt, weights_only=True)
    served = tmp_path / "served"
    served.mkdir()
    (served / "minilm.pt").write_bytes(minilm_pt.read_bytes())
    tensorizer_rs.convert(minilm_pt, served / "minilm.safetensors")
    with remote_servers.nginx(str(served)) as base:
        done = tensorizer_rs.convert(f"{base}/minilm.pt", tmp_path / "h.tensors")
        assert done.source_format == "torch"
        _assert_equal(_load_tensorizer(tmp_path / "h.tensors"), ref)
        done = tensorizer_rs.convert(f"{base}/minilm.safetensors", tmp_path / "h2.tensors")
        assert done.source_format == "safetensors"
    assert (tmp_path / "h2.tensors").read_bytes() == _local(served / "minilm.safetensors", tmp_path / "l2.tensors")


def _local(src: pathlib.Path, dst: pathlib.Path) -> bytes:
    tensorizer_rs.convert(src, dst)
    return dst.read_bytes()


def test_sources_in_s3(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A small checkpoint: moto copies the whole object on every range
    # request, so MiniLM's 90 MB took half a minute here; the local tests
    # above convert MiniLM itself.
    base = torch.arange(96, dtype=torch.float32).reshape(8, 12)
    state = {"w": base, "row": base[2], "t": base.t(), "half": torch.rand(5, 7).to(torch.bfloat16),
             "ids": torch.arange(10, dtype=torch.int64), "empty": torch.zeros(0, 3)}
    torch.save(state, tmp_path / "small.pt")
    ref = torch.load(tmp_path / "small.pt", weights_only=True)
    with remote_servers.s3_bucket("models") as (endpoint, client):
        client.upload_file(str(tmp_path / "small.pt"), "models", "ckpt/small.pt")  # type: ignore[attr-defined]
        creds = remote_servers.s3_credentials(endpoint)
        done = tensorizer_rs.convert(
            "s3://models/ckpt/small.pt",
            tmp_path / "s.tensors",
            s3_access_key_id=str(creds["s3_access_key_id"]),
            s3_secret_access_key=str(creds["s3_secret_access_key"]),
            s3_endpoint=str(creds["s3_endpoint"]),
            force_http=True,
        )
        assert done.source_format == "torch"
        _assert_equal(_load_tensorizer(tmp_path / "s.tensors"), ref)
        # Or configured from the environment.
        monkeypatch.setenv("S3_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("S3_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("S3_SECRET_ACCESS_KEY", "testing")
        tensorizer_rs.convert("s3://models/ckpt/small.pt", tmp_path / "s.safetensors")
        _assert_equal(_load_safetensors(tmp_path / "s.safetensors"), ref, ordered=False)


@pytest.mark.parametrize(
    ("dst", "to", "says"),
    [
        ("b.pt", None, "cannot write torch.save checkpoints"),
        ("b.pth", None, "cannot write torch.save checkpoints"),
        ("b.tensors", "safetensors", "contradicts the name"),
        ("b.weights", None, "cannot tell the output format"),
    ],
)
def test_the_output_name_names_the_format(tmp_path: pathlib.Path, dst: str, to: str | None, says: str) -> None:
    src = tmp_path / "a.tensors"
    with tensorizer_rs.TensorSerializer(str(src)) as s:
        s.write_state_dict({"w": torch.ones(3)})
    with pytest.raises(ValueError, match=says):
        tensorizer_rs.convert(str(src), str(tmp_path / dst), to=to)  # type: ignore[arg-type]
    assert not (tmp_path / dst).exists()


def test_tensorizer_to_tensorizer_re_lays_the_file_out(tmp_path: pathlib.Path) -> None:
    src, dst = tmp_path / "a.tensors", tmp_path / "b.tensors"
    with tensorizer_rs.TensorSerializer(str(src)) as s:
        s.write_state_dict({"w": torch.arange(5.0)})
    done = tensorizer_rs.convert(str(src), str(dst), tensorizer_layout=True)
    assert (done.source_format, done.target_format) == ("tensorizer", "tensorizer")
    with tensorizer_rs.TensorDeserializer(str(dst), verify_hash=True) as d:
        assert torch.equal(d["w"], torch.arange(5.0))
