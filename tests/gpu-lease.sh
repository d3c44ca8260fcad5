#!/usr/bin/env bash
# The GPU checks on a lent machine that has a GPU, a CUDA build of torch,
# pytest and safetensors, but neither cargo nor network. Everything else
# is prepared here into .gpu/ (ignored by git), carried there with the
# working tree, and the lent machine runs tests/gpu-tests.sh and then
# tests/gpu-bench.sh from it.
#
#   bash tests/gpu-lease.sh pack           # here: .gpu/ (about 35 MiB)
#   bash tests/gpu-lease.sh run [ARGS]     # there: logs and results in $OUT
#                                          # (ARGS go to bench_cuda.py)
#   bash tests/gpu-lease.sh tests          # there: tests/gpu-tests.sh only
#   bash tests/gpu-lease.sh cold [ARGS]    # there: bench_cold.py --device cuda
#   bash tests/gpu-lease.sh probe [ARGS]   # there: probe_cuda_first.py
#   bash tests/gpu-lease.sh all            # there: every check and measurement in one
#                                          # call (about 8 minutes on an H200 host)
#
# pack makes: tensorizer_rs (release, cuda feature), tensorizer
# 2.12.1 and the packages it needs that such an image lacks (as wheels, for
# CPython 3.12), the tensorizer-native `it` test binary with the cuda
# feature (stripped, xz), libsodium (tensorizer's libnacl loads it) and
# nginx (the benchmark's http rows).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${TZR_TEST_VENV:-$PWD/.venv-test}"
PACK=.gpu

pack() {
    rm -rf "$PACK"
    mkdir -p "$PACK/whl" "$PACK/lib"
    # tensorizer_rs unpacked with its library stripped (a third of the
    # size: the working tree that travels is limited to 64 MiB).
    VIRTUAL_ENV="$VENV" "$VENV/bin/maturin" build --release -q -m python/Cargo.toml -o "$PACK/build"
    "$VENV/bin/python" -m pip install -q --no-deps --no-compile --target "$PACK/pkg" "$PACK"/build/tensorizer_rs-*.whl
    strip "$PACK"/pkg/tensorizer_rs/_native*.so
    rm -rf "$PACK/build"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$PACK/whl" tensorizer==2.12.1 boto3 botocore s3transfer jmespath hiredis libnacl redis
    # The workspace's own test build: features are unified across the
    # workspace, so tensorizer-native's `it` has the cuda feature (the
    # python crate turns it on) and nothing is compiled twice.
    local bin
    bin="$(cargo test --locked --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("name") == "it" \
            and "host-native" in m.get("manifest_path", ""):
        print(m["executable"])
')"
    [ -n "$bin" ] || { echo "gpu-lease: no tensorizer-native it test binary was built" >&2; exit 1; }
    "$bin" --list 2>/dev/null | grep -q cuda_round_trip_or_skip \
        || { echo "gpu-lease: $bin was built without the cuda feature" >&2; exit 1; }
    strip -o "$PACK/it" "$bin"
    xz -T2 -6 "$PACK/it"
    # Where the binary looks for tests/vectors (CARGO_MANIFEST_DIR at build time).
    (cd host-native && pwd) >"$PACK/manifest_dir"
    # Under its SONAME: libnacl asks ctypes.util.find_library, which finds
    # the file on LD_LIBRARY_PATH and answers with the SONAME it must open.
    cp -L /usr/lib/x86_64-linux-gnu/libsodium.so.23 "$PACK/lib/libsodium.so.23"
    ln -s libsodium.so.23 "$PACK/lib/libsodium.so"
    # nginx for the benchmark's http rows (its libraries are in any glibc distribution's base).
    mkdir -p "$PACK/bin"
    cp /usr/sbin/nginx "$PACK/bin/"
    du -sh "$PACK"
}

