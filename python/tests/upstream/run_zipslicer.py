"""Run zipslicer 0.8.1's own tests against tensorizer_rs.zipslicer.

    .venv-test/bin/python python/tests/upstream/run_zipslicer.py [--oracle]

zipslicer's tests are not part of this repository: its sdist is fetched
from PyPI with ``pip download`` into ``target/releases`` (once; its
SHA-256 is checked) and its ``tests/`` are extracted to
``target/zipslicer-upstream``, where pytest runs them unmodified with
``zipslicer_alias`` (this directory) making ``import zipslicer`` give
``tensorizer_rs.zipslicer``. Every test must pass. ``--oracle`` runs them
against the real zipslicer (the control run).

Its one example (``examples/example_resnet18.py``) fetches resnet18 from
torch.hub, which cannot run offline; ``python/tests/test_zipslicer.py``
reproduces it on a local resnet18.

Prints ``SKIPPED: ...`` and exits 0 when the sdist cannot be downloaded.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import releases  # noqa: E402

VERSION = "0.8.1"
REPO = releases.REPO
#: zipslicer-0.8.1.tar.gz as published on PyPI.
SDIST = releases.Release(
    f"zipslicer=={VERSION}",
    f"zipslicer-{VERSION}.tar.gz",
    "528589ee24987a227dc0263d3a7fe4d2e10a39c286279128be91f77e590181dd",
)
WORK_DIR = REPO / "target" / "zipslicer-upstream"
TEST_FILES = ("test_checkpoint_readonly.py", "test_synthetic.py")


def extract_tests(sdist: Path) -> Path:
    tests = WORK_DIR / "tests"
    if WORK_DIR.exists():
        shutil.rmtree(WORK_DIR)
    tests.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        for name in TEST_FILES:
            source = tar.extractfile(tar.getmember(f"zipslicer-{VERSION}/tests/{name}"))
            if source is None:
                sys.exit(f"{sdist}: tests/{name} is not a regular file")
            (tests / name).write_bytes(source.read())
    (tests / "pytest.ini").write_text("# Written by run_zipslicer.py: this directory is pytest's rootdir.\n[pytest]\n")
    return tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle", action="store_true", help="run against the real zipslicer")
    args = parser.parse_args()
    started = time.monotonic()
    sdist = releases.fetch_or_skip(SDIST, "zipslicer's own tests")
    if sdist is None:
        return 0
    tests = extract_tests(sdist)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), str(tests), env.get("PYTHONPATH")]))
    env["TZR_ZIPSLICER_IMPL"] = "zipslicer" if args.oracle else "tensorizer_rs"
    cmd = [
        sys.executable, "-m", "pytest", "-p", "zipslicer_alias", "-p", "no:cacheprovider",
        "-q", "-rfEsxX", "--tb=short", *TEST_FILES,
    ]  # fmt: skip
    # Their tests write checkpoints into the working directory.
    code = subprocess.run(cmd, cwd=tests, env=env).returncode
    what = "the real zipslicer" if args.oracle else "tensorizer_rs.zipslicer"
    print(f"zipslicer {VERSION}'s own tests against {what}: pytest exit {code}, {time.monotonic() - started:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
