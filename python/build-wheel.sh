#!/usr/bin/env bash
# Builds the tensorizer-rs wheel: stripped, for CPython's stable ABI (one
# wheel for 3.11 and newer), tagged with the oldest manylinux its symbols
# allow, with the full `tzr` inside (the `tzr` script runs it through the
# extension module). Checks it with `auditwheel show` and prints the
# wheel's path last.
#
#   python/build-wheel.sh                 the release profile: what users install
#   python/build-wheel.sh --profile dev   the workspace's debug build, packed
#                                         (what CI tests: no second compile)
#
# maturin and auditwheel come from $TZR_WHEEL_VENV (default
# target/wheel-venv, made here), pinned in python/build-requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
case "${1:-}" in
--profile) profile="${2:?--profile needs a cargo profile}" ;;
"") ;;
*)
    echo "usage: python/build-wheel.sh [--profile PROFILE]" >&2
    exit 2
    ;;
esac
target="${CARGO_TARGET_DIR:-target}"
venv="${TZR_WHEEL_VENV:-$target/wheel-venv}"
if ! "$venv/bin/python" -c 'import maturin, auditwheel' >/dev/null 2>&1; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r python/build-requirements.txt
fi
out="$target/wheels"
mkdir -p "$out"
rm -f "$out"/tensorizer_rs-*.whl
"$venv/bin/maturin" build --locked --quiet --profile "$profile" --strip \
    -m python/Cargo.toml -i "$venv/bin/python" -o "$out" >&2
wheel="$(ls "$out"/tensorizer_rs-*.whl)"
"$venv/bin/auditwheel" show "$wheel" >&2
echo "$(du -m "$wheel" | cut -f1) MiB" >&2
echo "$wheel"
