"""Lazy torch.save checkpoints: tensorizer_rs.zipslicer against the real
zipslicer 0.8.1, torch.load and torch.load(mmap=True), in one run.

For a checkpoint of ``--gib`` GiB (16 large float32 tensors plus 64 small
ones) it measures, per contender, each in a fresh process so no page of a
tensor is already mapped:

* open + ``keys()``: time, and bytes read through read(2) (``rchar`` of
  /proc/self/io; memory-mapped reads do not count there, so the mmap row
  also reports the pages it touched, via the RSS growth);
* one large tensor: time and bytes read;
* full lazy iteration with every page of every tensor touched;

then the conversion throughput of ``tzr convert model.pt model.tensors``
(and ``.safetensors``, and ``tensorizer_rs.convert`` from Python) against
the raw limit of reading the file and writing it back with fsync
(``cat model.pt > copy; sync``), with the CPU time each took (user + system,
which a busy machine inflates less than the wall time). Results are
Markdown on stdout; best and median of ``--reps``.

    python python/bench/bench_checkpoint.py --gib 1 --reps 5
    python python/bench/bench_checkpoint.py --gib 1 --reps 5 --only convert
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: prints one JSON object.
CHILD = r"""
import json, os, sys, time
which, path, big_key = sys.argv[1], sys.argv[2], sys.argv[3]

def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar:")).split()[1])

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def touch(t):
    v = t.reshape(-1).view(torch.uint8) if t.numel() else t
    return int(v[:: 4096].sum()) if t.numel() else 0

import torch
if which == "ours":
    from tensorizer_rs import zipslicer as zs
    open_ = lambda: zs.load(path)
elif which == "ours_mmap":
    from tensorizer_rs import zipslicer as zs
    open_ = lambda: zs.load(path, mmap=True)
elif which == "zipslicer":
    import zipslicer as zs
    open_ = lambda: zs.load(path)
elif which == "torch":
    open_ = lambda: torch.load(path, map_location="cpu", weights_only=True)
else:
    open_ = lambda: torch.load(path, map_location="cpu", weights_only=True, mmap=True)
out = {}
r0, m0, t0 = rchar(), rss(), time.perf_counter()
sd = open_()
keys = list(sd.keys())
out["open_s"] = time.perf_counter() - t0
out["open_bytes"] = rchar() - r0
out["open_rss"] = rss() - m0
r1, t1 = rchar(), time.perf_counter()
touch(sd[big_key])
out["one_s"] = time.perf_counter() - t1
out["one_bytes"] = rchar() - r1
t2 = time.perf_counter()
for k in keys:
    touch(sd[k])
