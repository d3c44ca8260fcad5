#!/usr/bin/env bash
# Builds the WASI validator (wasm32-wasip1) and runs its tests through
# wasmtime-py (and under Node's node:wasi when node is installed: once
# directly, then through the npm package in host-wasm/npm), then
# the Rust host in host-wasm/embed (wasmtime 48, its own workspace and lock,
# built into target/wasm-embed) on the same module. The host is linted by
# clippy in the same compile that builds its tests (clippy-driver as the
# workspace wrapper), so wasmtime is compiled once, not once to check and
# once to build. Idempotent: installs the wasm32-wasip1 target and the
# pinned wasmtime wheel only when they are missing.
#
# usage: host-wasm/test.sh [PYTHON]      (default: .venv-test/bin/python)
#        host-wasm/test.sh --build-host  (only build and lint the Rust host)
#        host-wasm/test.sh --without-host [PYTHON]
#                                        (everything but the Rust host)
#        host-wasm/test.sh --test-host   (only the Rust host's tests, on the
#                                         module a run above built)
# tests/run-all.sh runs --without-host, and the Rust host (--build-host at
# low priority, then --test-host) only with TZR_CI_WASMTIME_HOST=1.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$PWD/$TARGET_DIR" ;; esac
EMBED=(--locked --manifest-path host-wasm/embed/Cargo.toml --target-dir "$TARGET_DIR/wasm-embed")
# `cargo test` of the host, linted as `cargo clippy --all-targets -- -D
# warnings` would lint it (clippy-driver reads its arguments from
# CLIPPY_ARGS, separated as cargo-clippy separates them).
embed_test() {
    bash tests/linted.sh cargo test "${EMBED[@]}" "$@"
}
WASM="$TARGET_DIR/wasm32-wasip1/wasm-release/tensorizer-validate.wasm"
# The Rust embedding (host-wasm/embed). Not a workspace member; a failure to
# build it (offline, say) fails this script: there is no silent skip.
test_host() {
    if ! TZR_VALIDATOR_WASM="$WASM" embed_test; then
        echo "FAILED: clippy or the Rust host tests in host-wasm/embed (tensorizer-validate-host)" >&2
        exit 1
    fi
}
case "${1:-}" in
--build-host)
    embed_test --no-run
    exit 0
    ;;
--test-host)
    [ -f "$WASM" ] || { echo "host-wasm/test.sh --test-host: no module at $WASM (run host-wasm/test.sh first)" >&2; exit 2; }
    test_host
    exit 0
    ;;
esac
with_host=1
if [ "${1:-}" = "--without-host" ]; then
    with_host=0
    shift
fi

WASMTIME_PY_VERSION=50.0.1
PY="${1:-.venv-test/bin/python}"
if [ ! -x "$PY" ]; then
    echo "host-wasm/test.sh: no Python at $PY (create .venv-test with tests/python-env.sh, or pass one)" >&2
    exit 2
fi

if ! rustup target list --installed | grep -qx wasm32-wasip1; then
    if ! rustup target add wasm32-wasip1; then
        # As run-all.sh does for wasm32-unknown-unknown: say so loudly.
        echo "SKIPPED: rustup could not add the wasm32-wasip1 target; the WASI validator was not built or tested" >&2
        exit 0
    fi
fi
if ! "$PY" -c "import sys, importlib.metadata as m; sys.exit(m.version('wasmtime') != '$WASMTIME_PY_VERSION')" 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check "wasmtime==$WASMTIME_PY_VERSION"
fi
if ! "$PY" -c "import pytest" 2>/dev/null; then
    "$PY" -m pip install -q --disable-pip-version-check pytest
fi

# Linted as it builds (clippy -D warnings on host-wasm and the core for wasip1).
bash tests/linted.sh cargo build --locked -p tensorizer-wasm --target wasm32-wasip1 --bin tensorizer-validate \
    --config host-wasm/wasm-release.toml --profile wasm-release
echo "host-wasm: $WASM ($(wc -c <"$WASM") bytes)"

TZR_VALIDATOR_WASM="$WASM" "$PY" -m pytest host-wasm/tests -q -p no:cacheprovider

# The npm package (host-wasm/npm): the module copied in where the package
# expects it, its JS API tested under node --test, and (when npm is there)
# the package packed with this module, installed into an empty project and
# run as `npx tensorizer-validate` (test/pack.test.mjs, no registry).
if command -v node >/dev/null 2>&1; then
    cp "$WASM" host-wasm/npm/tensorizer-validate.wasm
    TZR_VALIDATOR_WASM="$WASM" node --test host-wasm/npm/test/
else
    echo "SKIPPED: node is not installed; the npm package (host-wasm/npm) was not tested" >&2
fi

if [ "$with_host" = 1 ]; then
    test_host
fi
