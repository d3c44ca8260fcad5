#!/usr/bin/env bash
# Builds the tensorizer-rs wheel: for CPython's stable ABI (one
# wheel for 3.11 and newer), tagged with the oldest manylinux its symbols
# allow, with the full `tzr` inside (the `tzr` script runs it through the
# extension module). Checks it with `auditwheel show` and prints the
# wheel's path last.
#
#   python/build-wheel.sh                 the release profile (stripped), linked against
#                                         this machine's glibc (manylinux_2_34 on
#                                         Debian 12)
#   python/build-wheel.sh --zig           the release profile linked by zig
#                                         (PyPI's ziglang) for manylinux_2_28,
#                                         which installs where vLLM's wheels do
#   python/build-wheel.sh --profile dev   the debug profile (what CI tests:
#                                         after `cargo build --workspace`
#                                         with PYO3_CONFIG_FILE set alike,
#                                         only the extension's own crate
#                                         recompiles)
#
# maturin and auditwheel come from $TZR_WHEEL_VENV (default
# target/wheel-venv, made here), pinned in python/build-requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
zig=()
case "${1:-}" in
--profile) profile="${2:?--profile needs a cargo profile}" ;;
--zig) zig=(--zig --compatibility manylinux_2_28) ;;
"") ;;
*)
    echo "usage: python/build-wheel.sh [--zig | --profile PROFILE]" >&2
    exit 2
    ;;
esac
target="${CARGO_TARGET_DIR:-target}"
venv="${TZR_WHEEL_VENV:-$target/wheel-venv}"
if ! "$venv/bin/python" -c 'import maturin, auditwheel' >/dev/null 2>&1; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r python/build-requirements.txt
fi
if [ "${#zig[@]}" -gt 0 ]; then
    "$venv/bin/python" -c 'import ziglang' >/dev/null 2>&1 ||
        "$venv/bin/pip" install -q --disable-pip-version-check -r python/build-requirements-zig.txt
    # maturin finds zig as `python -m ziglang` on PATH.
    export PATH="$venv/bin:$PATH"
fi
out="$target/wheels"
mkdir -p "$out"
rm -f "$out"/tensorizer_rs-*.whl
# No --strip: the release profile strips, and for the dev profile it would
# be one more profile to cargo, rebuilding more.
"$venv/bin/maturin" build --locked --quiet --profile "$profile" "${zig[@]}" \
    -m python/Cargo.toml -i "$venv/bin/python" -o "$out" >&2
wheel="$(ls "$out"/tensorizer_rs-*.whl)"
"$venv/bin/auditwheel" show "$wheel" >&2
echo "$(du -m "$wheel" | cut -f1) MiB" >&2
echo "$wheel"
