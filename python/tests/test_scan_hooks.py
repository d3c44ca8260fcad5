"""The scanner in front of repositories (spec §22.7): the pre-commit hook
run by the real ``pre-commit try-repo``, the GitHub Action's script, and
``tzr scan --sarif`` validated against the SARIF 2.1.0 schema."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tzhelpers import VECTORS_DIR

ROOT = Path(__file__).resolve().parents[2]
TZR = ROOT / "target" / "debug" / "tzr"
SCHEMA = ROOT / "tests" / "sarif" / "sarif-2.1.0-rtm.5.json"
CLEAN = VECTORS_DIR / "torch" / "module.pt"
EVIL = VECTORS_DIR / "torch" / "hostile_os_system.pt"

pytestmark = pytest.mark.skipif(not TZR.is_file(), reason="tzr is not built (cargo build -p tzr)")


def _sarif(*paths) -> tuple[int, dict]:
    out = subprocess.run([str(TZR), "scan", "--sarif", *map(str, paths)], capture_output=True, text=True)
    return out.returncode, json.loads(out.stdout)


@pytest.mark.parametrize(
    "paths, status",
    [([CLEAN], 0), ([EVIL], 1), ([CLEAN, EVIL, VECTORS_DIR / "torch"], 1), (["/no/such/file.pt", CLEAN], 2)],
    ids=["clean", "hostile", "many", "unreadable"],
)
def test_sarif_output_is_valid_sarif_2_1_0(paths, status):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    code, log = _sarif(*paths)
    assert code == status
    jsonschema.Draft4Validator(schema).validate(log)
    assert log["runs"][0]["invocations"][0]["executionSuccessful"] == (status != 2)


def test_suppressed_findings_are_marked_and_unused_entries_are_notes(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    (tmp_path / ".tzrscan.toml").write_text(
        "[[ignore]]\nrule = \"PKL-001\"\npath = \"hostile_*.pt\"\nreason = \"a test payload\"\n"
        "[[ignore]]\nrule = \"PKL-002\"\npath = \"**/torch/hostile_os_system.pt\"\nreason = \"same\"\n"
        "[[ignore]]\nrule = \"ST-007\"\npath = \"*.safetensors\"\nreason = \"stale\"\n"
    )
    run = lambda *a: subprocess.run([str(TZR), "scan", *map(str, a)], capture_output=True, text=True, cwd=tmp_path)
    out = run("--sarif", EVIL)
    assert out.returncode == 0, out.stderr
    log = json.loads(out.stdout)
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(log)
    results = log["runs"][0]["results"]
    assert results and all(r["suppressions"][0]["justification"] in ("a test payload", "same") for r in results)
    (note,) = log["runs"][0]["invocations"][0]["toolConfigurationNotifications"]
    assert note["descriptor"]["id"] == "SUP-001" and "ST-007" in note["message"]["text"]
    report = json.loads(run("--json", EVIL).stdout)
    assert report["valid"] and all(f["suppressed"] for f in report["findings"])
    assert [n["rule"] for n in report["suppressions"]["notes"]] == ["SUP-001"]
    assert run("--fail-on", "note", EVIL).returncode == 1
    bad = tmp_path / "bad.toml"
    bad.write_text("[[ignore]]\nrule = \"PKL-001\"\npath = \"*\"\n")
    out = run("--ignore", bad, EVIL)
    assert out.returncode == 2 and "reason (a string) is required" in out.stderr


def test_tensorizer_rs_scan_reads_suppressions_as_tzr_scan_does(tmp_path, monkeypatch):
    """``tensorizer_rs.scan`` finds ``.tzrscan.toml`` where ``tzr scan`` does
    (the current directory) or takes ``ignore=``, and gives the same
    document, suppressed findings and notes included."""
    import tensorizer_rs

    (tmp_path / ".tzrscan.toml").write_text(
        "[[ignore]]\nrule = \"PKL-001\"\npath = \"hostile_*.pt\"\nreason = \"a test payload\"\n"
        "[[ignore]]\nrule = \"PKL-002\"\npath = \"*.pt\"\nreason = \"same\"\n"
        "[[ignore]]\nrule = \"ST-007\"\npath = \"*.safetensors\"\nreason = \"stale\"\n"
    )
    tzr = lambda *a: json.loads(
        subprocess.run([str(TZR), "scan", "--json", *map(str, a)], capture_output=True, text=True, cwd=tmp_path).stdout
    )
    assert not tensorizer_rs.scan(EVIL)["valid"]
    monkeypatch.chdir(tmp_path)
    report = tensorizer_rs.scan(EVIL)
    assert report == tzr(EVIL)
    assert report["valid"] and {f["suppressed"] for f in report["findings"]} == {"a test payload", "same"}
    assert [n["rule"] for n in report["suppressions"]["notes"]] == ["SUP-001"]
    assert tensorizer_rs.scan([EVIL, CLEAN]) == tzr(EVIL, CLEAN)
    monkeypatch.chdir(ROOT)
    given = tensorizer_rs.scan([EVIL], ignore=tmp_path / ".tzrscan.toml")
    assert given["valid"] and given["suppressions"]["file"] == str(tmp_path / ".tzrscan.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[ignore]]\nrule = \"PKL-001\"\npath = \"*\"\n")
    with pytest.raises(ValueError, match="reason \\(a string\\) is required"):
        tensorizer_rs.scan(EVIL, ignore=bad)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_the_pre_commit_hook_under_pre_commit_try_repo(tmp_path):
    pytest.importorskip("pre_commit")
    repo = tmp_path / "models"
    repo.mkdir()
    _git(repo, "init", "-q")
    shutil.copy(CLEAN, repo / "clean.pt")
    (repo / "README.md").write_text("# models\n")
    _git(repo, "add", ".")
    env = dict(
        os.environ,
        PATH=f"{TZR.parent}{os.pathsep}{os.environ['PATH']}",
        PRE_COMMIT_HOME=str(tmp_path / "cache"),
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@localhost",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@localhost",
    )

    # The hooks repository: this one's manifest, committed (try-repo reads
    # committed and staged files, and the manifest is all a system hook needs).
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    shutil.copy(ROOT / ".pre-commit-hooks.yaml", hooks)
    _git(hooks, "init", "-q")
    _git(hooks, "add", ".")
    subprocess.run(["git", "commit", "-qm", "hooks"], cwd=hooks, env=env, check=True)

    def try_repo() -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(hooks), "tzr-scan", "--all-files"]
        return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=120)

    clean = try_repo()
    assert clean.returncode == 0, clean.stdout + clean.stderr
    # A payload under a name that promises nothing: told by its bytes.
    shutil.copy(EVIL, repo / "weights.dat")
    _git(repo, "add", ".")
    dirty = try_repo()
    assert dirty.returncode == 1, dirty.stdout + dirty.stderr
    assert "weights.dat" in dirty.stdout and "PKL-001" in dirty.stdout, dirty.stdout


def test_the_github_action_script(tmp_path):
    out = tmp_path / "github_output"
    sarif = tmp_path / "scan.sarif"
    env = dict(
        os.environ, TZR=str(TZR), TZR_SCAN_SARIF=str(sarif), GITHUB_OUTPUT=str(out), TZR_SCAN_PATHS=f"{CLEAN} {EVIL}"
    )
    run = subprocess.run(["bash", str(ROOT / "action" / "scan.sh")], env=env, capture_output=True, text=True)
    assert run.returncode == 1, run.stderr
    log = json.loads(sarif.read_text())
    assert len(log["runs"][0]["artifacts"]) == 2 and log["runs"][0]["results"]
    assert out.read_text().splitlines() == [f"sarif={sarif}", "status=1"]
    env["TZR_SCAN_PATHS"] = str(CLEAN)
    assert subprocess.run(["bash", str(ROOT / "action" / "scan.sh")], env=env).returncode == 0
