#!/usr/bin/env bash
# Creates (or reuses) the virtual environment for the Python tests and
# benchmarks, then builds tensorizer_rs into it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TZR_TEST_VENV:-$PWD/.venv-test}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
fi
"$VENV/bin/pip" install -q --disable-pip-version-check -r tests/python-requirements.txt
VIRTUAL_ENV="$VENV" "$VENV/bin/maturin" develop --release -q -m python/Cargo.toml
echo "$VENV"
