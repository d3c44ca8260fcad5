"""vLLM's tensorizer loader, unmodified, on tensorizer_rs, with the real
tensorizer as the control.

vLLM 0.33.0's ``vllm/model_executor/model_loader/tensorizer.py`` and
``tensorizer_loader.py`` are taken from its published wheel, fetched with
``pip download`` into ``target/releases`` (once; its SHA-256 is checked)
and extracted, those two files only, into ``target/vllm-loader/src`` beside
a copy of ``vllm_standins/`` (the smallest stand-ins for the rest of vLLM
they import). Nothing of vLLM is in this repository. Without network the
tests are skipped (``SKIPPED: ...``).

``vllm_loader_harness.py`` runs the cases in a subprocess per
implementation: the real tensorizer first (the control), then tensorizer_rs
(``import tensorizer`` gives tensorizer_rs, as ``upstream/upstream_plugin``
does), which also loads the files the control wrote (``cross_*``), then the
real tensorizer again to load tensorizer_rs's files (its ``cross_*``). The
S3 cases use moto_server (``remote_servers.s3_bucket``), with explicit
credentials and then through ``~/.s3cfg`` (HOME is a private directory).

Every case must pass against the real tensorizer. ``TZ_UNDER_TEST=tensorizer``
runs only the control.

    .venv-test/bin/python -m pytest python/tests/test_vllm_loader.py -v
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import remote_servers
from upstream import releases
import tzhelpers
import vllm_loader_harness as harness

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VLLM_VERSION = "0.33.0"
#: vllm-0.33.0's wheel as published on PyPI.
WHEEL = releases.Release(
    f"vllm=={VLLM_VERSION}",
    f"vllm-{VLLM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl",
    "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa",
    sdist=False,
    platform="manylinux_2_28_x86_64",
)
WORK_DIR = REPO / "target" / "vllm-loader"
LOADER_FILES = (
    "vllm/model_executor/model_loader/tensorizer.py",
    "vllm/model_executor/model_loader/tensorizer_loader.py",
)
STANDINS = HERE / "vllm_standins" / "vllm"
RUN_TIMEOUT_S = 300

IMPLS = ("tensorizer", "tensorizer_rs")


def fetch_wheel() -> Path | None:
    """The wheel's path (fetched and checked once); None when offline.
    The x86_64 wheel everywhere: the two files are pure Python."""
    try:
        wheel, why = releases.fetch(WHEEL)
    except releases.ChecksumMismatch as e:
        pytest.fail(str(e))
    if wheel is None:
        print(f"SKIPPED: {why}; vLLM's tensorizer loader did not run")
    return wheel


def prepare_src(wheel: Path) -> Path:
    """target/vllm-loader/src: the stand-ins, and vLLM's two files."""
    src = WORK_DIR / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(STANDINS, src / "vllm", ignore=shutil.ignore_patterns("__pycache__"))
    with zipfile.ZipFile(wheel) as zf:
        for name in LOADER_FILES:
            (src / name).write_bytes(zf.read(name))
    return src


@contextmanager
def s3_server() -> Iterator[tuple[str | None, str]]:
    """moto_server with a bucket "models"; (None, why) when there is none."""
    cm = remote_servers.s3_bucket("models")
    try:
        endpoint, _client = cm.__enter__()
    except pytest.skip.Exception as e:
        yield None, str(e)
        return
    try:
        yield endpoint, ""
    finally:
        cm.__exit__(None, None, None)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_", "PYTEST_"))}
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONDONTWRITEBYTECODE="1")
    return env


def run_harness(impl: str, src: Path, work: Path, tag: str, endpoint: str | None,
                foreign: Path | None = None, foreign_only: bool = False) -> dict[str, Any]:
    out = work / f"{tag}-out"
    home = work / f"{tag}-home"
    home.mkdir(parents=True)
    results = work / f"{tag}-results.json"
    cmd = [sys.executable, str(HERE / "vllm_loader_harness.py"), "--impl", impl, "--src", str(src),
           "--out", str(out), "--results", str(results)]
    if endpoint:
        cmd += ["--s3-endpoint", endpoint, "--s3-bucket", "models"]
    if foreign is not None:
        cmd += ["--foreign", str(foreign)]
    if foreign_only:
        cmd.append("--foreign-only")
    try:
        proc = subprocess.run(cmd, cwd=work, env=_env(home), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
        code, output = f"exited with {proc.returncode}", proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        code = f"was killed after {RUN_TIMEOUT_S} s"
        output = "".join(x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                         for x in (e.stdout, e.stderr))
        proc = None
    # The harness writes its results after every case: what ran before a
    # crash or a hang is kept, and the cases after it report the crash.
    data: dict[str, Any] = json.loads(results.read_text()) if results.is_file() else {}
    if proc is None or proc.returncode != 0:
        data["__crash__"] = f"{impl} harness ({tag}) {code}:\n{output[-6000:]}"
    data["__out__"] = out
    return data


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    wheel = fetch_wheel()
    if wheel is None:
        pytest.skip(f"SKIPPED: vLLM {VLLM_VERSION}'s wheel could not be downloaded")
    src = prepare_src(wheel)
    work = tmp_path_factory.mktemp("vllm-loader")
    with s3_server() as (endpoint, why_not):
        control = run_harness("tensorizer", src, work, "tz", endpoint)
        out: dict[str, dict[str, Any]] = {"tensorizer": control}
        if not tzhelpers.IS_ORACLE:
            rs = run_harness("tensorizer_rs", src, work, "rs", endpoint, foreign=control["__out__"])
            cross = run_harness("tensorizer", src, work, "tz-cross", endpoint, foreign=rs["__out__"],
                                foreign_only=True)
            control.update({k: v for k, v in cross.items() if k.startswith("cross_") or k == "__crash__"})
            out["tensorizer_rs"] = rs
    for results in out.values():
        results["__no_s3__"] = why_not
    return out


CASES = [(impl, c.name) for impl in IMPLS for c in harness.CASES]


@pytest.mark.parametrize(("impl", "name"), CASES, ids=[f"{i}-{n}" for i, n in CASES])
def test_vllm_loader(runs: dict[str, dict[str, Any]], impl: str, name: str) -> None:
    """One case of vllm_loader_harness.py (its docstring says what it does);
    cross_* cases load, with ``impl``, the files the other implementation wrote."""
    if impl not in runs or (name.startswith("cross_") and "tensorizer_rs" not in runs):
        pytest.skip(tzhelpers.ORACLE_SKIP_REASON)
    results = runs[impl]
    if name in results:
        result = results[name]
    elif "__crash__" in results:
        pytest.fail(results["__crash__"], pytrace=False)
    else:
        pytest.fail(f"{name} did not run", pytrace=False)
    if result["status"] == "pass":
        return
    if result["detail"] == "no S3 server":
        pytest.skip(f"no S3 server: {results['__no_s3__']}")
    if result["status"] == "not_run":
        pytest.fail(f"not run: {result['detail']}", pytrace=False)
    pytest.fail(f"{result['detail']}\n\n{result.get('traceback', '')}", pytrace=False)
