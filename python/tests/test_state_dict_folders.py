"""``tensorizer_rs.load_state_dict``: one file, or a model stored as shards
(a Hugging Face folder or its ``*.index.json``, locally or over HTTP),
loaded as one state dict and checked against its index (spec §26.5)."""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
from safetensors.torch import save_file

import remote_servers
import tensorizer_rs

FIRST = {"l0.w": torch.randn(4, 4), "l0.b": torch.randn(4)}
SECOND = {"l1.w": torch.randn(4, 4).half()}
NAMES = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


def _folder(d: pathlib.Path, weight_map: dict[str, str] | None = None) -> dict[str, torch.Tensor]:
    save_file(FIRST, str(d / NAMES[0]))
    save_file(SECOND, str(d / NAMES[1]))
    wm = {k: NAMES[0] for k in FIRST} | {k: NAMES[1] for k in SECOND}
    index = {"metadata": {"total_size": 0}, "weight_map": wm if weight_map is None else wm | weight_map}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    return FIRST | SECOND


def _same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> bool:
    return sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_a_folder_and_its_index_load_as_one_state_dict(tmp_path: pathlib.Path) -> None:
    want = _folder(tmp_path)
    assert _same(tensorizer_rs.load_state_dict(tmp_path, device="cpu"), want)
    assert _same(tensorizer_rs.load_state_dict(tmp_path / "model.safetensors.index.json"), want)
    assert _same(tensorizer_rs.load_state_dict(tmp_path / NAMES[1]), SECOND)
    # Options apply to every shard.
    got = tensorizer_rs.load_state_dict(tmp_path, dtype=torch.float32, filter_func=lambda n: n.endswith(".w"))
    assert sorted(got) == ["l0.w", "l1.w"] and got["l1.w"].dtype == torch.float32
    # Without an index: every safetensors file of the folder.
    (tmp_path / "model.safetensors.index.json").unlink()
    assert _same(tensorizer_rs.load_state_dict(tmp_path), want)


def test_an_index_over_http_loads_its_shards_beside_it(tmp_path: pathlib.Path) -> None:
    want = _folder(tmp_path)
    with remote_servers.nginx(str(tmp_path)) as base:
        assert _same(tensorizer_rs.load_state_dict(f"{base}/model.safetensors.index.json"), want)


def test_a_store_prefix_loads_what_is_directly_under_it(tmp_path: pathlib.Path, monkeypatch) -> None:
    want = _folder(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.s3cfg
    with remote_servers.s3_bucket() as (endpoint, client):
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        for f in tmp_path.iterdir():
            client.upload_file(str(f), "models", f"indexed/{f.name}")  # type: ignore[attr-defined]
            if f.suffix == ".safetensors":
                client.upload_file(str(f), "models", f"bare/{f.name}")  # type: ignore[attr-defined]
                # One level: a sub-prefix's shards are not the model's.
                client.upload_file(str(f), "models", f"bare/old/{f.name}")  # type: ignore[attr-defined]
        assert _same(tensorizer_rs.load_state_dict("s3://models/indexed/"), want)
        assert _same(tensorizer_rs.load_state_dict("s3://models/bare/", num_readers=2), want)
        assert tensorizer_rs.fingerprint("s3://models/bare/") == tensorizer_rs.fingerprint(tmp_path)
        # A scan lists the prefix as it walks a folder: the same files, the
        # same reports, and objects of no model format left out.
        client.put_object(Bucket="models", Key="indexed/config.json", Body=b"{}")  # type: ignore[attr-defined]
        local = tensorizer_rs.scan(tmp_path)
        remote = tensorizer_rs.scan("s3://models/indexed/")
        assert [f["file"].rsplit("/", 1)[1] for f in remote["files"]] == [
            pathlib.Path(f["file"]).name for f in local["files"]
        ]
        assert remote["valid"] == local["valid"]
        assert [f["findings"] for f in remote["files"]] == [f["findings"] for f in local["files"]]
    with pytest.raises(ValueError, match=r"HTTP cannot list a folder; pass the model's \*\.index\.json URI"):
        tensorizer_rs.load_state_dict("http://127.0.0.1:9/model/")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"l1.x": NAMES[1]}, r'tensor "l1.x": the index maps it to .*which does not hold it \(IDX-005\)'),
        ({"l9": "../evil.safetensors"}, r"leaves the index's folder \(IDX-006\)"),
        ({"l8": "model-00003.safetensors"}, r"named by the index is not in its folder \(IDX-003\)"),
    ],
)
def test_an_index_the_shards_do_not_match_is_refused(tmp_path: pathlib.Path, extra: dict[str, str], message: str) -> None:
    _folder(tmp_path, extra)
    with pytest.raises(ValueError, match=message):
        tensorizer_rs.load_state_dict(tmp_path)


def test_a_tensor_in_two_shards_and_an_empty_folder_are_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="no \\*.safetensors file"):
        tensorizer_rs.load_state_dict(tmp_path)
    save_file(FIRST, str(tmp_path / "a.safetensors"))
    save_file(FIRST, str(tmp_path / "b.safetensors"))
    with pytest.raises(ValueError, match="is in two shards"):
        tensorizer_rs.load_state_dict(tmp_path)
    with pytest.raises(ValueError, match="eagerly"):
        tensorizer_rs.load_state_dict(tmp_path, lazy_load=True)
