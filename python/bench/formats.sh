#!/usr/bin/env bash
# Issue 43's benchmark in one command: every format contender side by side,
# fresh process per load, cold (page cache dropped) and warm, at 1, 4 and
# 8 GiB (5, 3 and 2 repetitions), contenders interleaved; one JSON and the
# Markdown tables (with the targets' ratio lines) under $OUT.
#
#   sudo bash python/bench/formats.sh                          # the whole matrix (hours: see the estimate it prints)
#   sudo bash python/bench/formats.sh --gib 0.05 --reps 1      # end to end in a couple of minutes
#   BENCH_PY=/path/to/python OUT=/tmp/f bash python/bench/formats.sh --gib 1
#
# Needs: root (drop_caches; without it the loads are warm only, said so),
# the benchmark environment of contenders-requirements.txt (BENCH_PY, by
# default target/bench-venv/bin/python), nginx and moto_server as the tests
# use them, and free disk for one group of files (at 8 GiB one file kind,
# ~8.2 GiB, + 2 GiB; the run says what it needs and refuses to start
# short). Later arguments override the defaults (any bench_cold.py option).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${BENCH_PY:-target/bench-venv/bin/python}"
if [ ! -x "$PY" ]; then
    echo "formats.sh: no benchmark Python at $PY (see python/bench/contenders-requirements.txt, or set BENCH_PY)" >&2
    exit 2
fi
# What is measured is a release build of this tree, in a package of its own
# put first on the path (the test environment's module is a debug build,
# which bench_cold.py refuses).
PYO3_PYTHON="$PY" cargo build --release --locked -q -p tensorizer-py
PKG="$PWD/target/bench-pkg"
rm -rf "$PKG" && mkdir -p "$PKG"
cp -r python/python/tensorizer_rs "$PKG/"
rm -f "$PKG"/tensorizer_rs/_native*.so
cp target/release/lib_native.so "$PKG/tensorizer_rs/_native.abi3.so"
export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-target/bench-formats/$(date -u +%Y%m%dT%H%M%SZ)}"
mkdir -p "$OUT"
[ "$(id -u)" = 0 ] || echo "formats.sh: not root: the page cache cannot be dropped, warm loads only" >&2
CONTENDERS=(
    limit device memory copy copy-4k rs-own rs-theirs tensorizer rs-st rs-st-ro safetensors safetensors-pread safetensors-ro fastsafetensors runai
    torch-mmap rs-pt rs-folder st-folder fastsafetensors-folder rs-s3 rs-st-s3 runai-s3 rs-folder-s3
)
"$PY" python/bench/bench_cold.py --gib 1 4 8 --reps 5 3 2 --s3-max-gib 1 --group-files --targets \
    --only "${CONTENDERS[@]}" --json "$OUT/formats.json" "$@" 2> >(tee "$OUT/progress.log" >&2) | tee "$OUT/formats.md"
echo "formats.sh: results in $OUT (formats.md, formats.json, progress.log)" >&2
