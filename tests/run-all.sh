#!/usr/bin/env bash
# Runs every check and test of the project. Safe to run repeatedly on a
# fresh machine: it installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s  [%dm%02ds into the run]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

step "servers for the remote-source tests (nginx, redis-server, curl and openssl, from Debian)"
missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# tensorizer itself reads http(s):// and s3:// through the curl binary.
command -v curl >/dev/null 2>&1 || missing+=(curl)
# The TLS tests make their CA and server certificate with the openssl command.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "missing: ${missing[*]}, and this user cannot install them (apt-get install ${missing[*]})" >&2
        exit 1
    fi
fi
export TZR_REQUIRE_SERVERS=1

step "toolchain components"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
have_wasm=1
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || have_wasm=0

step "format"
cargo fmt --all -- --check

step "clippy (workspace, all targets)"
cargo clippy --locked --workspace --all-targets -- -D warnings

step "clippy (core without std)"
cargo clippy --locked -p tensorizer-core --no-default-features -- -D warnings

step "host without its network features (local files only) builds cleanly"
cargo clippy --locked -p tensorizer-native --no-default-features --lib --bins -- -D warnings
cargo clippy --locked -p tensorizer-native --features cuda --lib -- -D warnings

step "core without std must not enable any dependency's std feature"
if cargo tree --locked -p tensorizer-core --no-default-features -e normal,features | grep -q 'feature "std"'; then
    echo "a dependency's std feature is enabled in the no_std build" >&2
    exit 1
fi

step "wasm32-unknown-unknown build of the core (no std)"
if [ "$have_wasm" = 1 ]; then
    cargo build --locked -p tensorizer-core --no-default-features --target wasm32-unknown-unknown
else
    echo "SKIPPED: rustup could not add the wasm32-unknown-unknown target"
fi

step "docs"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --no-deps -p tensorizer-core -p tensorizer-native -p tensorizer-wasm

step "fuzz targets build (stable)"
cargo build --locked --manifest-path fuzz/Cargo.toml --target-dir target/fuzz

step "python: virtual environment (torch, tensorizer 2.12.1, transformers, MiniLM) and tensorizer_rs build"
VENV="$(bash tests/python-env.sh | tail -1)"
# The S3 tests start moto_server from that environment.
export TZR_MOTO_SERVER="$VENV/bin/moto_server"

step "host-wasm: WASI validator (wasm32-wasip1) through wasmtime-py and node:wasi"
bash host-wasm/test.sh "$VENV/bin/python"

step "host-wasm: browser inspector (wasm32-unknown-unknown + wasm-bindgen) in headless chromium (playwright-core)"
if [ "$have_wasm" = 1 ]; then
    cargo clippy --locked -p tensorizer-wasm --target wasm32-unknown-unknown -- -D warnings
    bash host-wasm/browser-test.sh "$VENV/bin/python"
else
    echo "SKIPPED: rustup could not add the wasm32-unknown-unknown target; the browser inspector was not built or tested"
fi

step "clippy (WASI validator, wasm32-wasip1)"
if rustup target list --installed | grep -qx wasm32-wasip1; then
    cargo clippy --locked -p tensorizer-wasm --target wasm32-wasip1 -- -D warnings
else
    echo "SKIPPED: the wasm32-wasip1 target is not installed (see the step above)"
fi

step "cloud stores: GCS (gcp-storage-emulator), Azure Blob (Azurite, npm) and the AWS credential chain (moto STS, IMDS and ECS stand-ins)"
cargo clippy --locked -p tensorizer-native --features cloud --all-targets -- -D warnings
bash tests/cloud-servers.sh "$VENV"

step "GPU benchmark plan (its CPU side; the GPU runs are tests/gpu-tests.sh and tests/gpu-bench.sh)"
bash tests/gpu-bench.sh --dry-run

step "tests (core without std)"
cargo test --locked -p tensorizer-core --no-default-features --lib

step "tests (workspace)"
cargo test --locked --workspace

step "python: stubs match the extension (mypy.stubtest), package is strictly typed"
(cd python && "$VENV/bin/python" -m mypy.stubtest tensorizer_rs._native)
"$VENV/bin/python" -m mypy --strict python/python/tensorizer_rs

step "python: tests, interop with the real tensorizer, real models"
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV/bin/python" -m pytest python/tests -q -p no:cacheprovider

step "python: tensorizer 2.12.1's own tests against tensorizer_rs"
# Fetches tensorizer's sdist from PyPI (cached under target/; prints SKIPPED
# without network), runs its tests with `import tensorizer` giving
# tensorizer_rs, and checks each outcome against python/tests/upstream/expected.toml.
"$VENV/bin/python" python/tests/upstream/run.py

step "python: zipslicer 0.8.1's own tests against tensorizer_rs.zipslicer"
# Fetches zipslicer's sdist from PyPI (cached under target/, SHA-256
# checked; prints SKIPPED without network) and runs its tests unmodified.
"$VENV/bin/python" python/tests/upstream/run_zipslicer.py

printf '\n==> every check passed in %dm%02ds\n' $((SECONDS / 60)) $((SECONDS % 60))
