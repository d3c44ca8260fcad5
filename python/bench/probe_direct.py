"""What shape of reads around the page cache a disk wants: one file read
with ``O_DIRECT`` at each request size and queue depth, from a cold cache,
into memory already faulted in (so only the device is timed), beside
buffered sequential reads of the same file. With ``--fresh``, also the
cold path's shape (16 requests of 1 MiB in flight) into memory mapped
just before, in huge pages and in 4 KiB pages: what faulting in the
destination adds to the disk's time, and which pages add less.

    python python/bench/probe_direct.py FILE                  # sizes 1-8 MiB, depths 4-32
    python python/bench/probe_direct.py FILE --mib 1 4 --depth 16 --reps 3
    python python/bench/probe_direct.py FILE --mib 1 --depth 16 --fresh

Needs root (the page cache is dropped before each read). Prints a Markdown
table of medians in GB/s; spec §23.4 has what it found on the machines it
ran on, and why the cold path's request size and depth are what they are.
"""

from __future__ import annotations

import argparse
import mmap
import os
import statistics
import subprocess
import threading
import time
from typing import Any

MADV_POPULATE_WRITE = 23


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def direct(path: str, size: int, region: mmap.mmap, request: int, depth: int) -> float:
    """Reads `path` into `region` with `depth` threads of `request`-byte
    ``O_DIRECT`` reads; `region` holds `size` and one request more (the
    last request is whole blocks, so it may run past the end)."""
    view = memoryview(region)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    todo = iter(range(0, size, request))
    lock = threading.Lock()

    def reader() -> None:
        while True:
            with lock:
                at = next(todo, None)
            if at is None:
                return
            os.preadv(fd, [view[at : at + request]], at)

    start = time.perf_counter()
    threads = [threading.Thread(target=reader) for _ in range(depth)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    os.close(fd)
    view.release()
    return took


def fresh(path: str, size: int, huge: bool) -> float:
    """The cold path's shape into memory mapped now (the mapping is timed too)."""
    request = 1 << 20
    start = time.perf_counter()
    region = mmap.mmap(-1, size + request, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        region.madvise(mmap.MADV_HUGEPAGE)
    direct(path, size, region, request, 16)
    took = time.perf_counter() - start
    region.close()
    return took


def buffered(path: str, size: int, region: Any, request: int) -> float:
    """Reads `path` into `region` (any writable buffer of at least `size`
    bytes) with `request`-byte reads through the page cache, one thread."""
    view = memoryview(region)
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        at = 0
        while at < size:
            n = f.readinto(view[at : at + request])
            if not n:
                break
            at += n
    took = time.perf_counter() - start
    view.release()
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--mib", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--depth", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--fresh", action="store_true", help="also 16 x 1 MiB into fresh huge and 4 KiB pages")
    args = ap.parse_args()
    size = os.path.getsize(args.file)
    biggest = max(args.mib) << 20
    region = mmap.mmap(-1, size + biggest, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    region.madvise(mmap.MADV_HUGEPAGE)
    region.madvise(MADV_POPULATE_WRITE, 0, len(region))
    gb = size / 1e9
    rows: dict[str, list[float]] = {}
    for _ in range(args.reps):
        drop_caches()
        rows.setdefault("buffered 16 MiB reads, one thread", []).append(buffered(args.file, size, region, 16 << 20))
        for mib in args.mib:
            for depth in args.depth:
                drop_caches()
                took = direct(args.file, size, region, mib << 20, depth)
                rows.setdefault(f"O_DIRECT {mib} MiB × {depth} in flight", []).append(took)
        if args.fresh:
            for huge, name in ((True, "huge"), (False, "4 KiB")):
                drop_caches()
                took = fresh(args.file, size, huge)
                rows.setdefault(f"O_DIRECT 1 MiB × 16 into fresh memory, {name} pages", []).append(took)
    print(f"{args.file}: {size / 2**30:.2f} GiB, {args.reps} repetitions, medians, cold cache, memory faulted in unless a row says fresh\n")
    print("| reads | ms | GB/s |\n|---|---|---|")
    for name, xs in rows.items():
        m = statistics.median(xs)
        print(f"| {name} | {m * 1e3:.0f} | {gb / m:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
