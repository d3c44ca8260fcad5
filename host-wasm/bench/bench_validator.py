#!/usr/bin/env python3
"""The WASI validator's run time against native `tzr verify`, in one run.

For every unencrypted test vector, and for any extra file given, runs
`tensorizer-validate validate --verify --json` through wasmtime-py (module
compiled once; fuel metering off, so this is the validator's own speed)
and `tzr verify` (release build, one reader), best of N each, and prints a
Markdown table with the ratio.

usage: host-wasm/bench/bench_validator.py [--reps N] [EXTRA_FILE ...]
(needs target/wasm32-wasip1/wasm-release/tensorizer-validate.wasm from
host-wasm/test.sh and target/release/tzr from `cargo build --release -p
tzr`)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import wasmtime

ROOT = Path(__file__).resolve().parents[2]
WASM = ROOT / "target" / "wasm32-wasip1" / "wasm-release" / "tensorizer-validate.wasm"
TZR = ROOT / "target" / "release" / "tzr"
VECTORS = ROOT / "tests" / "vectors"


def run_wasm(engine: wasmtime.Engine, module: wasmtime.Module, path: Path) -> float:
    store = wasmtime.Store(engine)
    wasi = wasmtime.WasiConfig()
    wasi.argv = ["tensorizer-validate", "validate", "--verify", "--json", f"/in/{path.name}"]
    wasi.preopen_dir(str(path.parent), "/in", False)
    wasi.stdout_file = "/dev/null"
    wasi.stderr_file = "/dev/null"
    store.set_wasi(wasi)
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    began = time.perf_counter()
    instance = linker.instantiate(store, module)
    try:
        instance.exports(store)["_start"](store)
    except wasmtime.ExitTrap as e:
        if e.code != 0:
            raise SystemExit(f"validator exit {e.code} on {path}") from e
    return time.perf_counter() - began


def run_native(path: Path) -> float:
    began = time.perf_counter()
    subprocess.run([str(TZR), "verify", "--num-readers", "1", str(path)], check=True, capture_output=True)
    return time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("extra", nargs="*", type=Path)
    args = ap.parse_args()
    manifest = json.loads((VECTORS / "manifest.json").read_text())
    files = [VECTORS / v["file"] for v in manifest["vectors"] if v.get("encryption") is None and v.get("readable", True)]
    files += args.extra
    engine = wasmtime.Engine()
    module = wasmtime.Module.from_file(engine, str(WASM))
    print("| file | bytes | validator (wasmtime) | tzr verify (native, 1 reader) | validator / native |")
    print("|---|---|---|---|---|")
    tot_w = tot_n = 0.0
    for f in files:
        w = min(run_wasm(engine, module, f) for _ in range(args.reps))
        n = min(run_native(f) for _ in range(args.reps))
        tot_w += w
        tot_n += n
        print(f"| {f.name} | {f.stat().st_size:,} | {w * 1e3:.1f} ms | {n * 1e3:.1f} ms | {w / n:.2f}× |")
    print(f"| all of the above | | {tot_w * 1e3:.1f} ms | {tot_n * 1e3:.1f} ms | {tot_w / tot_n:.2f}× |")


if __name__ == "__main__":
    sys.exit(main())
