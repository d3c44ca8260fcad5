#!/usr/bin/env bash
# The virtual environment for the Python tests and benchmarks. Idempotent.
#
#   tests/python-env.sh           pinned packages, then tensorizer_rs built
#                                 into it with maturin (release profile):
#                                 what the main job and the benchmarks use
#   tests/python-env.sh --deps    the pinned packages only
#   tests/python-env.sh --link    tensorizer_rs from the workspace's own
#                                 debug build (target/debug/lib_native.so,
#                                 made by `cargo build --workspace
#                                 --all-targets`): what run-all.sh tests,
#                                 so the extension is not compiled twice
#
# The last line printed is the environment's path.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${TZR_TEST_VENV:-$PWD/.venv-test}"
mode="${1:-}"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi

case "$mode" in
--link)
    target="${CARGO_TARGET_DIR:-target}"
    built="$target/debug/lib_native.so"
    [ -f "$built" ] || { echo "python-env.sh: $built is missing (cargo build --workspace --all-targets)" >&2; exit 1; }
    # A new file renamed over the old one: a process that has the old one
    # loaded keeps its pages (copying over it in place crashes such a process).
    cp "$built" python/python/tensorizer_rs/_native.abi3.so.new
    mv -f python/python/tensorizer_rs/_native.abi3.so.new python/python/tensorizer_rs/_native.abi3.so
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    # What `maturin develop` leaves for a mixed project: a path entry for
    # the package's sources, beside the compiled module.
    echo "$PWD/python/python" >"$site/tensorizer_rs.pth"
    ;;
--deps | "")
    if ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
        echo "python-env.sh: $VENV has no pip" >&2
        exit 1
    fi
    "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade pip
    "$VENV/bin/pip" install -q --disable-pip-version-check -r tests/python-requirements.txt
    if [ -z "$mode" ]; then
        VIRTUAL_ENV="$VENV" "$VENV/bin/maturin" develop --release -q -m python/Cargo.toml
    fi
    ;;
*)
    echo "usage: tests/python-env.sh [--deps | --link]" >&2
    exit 2
    ;;
esac
echo "$VENV"
