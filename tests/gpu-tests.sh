#!/usr/bin/env bash
# The GPU checks in one command, for a machine with an NVIDIA GPU and its
# driver. Needs no network: it uses the Python environment made beforehand
# by tests/python-env.sh (torch with CUDA, tensorizer 2.12.1, pytest) and
# the crates already in ~/.cargo, and says what is missing otherwise.
#
#   bash tests/gpu-tests.sh
#
# 1. preflight: the environment, torch sees a CUDA device;
# 2. builds tensorizer_rs (release; the `cuda` feature is on by default)
#    unless TZR_SKIP_BUILD=1, and checks that its native CUDA path is live;
# 3. Rust: the staging ring tests and the CUDA engine's round trip of every
#    vector into device memory (TZR_REQUIRE_GPU=1: no silent skip);
# 4. python/tests/test_cuda.py against tensorizer_rs: device="cuda" for
#    every vector, load_into_module and torch_compat on the GPU, encrypted
#    (key and passphrase) and verified loads, corruption, both allocation
#    modes, copy streams, the TENSORIZER_RS_NATIVE_CUDA=0 escape hatch;
# 5. the same file against tensorizer 2.12.1's own CUDA path (the oracle).
#
# Environment: TZR_TEST_VENV (default .venv-test), TZR_TEST_PYTHON (a
# Python with the packages, instead of the environment's), TZR_SKIP_BUILD=1,
# TZR_GPU_TEST_BIN (a prebuilt tensorizer-native `it` test binary with the
# cuda feature, run instead of cargo: tests/gpu-lease.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
fail() {
    printf 'gpu-tests: %s\n' "$*" >&2
    exit 1
}

VENV="${TZR_TEST_VENV:-$PWD/.venv-test}"
PY="${TZR_TEST_PYTHON:-$VENV/bin/python}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TZR_REQUIRE_GPU=1 CARGO_NET_OFFLINE=true
export TZR_MOTO_SERVER="$VENV/bin/moto_server"

step "preflight"
[ -x "$PY" ] || command -v "$PY" >/dev/null 2>&1 || fail "missing: the Python environment $VENV. Make it where there is network (bash tests/python-env.sh) and bring it along, or point TZR_TEST_VENV at one with torch (CUDA build), pytest and tensorizer==2.12.1"
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L || true; else echo "nvidia-smi not found (torch may still find the driver)"; fi
"$PY" - <<'PYEOF' || fail "the Python environment is not ready for GPU tests (see above)"
import importlib.util
import sys

missing = [m for m in ("torch", "pytest", "numpy", "tensorizer") if importlib.util.find_spec(m) is None]
if missing:
    print(f"missing Python packages in {sys.prefix}: {', '.join(missing)} (tests/python-requirements.txt)")
    sys.exit(1)
import torch

if not torch.cuda.is_available():
    print(f"torch {torch.__version__} (CUDA build: {torch.version.cuda}) sees no CUDA device: check the driver (nvidia-smi) or install a CUDA build of torch")
    sys.exit(1)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s): {torch.cuda.get_device_name(0)}")
PYEOF

step "build tensorizer_rs (release, native CUDA loading)"
if [ "${TZR_SKIP_BUILD:-0}" = 1 ]; then
    echo "TZR_SKIP_BUILD=1: using the tensorizer_rs that $PY imports"
elif ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: using the tensorizer_rs installed in $VENV"
else
    VIRTUAL_ENV="$VENV" "$VENV/bin/maturin" develop --release -q -m python/Cargo.toml \
        || fail "the build failed; offline, every crate must already be in ~/.cargo (run 'cargo fetch --locked' where there is network)"
fi
"$PY" -c '
import sys
from tensorizer_rs import _cuda, _native
print("native CUDA path:", _native.cuda_available(), "| enabled:", _cuda.native_enabled())
sys.exit(0 if _cuda.native_enabled() else 1)
' || fail "tensorizer_rs loads to CUDA only through torch here: built without the cuda feature, libcuda not found (LD_LIBRARY_PATH), or TENSORIZER_RS_NATIVE_CUDA=0 is set"

step "Rust: staging ring and CUDA engine (cargo test --features cuda)"
if [ -n "${TZR_GPU_TEST_BIN:-}" ]; then
    "$TZR_GPU_TEST_BIN" staging --nocapture
elif command -v cargo >/dev/null 2>&1; then
    cargo test --locked --release -p tensorizer-native --features cuda --test it staging -- --nocapture
else
    echo "SKIPPED: cargo not found"
fi

step "Python: test_cuda.py against tensorizer_rs"
"$PY" -m pytest python/tests/test_cuda.py -q -p no:cacheprovider -rs

step "Python: test_cuda.py against tensorizer 2.12.1 (the oracle's CUDA path)"
TZ_UNDER_TEST=tensorizer "$PY" -m pytest python/tests/test_cuda.py -q -p no:cacheprovider -rs

step "all GPU checks passed"