out["all_s"] = time.perf_counter() - t2 + out["open_s"]
out["keys"] = len(keys)
print(json.dumps(out))
"""

CONTENDERS = [
    ("ours", "**tensorizer_rs.zipslicer**"),
    ("ours_mmap", "tensorizer_rs.zipslicer mmap=True (opt-in views)"),
    ("zipslicer", "zipslicer 0.8.1"),
    ("torch", "torch.load(weights_only=True)"),
    ("torch_mmap", "torch.load(mmap=True)"),
]


def build(path: Path, gib: float) -> str:
    import torch

    big = max(1, int(gib * (1 << 30)) // 16 // 4)
    g = torch.Generator().manual_seed(0)
    state = {}
    for i in range(16):
        state[f"layers.{i}.weight"] = torch.randn(big, generator=g)
        for j in range(4):
            state[f"layers.{i}.norm{j}"] = torch.randn(256, generator=g)
    torch.save(state, path)
    return "layers.7.weight"


def fmt_s(v: float) -> str:
    return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"


def fmt_b(v: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if v < 1024 or unit == "GiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return str(v)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], cpu: list[float] | None = None) -> float:
    c = _children_cpu()
    t = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t
    if cpu is not None:
        cpu.append(_children_cpu() - c)
    return wall


# Times only the call (importing torch, which tensorizer_rs does, takes seconds).
PY_CONVERT = """
import json, sys, time, tensorizer_rs
c, t = time.process_time(), time.perf_counter()
tensorizer_rs.convert(sys.argv[1], sys.argv[2])
print(json.dumps({"s": time.perf_counter() - t, "cpu": time.process_time() - c}))
"""


def self_timed(cmd: list[str], cpu: list[float]) -> float:
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    cpu.append(out["cpu"])
    return float(out["s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--only", choices=["all", "lazy", "convert"], default="all",
                    help="run only the lazy loads or only the conversions")
    args = ap.parse_args()
    tzr = ROOT / "target" / "release" / "tzr"
    subprocess.run(["cargo", "build", "--release", "-q", "--bin", "tzr"], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "model.pt"
        big_key = build(path, args.gib)
        size = path.stat().st_size
        print(f"checkpoint: {fmt_b(size)}, 80 tensors", file=sys.stderr)
        runs: dict[str, list[dict[str, float]]] = {k: [] for k, _ in CONTENDERS}
        for rep in range(args.reps if args.only != "convert" else 0):
            for key, _ in CONTENDERS:
                res = subprocess.run([sys.executable, "-c", CHILD, key, str(path), big_key],
                                     capture_output=True, text=True)
                if res.returncode != 0:
                    runs[key].append({"error": res.stderr.strip().splitlines()[-1]})  # type: ignore[dict-item]
                    continue
                runs[key].append(json.loads(res.stdout))
            print(f"  rep {rep + 1}/{args.reps} done", file=sys.stderr)
        raw_label = "raw: read + write + fsync (cat, sync)"
        jobs: list[tuple[str, str, Callable[[Path], list[str]]]] = [
            ("tzr convert → .tensors", "out.tensors", lambda out: [str(tzr), "convert", str(path), str(out)]),
            ("tzr convert → .safetensors", "out.safetensors",
             lambda out: [str(tzr), "convert", str(path), str(out)]),
            ("tensorizer_rs.convert → .tensors (the call)", "py.tensors",
             lambda out: [sys.executable, "-c", PY_CONVERT, str(path), str(out)]),
            (raw_label, "copy.pt", lambda out: ["sh", "-c", f"cat '{path}' > '{out}' && sync '{out}'"]),
        ]
        conv: dict[str, list[float]] = {label: [] for label, _, _ in jobs}
        cpu: dict[str, list[float]] = {label: [] for label, _, _ in jobs}
        for _ in range(args.reps if args.only != "lazy" else 0):
            for label, name, cmd in jobs:
                out = Path(tmp) / name
                run = self_timed if label.startswith("tensorizer_rs") else timed
                conv[label].append(run(cmd(out), cpu[label]))
                out.unlink()

    print(f"## bench_checkpoint.py\n\nCheckpoint: {fmt_b(size)} (16 float32 tensors of "
          f"{fmt_b(size / 16)} and 64 small ones), written by torch.save; warm page cache; each "
          f"contender in a fresh process; best / median of {args.reps}. Bytes: read(2) bytes "
          f"(`rchar`); memory-mapped reads do not count there (RSS growth shown for open).\n")
    if args.only != "convert":
        print("| contender | open + keys | bytes read | RSS growth | one large tensor | bytes read | "
              "all tensors, every page touched | GB/s |")
        print("|---|---|---|---|---|---|---|---|")
        for key, label in CONTENDERS:
            ok = [r for r in runs[key] if "error" not in r]
            if not ok:
                err = runs[key][0].get("error", "?") if runs[key] else "?"
                print(f"| {label} | *failed: {err}* | | | | | | |")
                continue

            def bm(f: str) -> str:
                vals = [r[f] for r in ok]
                return f"{fmt_s(min(vals))} / {fmt_s(statistics.median(vals))}"

            best_all = min(r["all_s"] for r in ok)
            print(f"| {label} | {bm('open_s')} | {fmt_b(min(r['open_bytes'] for r in ok))} | "
                  f"{fmt_b(min(r['open_rss'] for r in ok))} | {bm('one_s')} | "
                  f"{fmt_b(min(r['one_bytes'] for r in ok))} | {bm('all_s')} | {size / best_all / 1e9:.2f} |")
    if args.only != "lazy":
        print("\n| conversion | best | median | GB/s (best) | × raw | CPU s (best) |")
        print("|---|---|---|---|---|---|")
        raw = min(conv[raw_label])
        for label, vals in conv.items():
            print(f"| {label} | {fmt_s(min(vals))} | {fmt_s(statistics.median(vals))} | "
                  f"{size / min(vals) / 1e9:.2f} | {raw / min(vals):.2f} | {min(cpu[label]):.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"size": size, "runs": runs, "convert": conv, "convert_cpu": cpu}, indent=1))


if __name__ == "__main__":
    main()
