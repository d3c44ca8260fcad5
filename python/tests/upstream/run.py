"""Run tensorizer 2.12.1's own test suite against tensorizer_rs.

    .venv-test/bin/python python/tests/upstream/run.py [--oracle] [--heavy] [-- PYTEST ARGS]

Their tests are not part of this repository: the sdist is fetched from PyPI
with ``pip download`` into ``target/releases`` (once; its SHA-256 is
checked), and its ``tests/`` are extracted to ``target/tensorizer-upstream``.
pytest then runs them there with ``upstream_plugin`` (this directory), which
makes ``import tensorizer`` give ``tensorizer_rs`` and applies
``expected.toml``, the list of tests that are skipped or expected to fail and
why. Offline: ``HF_HUB_OFFLINE=1``, and ``EleutherAI/gpt-neo-125M`` is a local
stand-in (``standin_model.py``) in a private hub cache.

Exits non-zero when any test's outcome differs from ``expected.toml`` (a
failure of a test listed as passing, or a pass of one listed as xfail).
Prints ``SKIPPED: ...`` and exits 0 when the sdist cannot be downloaded.

``--oracle`` runs the same tests against the real tensorizer (installed in
the test environment) with the same skips but no xfails: the control run
that shows which failures are ours. ``--heavy`` also runs the tests that
write files of 4 GiB and more (``heavy:`` in ``expected.toml``).
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

REPO = HERE.parents[2]
VERSION = "2.12.1"
#: tensorizer-2.12.1.tar.gz as published on PyPI.
SDIST = releases.Release(
    f"tensorizer=={VERSION}",
    f"tensorizer-{VERSION}.tar.gz",
    "8af9b3be54f31d08d1928e3f25bfaaa963cdc8d716d09559c68ec014f8beb440",
)
WORK_DIR = REPO / "target" / "tensorizer-upstream"
TEST_FILES = (
    "test_serialization.py",
    "test_stream_io.py",
    "test_syscalls.py",
    "test_torch_compat.py",
)
PYTEST_INI = """\
# Written by python/tests/upstream/run.py: makes this directory pytest's
# rootdir, so no configuration of the surrounding repository applies.
[pytest]
"""


def extract_tests(sdist: Path) -> Path:
    tests = WORK_DIR / "tests"
    if tests.exists():
        shutil.rmtree(tests)
    tests.mkdir(parents=True)
    prefix = f"tensorizer-{VERSION}/tests/"
    with tarfile.open(sdist) as tar:
        for name in TEST_FILES:
            member = tar.getmember(prefix + name)
            source = tar.extractfile(member)
            if source is None:
                sys.exit(f"{sdist}: {prefix + name} is not a regular file")
            (tests / name).write_bytes(source.read())
    (tests / "pytest.ini").write_text(PYTEST_INI)
    return tests


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--oracle", action="store_true", help="run against the real tensorizer")
    parser.add_argument("--heavy", action="store_true", help="also run the 4 GiB+ tests")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()

    started = time.monotonic()
    sdist = releases.fetch_or_skip(SDIST, "tensorizer's own tests")
    if sdist is None:
        return 0
    tests = extract_tests(sdist)

    hub_cache = WORK_DIR / "hf-cache"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    sys.path.insert(0, str(HERE))
    import standin_model

    standin_model.ensure(hub_cache)

    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_CACHE=str(hub_cache),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")])),
        TZR_UPSTREAM_IMPL="tensorizer" if args.oracle else "tensorizer_rs",
    )
    if args.heavy:
        env["TZR_UPSTREAM_HEAVY"] = "1"
    cmd = [
        sys.executable, "-m", "pytest", "-p", "upstream_plugin", "-p", "no:cacheprovider",
        "-q", "-rfEsxX", "--tb=short", *(args.pytest_args or TEST_FILES),
    ]  # fmt: skip
    code = subprocess.run(cmd, cwd=tests, env=env).returncode
    what = "the real tensorizer" if args.oracle else "tensorizer_rs"
    print(
        f"tensorizer {VERSION}'s own tests against {what}: pytest exit {code}, "
        f"{time.monotonic() - started:.0f} s"
    )
    if code != 0 and not args.oracle:
        print(
            "An outcome differs from python/tests/upstream/expected.toml: fix the "
            "regression, or (for an XPASS) change the test's entry to \"pass\"."
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
