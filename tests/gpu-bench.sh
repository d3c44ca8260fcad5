#!/usr/bin/env bash
# The GPU load benchmark in one command (python/bench/bench_cuda.py): 1 and
# 8 GiB of bf16 loaded to cuda from a warm page cache and from nginx on
# 127.0.0.1, by tensorizer_rs (one allocation per tensor, one carved
# allocation, and per tensor on 2 copy streams of its own), tensorizer,
# safetensors.torch.load_file(device="cuda"), and instanttensor and
# fastsafetensors when installed (a line says why one is skipped), beside a
# pinned cudaMemcpy of the same bytes (the limit); host RSS growth per row.
# Needs no network: it uses the environment made by tests/python-env.sh.
#
#   bash tests/gpu-bench.sh              # results in target/gpu-bench/
#   bash tests/gpu-bench.sh --dry-run    # the plan and the skips; no GPU needed
#   bash tests/gpu-bench.sh --gib 1      # extra arguments go to bench_cuda.py
#
# Environment: TZR_TEST_VENV (default .venv-test), TZR_TEST_PYTHON (a
# Python with the packages, instead of the environment's), TZR_SKIP_BUILD=1,
# TZR_GPU_BENCH_OUT (where the results go; default target/gpu-bench).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() {
    printf 'gpu-bench: %s\n' "$*" >&2
    exit 1
}

VENV="${TZR_TEST_VENV:-$PWD/.venv-test}"
PY="${TZR_TEST_PYTHON:-$VENV/bin/python}"
[ -x "$PY" ] || command -v "$PY" >/dev/null 2>&1 || fail "missing: the Python environment $VENV. Make it where there is network (bash tests/python-env.sh) and bring it along, or point TZR_TEST_VENV at one with torch (CUDA build), tensorizer==2.12.1 and safetensors"
export CARGO_NET_OFFLINE=true

if [ "${1:-}" = "--dry-run" ]; then
    shift
    exec "$PY" python/bench/bench_cuda.py --dry-run --http --streams 2 "$@"
fi

"$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
    || fail "torch sees no CUDA device here (nvidia-smi; a CUDA build of torch): nothing to measure"
if [ "${TZR_SKIP_BUILD:-0}" != 1 ] && command -v cargo >/dev/null 2>&1; then
    VIRTUAL_ENV="$VENV" "$VENV/bin/maturin" develop --release -q -m python/Cargo.toml \
        || fail "the build failed; offline, every crate must already be in ~/.cargo (run 'cargo fetch --locked' where there is network)"
fi

OUT="${TZR_GPU_BENCH_OUT:-$PWD/target/gpu-bench}"
FILES="$PWD/target/gpu-bench"
mkdir -p "$OUT" "$FILES"
# The files (3 x 8 GiB at most) go under target/, not /tmp.
"$PY" python/bench/bench_cuda.py --gib 1 8 --reps 3 --http --streams 2 --dir "$FILES" --json "$OUT/bench_cuda.json" "$@" \
    | tee "$OUT/bench_cuda.md"
echo "results: $OUT/bench_cuda.md, $OUT/bench_cuda.json"
