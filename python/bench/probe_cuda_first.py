"""Where the first ``device="cuda"`` load of a fresh process spends the
time that later loads in the same process do not (spec §19.1).

Each variant runs in a new process (the CUDA context made before any
clock, as in ``bench_cold.py``), on a warm page cache, and times a list of
steps one after another:

* ``load``: ``TensorDeserializer(own file, device="cuda")``, synchronized;
* ``tz``: the same with tensorizer 2.12.1 on its own file;
* ``avail``: ``cuda_available()`` (loading the driver library through
  cudarc and counting devices);
* ``alloc``: one ``torch.empty`` per tensor on the device, then freed (the
  caching allocator keeps the blocks for the next load);
* ``pin``: ``torch.empty(..., pin_memory=True)`` of the ring's size (what
  page-locking that much host memory costs here);
* ``pop4k`` / ``pophuge``: that much fresh anonymous memory in 4 KiB or
  huge pages, faulted in; ``reg``: ``cudaHostRegister`` of it.

``PROBE_READERS`` and ``PROBE_RING=buffers,MiB`` size our loads.

    python python/bench/probe_cuda_first.py [--gib 1] [--reps 3] [--dir D] [--only VARIANT...]

Markdown on stdout: per variant, the median of each step over the reps.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

#: name -> (steps, extra environment)
VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "base": (["load", "load"], {}),
    "driver first": (["avail", "load", "load"], {}),
    "driver+alloc first": (["avail", "alloc", "load", "load"], {}),
    "carved": (["avail", "load", "load"], {"TENSORIZER_RS_CUDA_ALLOC": "carved"}),
    "4 readers": (["avail", "alloc", "load", "load"], {"PROBE_READERS": "4"}),
    "ring 18×8 MiB": (["avail", "alloc", "load", "load"], {"PROBE_RING": "18,8"}),
    "ring 18×4 MiB": (["avail", "alloc", "load", "load"], {"PROBE_RING": "18,4"}),
    "ring 18×2 MiB": (["avail", "alloc", "load", "load"], {"PROBE_RING": "18,2"}),
    "8 readers, ring 10×16 MiB": (["avail", "alloc", "load", "load"], {"PROBE_READERS": "8"}),
    "8 readers, ring 10×4 MiB": (["avail", "alloc", "load", "load"], {"PROBE_READERS": "8", "PROBE_RING": "10,4"}),
    "pin cost": (["avail", "pin", "pin"], {}),
    "register 4 KiB pages": (["avail", "pop4k", "reg"], {}),
    "register huge pages": (["avail", "pophuge", "reg"], {}),
    "tensorizer": (["tz", "tz"], {}),
    "tensorizer, alloc first": (["alloc", "tz", "tz"], {}),
}

RING_BYTES = 18 * (16 << 20)
MADV_POPULATE_WRITE = 23


def child(steps: list[str], own: str, theirs: str, shape: tuple[int, int]) -> None:
    import torch

    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    import tensorizer_rs
    from tensorizer_rs import _native

    readers = os.environ.get("PROBE_READERS")
    kw = {"num_readers": int(readers)} if readers else {}
    ring = os.environ.get("PROBE_RING")
    if ring:
        from tensorizer_rs import _cuda

        k, mib = (int(x) for x in ring.split(","))

        def sized(reader, indices, tensors, verify_hash, streams):  # type: ignore[no-untyped-def]
            _native.reader_load_cuda(
                reader, indices, tensors, verify_hash, streams=streams, buffer_len=mib << 20, ring=k
            )

        _cuda._reader_load = sized
    tz = None
    if "tz" in steps:
        import tensorizer as tz  # before any clock, as our import is
    region = None
    out = []
    held: list[object] = []
    for step in steps:
        start = time.perf_counter()
        if step == "load":
            held.append(tensorizer_rs.TensorDeserializer(own, device="cuda", **kw))
            torch.cuda.synchronize()
        elif step == "tz":
            assert tz is not None
            held.append(tz.TensorDeserializer(theirs, device="cuda"))
            torch.cuda.synchronize()
        elif step == "avail":
            assert _native.cuda_available()
        elif step == "alloc":
            n, rows = shape
            held.extend(torch.empty((rows, 1024), dtype=torch.bfloat16, device="cuda") for _ in range(n))
            torch.cuda.synchronize()
        elif step in ("pop4k", "pophuge"):
            region = mmap.mmap(-1, RING_BYTES, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            region.madvise(mmap.MADV_HUGEPAGE if step == "pophuge" else mmap.MADV_NOHUGEPAGE)
            region.madvise(MADV_POPULATE_WRITE)
        elif step == "reg":
            assert region is not None
            addr = ctypes.addressof(ctypes.c_char.from_buffer(region))
            err = torch.cuda.cudart().cudaHostRegister(addr, RING_BYTES, 0)
            assert int(getattr(err, "value", err)) == 0, f"cudaHostRegister: {err}"
        elif step == "pin":
            held.append(torch.empty(RING_BYTES, dtype=torch.uint8, pin_memory=True))
        else:
            raise SystemExit(f"unknown step {step}")
        out.append((step, time.perf_counter() - start))
        held.clear()  # freed outside the clock; torch's allocator keeps the blocks
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--tensors", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=str(HERE.parents[2] / "target" / "bench-cold"), help="where the files are (shared with bench_cold.py)")
    ap.add_argument("--only", nargs="+", metavar="VARIANT", help="run only these variants")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        rows = int(args.gib * (1 << 30)) // args.tensors // 2 // 1024  # as bench_cold writes them
        child(args.child[0].split(","), args.child[1], args.child[2], (args.tensors, rows))
        return 0
    from bench_cold import write_files

    files = write_files(args.gib, args.tensors, Path(args.dir) / f"{args.gib:g}gib", ["own", "theirs"])
    for p in (files["own"], files["theirs"]):
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass
    print(f"| {args.gib:g} GiB, warm page cache, fresh process; ms, median of {args.reps} | steps |")
    print("|---|---|")
    for name, (steps, extra) in VARIANTS.items():
        if args.only and name not in args.only:
            continue
        runs = []
        for _ in range(args.reps):
            r = subprocess.run(
                [sys.executable, str(HERE), "--gib", str(args.gib), "--tensors", str(args.tensors)]
                + ["--child", ",".join(steps), files["own"], files["theirs"]],
                capture_output=True,
                text=True,
                env={**os.environ, **extra},
                check=False,
            )
            if r.returncode != 0:
                print(f"| {name} | failed: {r.stderr.strip().splitlines()[-1:]} |", flush=True)
                break
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        if len(runs) == args.reps:
            cells = [
                f"{step} {statistics.median(run[k][1] for run in runs) * 1e3:.0f}" for k, (step, _) in enumerate(runs[0])
            ]
            print(f"| {name} | {' → '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
