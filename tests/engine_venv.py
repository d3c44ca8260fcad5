"""The virtual environment a serving engine's smoke test runs in
(``tests/vllm-plugin-smoke.py``, ``tests/sglang-loader-smoke.py``): made
once under ``target/``, borrowing the test environment's packages (torch,
transformers) through a ``.pth`` file, the engine and its small imports
installed ``--no-deps`` from a pinned requirements file, and the wheel under
test installed over whatever was there."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(args: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(args, text=True, capture_output=True, **kw)


def install(venv: Path, requirements: str, wheel: Path, what: str) -> None:
    """Makes `venv` with `requirements` (a file in tests/) and `wheel`;
    prints SKIPPED and exits 0 when pip cannot reach PyPI."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True)
    (Path(site.stdout.strip()) / "borrowed-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # --no-compile: the engines' processes import a fraction of what is
    # installed (SGLang's and vLLM's trees are 18,000 files, half a CPU-minute
    # to byte-compile on two busy cores); what they import is compiled then.
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-compile"]
    # From PyPI through pip's cache, not target/releases: the Python
    # lane's tests may be writing a wheel there at this moment.
    done = run(pip + ["-r", str(ROOT / "tests" / requirements)], timeout=900)
    if done.returncode != 0:
        if "Could not find a version" in done.stderr or "NewConnectionError" in done.stderr:
            print(f"SKIPPED: {what} could not be installed (no network?): {done.stderr.strip().splitlines()[-1]}")
            raise SystemExit(0)
        raise SystemExit(f"{what}: pip failed\n{done.stderr}")
    subprocess.run(pip + ["--force-reinstall", str(wheel)], check=True, timeout=300)


def environment(venv: Path, **extra: str) -> dict[str, str]:
    """The environment the engine's processes run with: only the venv's
    and the system's programs, no user site, HOME inside the venv."""
    return {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(venv), "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1",
            **extra}
