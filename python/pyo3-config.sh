#!/usr/bin/env bash
# Writes the pyo3 build configuration for PYTHON's CPython, built for the
# stable ABI from the floor python/Cargo.toml names (its `abi3-pyXY`
# feature), to OUT, in pyo3-build-config's file format (what maturin
# writes for the same build). Point PYO3_CONFIG_FILE at it for every cargo
# and maturin run over one target directory, so they share artifacts.
#
# usage: python/pyo3-config.sh PYTHON OUT
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:?usage: python/pyo3-config.sh PYTHON OUT}"
out="${2:?usage: python/pyo3-config.sh PYTHON OUT}"
floor="$(grep -o 'abi3-py3[0-9]*' python/Cargo.toml | head -1 | sed 's/abi3-py3/3./')"
version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
implementation="$("$python" -c 'import platform; print(platform.python_implementation())')"
mkdir -p "$(dirname "$out")"
config="implementation=$implementation
version=$version
target_abi=$implementation-abi3-$floor
shared=true
build_flags=
suppress_build_script_link_lines=false"
# Rewritten only when it changes: cargo rebuilds pyo3 when it does.
if [ "$(cat "$out" 2>/dev/null)" != "$config" ]; then
    printf '%s\n' "$config" >"$out"
fi
