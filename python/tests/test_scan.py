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