run() {
    local mode="$1"
    shift
    [ -d "$PACK" ] || { echo "gpu-lease: $PACK is missing: run 'bash tests/gpu-lease.sh pack' here and carry $PACK" >&2; exit 1; }
    local out="${OUT:-$PWD/target/gpu-lease}"
    mkdir -p "$out"
    local site=/tmp/gpu-lease-site
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$PACK"/whl/*.whl
    export PYTHONPATH="$PWD/$PACK/pkg:$site${PYTHONPATH:+:$PYTHONPATH}"
    python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$PACK/it.xz" "$PACK/it"
    chmod +x "$PACK/it"
    export PATH="$PATH:$PWD/$PACK/bin"
    export LD_LIBRARY_PATH="$PWD/$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local manifest
    manifest="$(cat "$PACK/manifest_dir")"
    if [ ! -e "$manifest" ]; then
        mkdir -p "$(dirname "$manifest")"
        ln -s "$PWD/host-native" "$manifest"
    fi
    export TZR_TEST_PYTHON=python3 TZR_SKIP_BUILD=1 TZR_GPU_TEST_BIN="$PWD/$PACK/it" PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
    if [ "$mode" = probe ]; then
        python3 python/bench/probe_cuda_first.py "$@" | tee "$out/probe_cuda_first.md"
        return
    fi
    if [ "$mode" = all ]; then
        all "$out"
        return
    fi
    if [ "$mode" = cold ]; then
        python3 python/bench/bench_cold.py --device cuda --json "$out/bench_cold_cuda.json" "$@" | tee "$out/bench_cold_cuda.md"
        return
    fi
    local rc=0
    timeout "${TZR_GPU_TESTS_TIMEOUT:-300}" bash tests/gpu-tests.sh 2>&1 | tee "$out/gpu-tests.log" || rc=1
    [ "$mode" = tests ] && return "$rc"
    TZR_STAGING_MIB=1024 timeout 60 "$PACK/it" cuda_throughput --ignored --nocapture 2>&1 | tee "$out/cuda-throughput.log" || rc=1
    TZR_GPU_BENCH_OUT="$out" timeout "${TZR_GPU_BENCH_TIMEOUT:-400}" bash tests/gpu-bench.sh "$@" 2>&1 | tee "$out/gpu-bench.log" || rc=1
    return "$rc"
}

# One step of `all`: runs under its own time limit, its output in
# $out/NAME.log; a failure is reported and the next step runs.
step() {
    local out="$1" name="$2" limit="$3"
    shift 3
    local t0=$SECONDS rc=0
    timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
    echo "gpu-lease: $name: rc $rc in $((SECONDS - t0)) s"
    return 0
}

# Everything a lent device is for, in the order that matters if time runs
# out: the tests, the engine alone (plain and verified), first loads to
# the GPU and to the CPU from a cold and a warm page cache, the disk's own
# rate into fresh and faulted-in memory, and the 8 GiB warm-process loads.
all() {
    local out="$1" files="$PWD/target/bench-cold"
    step "$out" gpu-tests 120 bash tests/gpu-tests.sh
    step "$out" cuda-throughput 60 env TZR_STAGING_MIB=1024 "$PACK/it" cuda_throughput --ignored --nocapture
    step "$out" cold-cuda 200 python3 python/bench/bench_cold.py --device cuda --gib 1 --reps 2 --keep --dir "$files" \
        --json "$out/cold-cuda.json" --only limit device rs-own rs-theirs tensorizer safetensors
    step "$out" cold-cpu 160 python3 python/bench/bench_cold.py --device cpu --gib 1 --reps 2 --keep --dir "$files" \
        --json "$out/cold-cpu.json" --only limit memory device rs-own rs-theirs tensorizer safetensors
    step "$out" probe-direct 60 python3 python/bench/probe_direct.py "$files/1gib/own.tensors" --mib 1 4 --depth 16 --fresh --reps 2
    step "$out" gpu-bench 150 env TZR_GPU_BENCH_OUT="$out" bash tests/gpu-bench.sh --gib 8 --reps 2 --no-rss
}

case "${1:-}" in
pack) pack ;;
run | tests | cold | probe | all) run "$@" ;;
*) echo "usage: tests/gpu-lease.sh pack | run [bench_cuda.py arguments] | tests | cold [bench_cold.py arguments] | probe [probe_cuda_first.py arguments] | all" >&2; exit 2 ;;
esac
