"""Copies or zero-copy views for local CPU loads: which is fastest?

Writes a 1 GiB file of ~300 bf16 tensors (once), reads it into the page
cache, then times, each trial in a fresh interpreter (so every variant
gets fresh, never-faulted memory, as a real load does), the load plus one
touch of every page of the result:

* ``mmap``: zero-copy views of a private copy-on-write map (``mmap=True``);
* ``copy``: private copies, ``torch.empty`` per tensor filled by the native
  ``load_into`` (the default);
* ``copy_thp``: the same with PyTorch's ``THP_MEM_ALLOC_ENABLE=1`` (torch
  aligns large allocations to 2 MiB and advises MADV_HUGEPAGE);
* ``arena_thp``: private copies into one anonymous map advised
  MADV_HUGEPAGE, carved into tensors with ``torch.frombuffer``.

Usage: python bench_copy_vs_mmap.py [--trials 5] [--dir /tmp] [VARIANT...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

TENSORS = 300
SHAPE = (1024, 1748)  # bf16: 3.4 MiB each, 1.0 GiB in all

CHILD = r"""
import json, mmap, os, sys, time
import torch
import tensorizer_rs as tz

path, variant = sys.argv[1], sys.argv[2]

def touch(tensors):
    # one byte of every 4 KiB page of every tensor
    return sum(int(t.detach().reshape(-1).view(torch.uint8)[::4096].sum()) for t in tensors)

start = time.perf_counter()
if variant == "mmap":
    d = tz.TensorDeserializer(path, device="cpu", mmap=True)
    tensors = list(d.values())
elif variant in ("copy", "copy_thp"):
    d = tz.TensorDeserializer(path, device="cpu")
    tensors = list(d.values())
elif variant == "arena_thp":
    d = tz.TensorDeserializer(path, device="cpu", lazy_load=True)
    entries = d._selected
    offsets, size = [], 0
    for e in entries:
        offsets.append(size)
        size += (e.nbytes + 63) // 64 * 64
    arena = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    arena.madvise(mmap.MADV_HUGEPAGE)
    raw = [torch.frombuffer(arena, dtype=torch.uint8, count=e.nbytes, offset=o) for e, o in zip(entries, offsets)]
    d._reader.load_into([e.index for e in entries], [r.numpy() for r in raw], False)
    tensors = [r.view(torch.bfloat16).reshape(e.shape) for r, e in zip(raw, entries)]
else:
    raise SystemExit("unknown variant " + variant)
loaded = time.perf_counter()
check = touch(tensors)
done = time.perf_counter()
print(json.dumps({"variant": variant, "load_s": loaded - start, "total_s": done - start, "check": check}))
"""


def make_file(path: str) -> None:
    import torch

    import tensorizer_rs as tz

    g = torch.Generator().manual_seed(0)
    n = SHAPE[0] * SHAPE[1]
    with tz.TensorSerializer(path) as s:
        sd = {}
        for i in range(TENSORS):
            sd[f"layer.{i}.weight"] = torch.randint(0, 256, (2 * n,), generator=g, dtype=torch.uint8).view(torch.bfloat16).reshape(SHAPE)
            if len(sd) == 20:
                s.write_state_dict(sd)
                sd = {}
        s.write_state_dict(sd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("variants", nargs="*", default=["mmap", "copy", "copy_thp", "arena_thp"])
    args = ap.parse_args()
    path = os.path.join(args.dir, "bench_bf16_1gib.tensors")
    if not os.path.exists(path):
        make_file(path)
    with open(path, "rb") as f:  # into the page cache
        while f.read(64 << 20):
            pass
    results: dict[str, list[dict[str, float]]] = {v: [] for v in args.variants}
    checks = set()
    for _ in range(args.trials):
        for v in args.variants:  # interleaved, so drift hits every variant alike
            env = dict(os.environ)
            if v == "copy_thp":
                env["THP_MEM_ALLOC_ENABLE"] = "1"
            out = subprocess.run([sys.executable, "-c", CHILD, path, v], capture_output=True, text=True, env=env, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            checks.add(r["check"])
            results[v].append(r)
    assert len(checks) == 1, f"variants disagree on the data: {checks}"
    size = os.path.getsize(path)
    print(f"file: {path}, {size / 2**30:.3f} GiB, {TENSORS} bf16 tensors {SHAPE}; {args.trials} trials, cpus={os.cpu_count()}")
    print(f"{'variant':<10} {'best load+touch':>16} {'median':>8} {'best load':>10} {'GiB/s (best)':>13}")
    for v, rs in results.items():
        totals = [r["total_s"] for r in rs]
        loads = [r["load_s"] for r in rs]
        print(f"{v:<10} {min(totals):>15.3f}s {statistics.median(totals):>7.3f}s {min(loads):>9.3f}s {size / 2**30 / min(totals):>13.2f}")


if __name__ == "__main__":
    main()
