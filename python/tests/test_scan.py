"""``tensorizer_rs.scan``: the core's model-file scanner (spec §22) from
Python, the same findings as ``tzr scan --json``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

import tensorizer_rs
from tzhelpers import VECTORS_DIR

TZR = Path(__file__).resolve().parents[2] / "target" / "debug" / "tzr"


def test_a_clean_tensorizer_file_has_no_findings(tmp_path):
    path = tmp_path / "m.tensors"
    s = tensorizer_rs.TensorSerializer(str(path))
    s.write_state_dict({"w": torch.arange(6, dtype=torch.float32)})
    s.close()
    report = tensorizer_rs.scan(path)
    assert (report["format"], report["valid"], report["tensors"], report["findings"]) == (
        "tensorizer",
        True,
        1,
        [],
    )


def test_a_pickle_calling_os_system_is_a_finding_naming_it():
    report = tensorizer_rs.scan(VECTORS_DIR / "torch" / "hostile_os_system.pt")
    assert not report["valid"]
    assert any("posix.system" in f["message"] for f in report["findings"]), report["findings"]
    assert all(f["rule"] and f["remediation"] for f in report["findings"])


def test_the_same_report_as_tzr_scan_json():
    if not TZR.is_file():
        pytest.skip("tzr is not built (cargo build -p tzr)")
    path = str(VECTORS_DIR / "torch" / "hostile_os_system.pt")
    out = subprocess.run([str(TZR), "scan", "--json", path], capture_output=True, text=True)
    assert out.returncode == 1
    assert json.loads(out.stdout) == tensorizer_rs.scan(path)


def test_an_unreadable_file_raises():
    with pytest.raises(FileNotFoundError):
        tensorizer_rs.scan("/no/such/file.tensors")


def _tzr(*args):
    if not TZR.is_file():
        pytest.skip("tzr is not built (cargo build -p tzr)")
    return subprocess.run([str(TZR), "scan", *map(str, args)], capture_output=True, text=True)


def test_tzr_scan_takes_files_and_directories_and_exits_with_the_worst(tmp_path):
    torch_dir = VECTORS_DIR / "torch"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "weights.bin").write_bytes((torch_dir / "module.pt").read_bytes())
    (tmp_path / "README.md").write_text("not a model\n")
    clean = _tzr("--json", tmp_path)
    assert clean.returncode == 0, clean.stderr
    doc = json.loads(clean.stdout)
    # Told by content: the README is left out, the .bin is a torch zip.
    assert [f["file"] for f in doc["files"]] == [str(tmp_path / "sub" / "weights.bin")]
    assert doc["valid"] and doc["files"][0]["format"] == "torch-zip"
    (tmp_path / "evil.dat").write_bytes((torch_dir / "hostile_os_system.pt").read_bytes())
    both = _tzr("--sarif", tmp_path, torch_dir / "module.pt")
    assert both.returncode == 1
    run = json.loads(both.stdout)["runs"][0]
    uris = [a["location"]["uri"] for a in run["artifacts"]]
    assert len(uris) == 3 and uris[0].endswith("/evil.dat"), uris
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]} == {uris[0]}
    worst = _tzr(tmp_path, "/no/such/file.pt")
    assert worst.returncode == 2


def test_fail_on_sets_the_exit_threshold():
    module = VECTORS_DIR / "torch" / "hostile_module.pt"
    assert _tzr(module).returncode == 0  # PKL-007 is a warning; the default fails on errors
    assert _tzr("--fail-on", "warning", module).returncode == 1
    assert _tzr("--fail-on", "error", VECTORS_DIR / "torch" / "hostile_os_system.pt").returncode == 1


def test_scan_takes_a_directory_or_a_list(tmp_path):
    torch_dir = VECTORS_DIR / "torch"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "w.bin").write_bytes((torch_dir / "module.pt").read_bytes())
    (tmp_path / "notes.txt").write_text("not a model\n")
    report = tensorizer_rs.scan(tmp_path)
    assert [f["file"] for f in report["files"]] == [str(tmp_path / "a" / "w.bin")] and report["valid"]
    evil = torch_dir / "hostile_os_system.pt"
    report = tensorizer_rs.scan([tmp_path, evil, evil])
    assert [f["file"] for f in report["files"]] == [str(tmp_path / "a" / "w.bin"), str(evil)]
    assert not report["valid"]
    if TZR.is_file():
        out = subprocess.run([str(TZR), "scan", "--json", str(tmp_path), str(evil)], capture_output=True, text=True)
        assert json.loads(out.stdout) == tensorizer_rs.scan([tmp_path, evil])
    # One file: the single report, as before.
    assert tensorizer_rs.scan(evil)["file"] == str(evil)


def test_a_shard_index_is_one_model_with_its_shards(tmp_path):
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(2)}, str(tmp_path / "m-1.safetensors"))
    save_file({"z": torch.zeros(2)}, str(tmp_path / "old.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(
        json.dumps(
            {"weight_map": {"a": "m-1.safetensors", "b": "m-1.safetensors", "c": "/etc/m.safetensors"}}
        )
    )
    want = {index: ["m-1.safetensors", "model.safetensors.index.json"]}
    want[tmp_path] = [*want[index], "old.safetensors"]
    for given, names in want.items():
        doc = tensorizer_rs.scan(given)
        reports = {Path(r["file"]).name: r for r in doc["files"]}
        assert sorted(reports) == names, reports
        got = reports["model.safetensors.index.json"]
        assert got["format"] == "shard-index" and not doc["valid"]
        assert [f["rule"] for f in got["findings"]] == ["IDX-004", "IDX-005", "IDX-006"], got
        assert reports["m-1.safetensors"]["model"] == got["file"]
