#!/usr/bin/env bash
# Runs every check and test of the project. Safe to run repeatedly on a
# fresh machine: it installs what it needs first.
#
# The machine this must fit has 2 cores, so the run is laid out around the
# compiler. What only downloads (Debian packages, pip, npm) starts at once in
# the background. Each thing is compiled once: one workspace build gives the
# Rust tests, the `tzr` the browser tests drive (with the inspector page its
# build script compiles and embeds) and the Python extension, and every
# test lane (Rust, Python, engines, the WASI module, the browser page)
# starts as soon as it is done, while the lint, doc and wasm builds run
# beside them: the lanes mostly wait on one core, a server or a
# subprocess, so together they keep both cores busy to the end instead of
# leaving one lane alone at the tail. Each background job and lane writes
# target/ci-logs/NAME.log, printed whole when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
LOGS="$ROOT/target/ci-logs"
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log

step() { printf '\n==> %s  [%dm%02ds into the run]\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

# Background jobs: `bg NAME CMD...` starts one; `await NAME` waits for it and
# prints its log, failing the run if it failed.
declare -A JOBS=()
bg() {
    local name="$1"
    shift
    ("$@") >"$LOGS/$name.log" 2>&1 &
    JOBS[$name]=$!
}
# A job started at low priority (`nice`) runs at normal priority from the
# moment something waits for it (root can raise a priority; others cannot,
# and then it simply stays low).
unnice() {
    local pid="$1" child
    renice -n 0 -p "$pid" >/dev/null 2>&1 || return 0
    for child in $(pgrep -P "$pid" 2>/dev/null); do unnice "$child"; done
}
await() {
    local name="$1" status=0
    [ -n "${JOBS[$name]:-}" ] || return 0
    unnice "${JOBS[$name]}"
    wait "${JOBS[$name]}" || status=$?
    unset "JOBS[$name]"
    printf '\n==> %s %s  [%dm%02ds into the run]\n' "$name" "$([ $status = 0 ] && echo done || echo FAILED)" \
        $((SECONDS / 60)) $((SECONDS % 60))
    cat "$LOGS/$name.log"
    if [ $status != 0 ]; then
        echo "run-all.sh: $name failed (exit $status); its log is above and in $LOGS/$name.log" >&2
        exit 1
    fi
}
trap 'for pid in "${JOBS[@]}"; do kill "$pid" 2>/dev/null || true; done' EXIT

step "downloads in the background: Debian packages, pip, npm"
system_packages() {
    local missing=()
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
    command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
    # tests/redis-cluster.sh joins the cluster nodes with redis-cli.
    command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
    # tensorizer itself reads http(s):// and s3:// through the curl binary.
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    # The TLS tests make their CA and server certificate with the openssl command.
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    # The browser inspector's tests drive Debian's chromium (playwright-core).
    [ -x "${TZR_CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium)
    # Azurite and playwright-core come from npm.
    command -v npm >/dev/null 2>&1 || missing+=(npm)
    [ "${#missing[@]}" -gt 0 ] || return 0
    if [ "$(id -u)" != 0 ]; then
        echo "missing: ${missing[*]}, and this user cannot install them (apt-get install ${missing[*]})" >&2
        return 1
    fi
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    echo "installed: ${missing[*]}"
}
bg apt system_packages
# The venv itself exists before any build: pyo3's build script reads
# PYO3_PYTHON, and every cargo command below sees the same one, so the
# Python extension and the Rust tests share one build.
VENV="${TZR_TEST_VENV:-$ROOT/.venv-test}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
export PYO3_PYTHON="$VENV/bin/python"
bg pip bash tests/python-env.sh --deps
node_packages() {
    # npm comes from the apt job when the machine lacks it.
    while ! command -v npm >/dev/null 2>&1; do
        kill -0 "$1" 2>/dev/null || { echo "npm is missing and the Debian job has ended" >&2; return 1; }
        sleep 2
    done
    bash tests/cloud-servers.sh --install
    bash host-wasm/browser-test.sh --install
}
bg npm node_packages "${JOBS[apt]}"

step "toolchain components"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# tzr's build embeds the inspector page, compiled for wasm32-unknown-unknown.
if ! rustup target add wasm32-unknown-unknown >/dev/null 2>&1; then
    echo "run-all.sh: rustup could not add the wasm32-unknown-unknown target, which tzr's build needs" \
        "for its inspector page (rustup target add wasm32-unknown-unknown)" >&2
    exit 1
fi
rustup target add wasm32-wasip1 >/dev/null 2>&1 || true

# The Rust host of the WASI validator (host-wasm/embed) compiles wasmtime:
# 7 CPU-minutes, a quarter of what the rest of the run leaves this
# machine, so it is tested only when asked (TZR_CI_WASMTIME_HOST=1) and by
# `bash host-wasm/test.sh`, its crate's own script. Asked, it builds at the
# lowest priority from here on, soaking up the cycles the rest leaves idle.
WASMTIME_HOST="${TZR_CI_WASMTIME_HOST:-0}"
if [ "$WASMTIME_HOST" = 1 ]; then
    bg wasmtime-host nice -n 19 bash host-wasm/test.sh --build-host
fi

step "format (the workspace, the fuzz targets, the wasmtime host)"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo fmt --manifest-path host-wasm/embed/Cargo.toml -- --check

# Clippy lints the workspace's crates inside the builds themselves
# (tests/linted.sh): a separate `cargo clippy` would type-check every
# dependency a second time. Every cargo command on target/debug runs
# through it, or the workspace's crates would rebuild.
LINTED=(bash "$ROOT/tests/linted.sh")
# A fresh machine builds everything once: incremental compilation only
# costs time here.
export CARGO_INCREMENTAL=0
# pyo3's view of the interpreter, in one file for the workspace build and
# for maturin alike (maturin takes a PYO3_CONFIG_FILE already set): with one
# value for both, pyo3 is built once: the wheel step recompiles only the
# extension's own crate (python/Cargo.toml asks for the core's defaults,
# which the workspace build turns on), and the Rust lane does not then
# rebuild pyo3 and the extension's tests.
export PYO3_CONFIG_FILE="$ROOT/target/pyo3-config.txt"
bash python/pyo3-config.sh "$VENV/bin/python" "$PYO3_CONFIG_FILE"

# tzr's build script compiles the inspector page (host-wasm for
# wasm32-unknown-unknown, in target/view-page, linted too) beside the rest.
step "build, linted (clippy -D warnings): every workspace target once (Rust tests, tzr and its page, the Python extension)"
"${LINTED[@]}" cargo build --locked --workspace --all-targets
bash tests/python-env.sh --link >/dev/null

step "waiting for the downloads"
await apt
await pip
await npm

# The wheel users install, packed from this same build (maturin and
# auditwheel from the venv): its extension's crate recompiles, nothing else.
step "the wheel: packed from the debug build, checked by auditwheel"
WHEEL="$("${LINTED[@]}" env TZR_WHEEL_VENV="$VENV" bash python/build-wheel.sh --profile dev | tail -1)"

export TZR_REQUIRE_SERVERS=1
# The S3, GCS and Azure tests start moto_server, the GCS emulator and Azurite.
export TZR_MOTO_SERVER="$VENV/bin/moto_server"
export TZR_TEST_PYTHON="$VENV/bin/python"
export TZR_AZURITE="$ROOT/tests/cloud-servers/node_modules/.bin/azurite-blob"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

lane_rust() {
    step "tests (workspace, the cloud stores' included)"
    "${LINTED[@]}" cargo test --locked --workspace
    step "tests (core without std)"
    "${LINTED[@]}" cargo test --locked -p tensorizer-core --no-default-features --lib
}

# The wheel and the package's types, beside the Python tests: the longest
# lane starts its pytest run at once.
lane_wheel() {
    step "python: the wheel in a fresh virtual environment without a Rust toolchain"
    "$VENV/bin/python" tests/wheel-smoke.py "$WHEEL"
    step "python: stubs match the extension (mypy.stubtest), package is strictly typed"
    (cd python && "$VENV/bin/python" -m mypy.stubtest tensorizer_rs._native)
    "$VENV/bin/python" -m mypy --strict python/python/tensorizer_rs
    step "GPU benchmark plan (its CPU side; the GPU runs are tests/gpu-tests.sh and tests/gpu-bench.sh)"
    bash tests/gpu-bench.sh --dry-run
}

lane_python() {
    step "python: tests, interop with the real tensorizer, real models"
    "$VENV/bin/python" -m pytest python/tests -q -p no:cacheprovider
    step "python: tensorizer 2.12.1's own tests against tensorizer_rs"
    # Fetches tensorizer's sdist from PyPI (cached under target/; prints SKIPPED
    # without network), runs its tests with `import tensorizer` giving
    # tensorizer_rs, and checks each outcome against python/tests/upstream/expected.toml.
    "$VENV/bin/python" python/tests/upstream/run.py
    step "python: zipslicer 0.8.1's own tests against tensorizer_rs.zipslicer"
    # Fetches zipslicer's sdist from PyPI (cached under target/, SHA-256
    # checked; prints SKIPPED without network) and runs its tests unmodified.
    "$VENV/bin/python" python/tests/upstream/run_zipslicer.py
}

# The serving engines, unmodified from PyPI, each in a venv of its own that
# borrows the test venv's torch: mostly pip and imports, beside the other
# lanes rather than after the Python tests.
lane_engines() {
    step "engines: --load-format tensorizer_rs with the published vLLM 0.33.0 (its own Llama on the CPU)"
    "$VENV/bin/python" tests/vllm-plugin-smoke.py "$WHEEL"
    step "engines: tensorizer_rs.sglang_loader with the published SGLang 0.5.23"
    "$VENV/bin/python" tests/sglang-loader-smoke.py "$WHEEL"
}

lane_wasi() {
    step "host-wasm: WASI validator (wasm32-wasip1) through wasmtime-py and node:wasi"
    bash host-wasm/test.sh --without-host "$VENV/bin/python"
}

lane_browser() {
    step "host-wasm: the inspector page built into tzr, in headless chromium (playwright-core)"
    TZR_BIN="$ROOT/target/debug/tzr" bash host-wasm/browser-test.sh "$VENV/bin/python"
}

step "the test lanes start; lints, docs and wasm builds go on beside them"
bg lane-rust lane_rust
bg lane-python lane_python
bg lane-wheel lane_wheel
bg lane-engines lane_engines
bg lane-wasi lane_wasi
bg lane-browser lane_browser
# The other feature sets and targets are checked in a target directory of
# their own: check-mode artifacts are never shared with a build anyway, and
# a cargo holding target/debug's lock for a lint would stall the Rust lane.
LINT=(--locked --target-dir target/lint)

step "clippy (host and tzr without their network features)"
cargo clippy "${LINT[@]}" -p tensorizer-native -p tzr --no-default-features -- -D warnings

# rustdoc needs its crates' dependencies type-checked: here, beside the
# lint above, it shares what that checked (5 core-minutes alone).
step "docs (rustdoc -D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc "${LINT[@]}" --no-deps -p tensorizer-core -p tensorizer-native -p tensorizer-wasm

step "core without std must not enable any dependency's std feature"
if cargo tree --locked -p tensorizer-core --no-default-features -e normal,features | grep -q 'feature "std"'; then
    echo "a dependency's std feature is enabled in the no_std build" >&2
    exit 1
fi

# The core without std is linted as it builds for wasm32 (and its tests in
# the Rust lane); host-wasm is linted in its two release builds, one per
# target: the WASI lane's and the page's inside tzr's build.
step "wasm32-unknown-unknown build of the core (no std), linted"
"${LINTED[@]}" cargo build "${LINT[@]}" -p tensorizer-core --no-default-features --target wasm32-unknown-unknown

# Checked and linted, not linked: the campaigns (spec 15.10) build them
# with cargo-fuzz's flags; here it is enough that every target compiles.
step "fuzz targets compile (stable), linted"
cargo clippy --locked --manifest-path fuzz/Cargo.toml --target-dir target/fuzz -- -D warnings

await lane-wasi
if [ "$WASMTIME_HOST" = 1 ]; then
    await wasmtime-host
    step "host-wasm: the Rust host (wasmtime) on the module the WASI lane built"
    bash host-wasm/test.sh --test-host
else
    echo "SKIPPED: the Rust host of the WASI validator (host-wasm/embed); TZR_CI_WASMTIME_HOST=1 or bash host-wasm/test.sh runs it"
fi
await lane-browser
await lane-rust
await lane-wheel
await lane-python
await lane-engines

trap - EXIT
printf '\n==> every check passed in %dm%02ds\n' $((SECONDS / 60)) $((SECONDS % 60))
