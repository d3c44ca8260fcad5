#!/usr/bin/env bash
# Regenerate the tensorizer test vectors in this directory.
#
# Uses the virtualenv at $VECTORS_VENV (default: <repo>/.venv-vectors),
# creating it if needed, and installs the pinned tensorizer/torch into it
# only when they are not already importable there. An existing venv that
# already has them (e.g. VECTORS_VENV=/path/to/venv) is used as is.
#
# Environment:
#   VECTORS_VENV      venv directory (default: $REPO/.venv-vectors)
#   PYTHON            interpreter used to create the venv (default: python3)
#   VECTORS_PIP_ARGS  extra arguments for pip install (e.g. an index URL)
#
# Extra arguments are passed to generate.py (see --help).
# libsodium (libsodium.so.23, e.g. Debian package libsodium23) must be
# installed for the encrypted vectors.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${VECTORS_VENV:-$REPO/.venv-vectors}"
PY="$VENV/bin/python"

if [ ! -x "$PY" ]; then
    echo "creating venv $VENV" >&2
    "${PYTHON:-python3}" -m venv "$VENV"
fi

have_pins() {
    "$PY" - <<'PYEOF' 2>/dev/null
import numpy, libnacl, tensorizer, torch
assert tensorizer.__version__ == "2.12.1", tensorizer.__version__
assert torch.__version__.split("+")[0] == "2.15.0", torch.__version__
PYEOF
}

if ! have_pins; then
    echo "installing pinned packages into $VENV" >&2
    # shellcheck disable=SC2086  # VECTORS_PIP_ARGS is deliberately word-split
    "$PY" -m pip install ${VECTORS_PIP_ARGS:-} "tensorizer==2.12.1" "torch==2.15.0" numpy
    have_pins || { echo "pinned packages still not importable in $VENV" >&2; exit 1; }
fi

exec "$PY" "$HERE/generate.py" --out "$HERE" "$@"
