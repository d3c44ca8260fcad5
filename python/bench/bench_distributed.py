#!/usr/bin/env python3
"""Cooperative loading over torch.distributed (spec §24) against independent
loads: groups of 1, 2 and 4 gloo ranks (processes on this machine) load one
file from nginx (HTTP) and moto_server (S3) on 127.0.0.1, either each rank on
its own (``TensorDeserializer(uri)``) or together
(``TensorDeserializer(uri, process_group=WORLD)``). Per case: the bytes the
store served (the sum of the ranks' readers' counts; for nginx, checked
against its access log) and the wall time (from a barrier to the slowest
rank's end, exchange included), best and median of ``--reps`` interleaved
runs.

Usage::

    python python/bench/bench_distributed.py                   # 64 MiB, 3 reps
    python python/bench/bench_distributed.py --mib 256 --ranks 1 2 4 --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests")
sys.path.insert(0, TESTS)

import remote_servers  # noqa: E402  (nginx and moto on 127.0.0.1)


def write_file(path: str, mib: int) -> None:
    """A file of about `mib` MiB: 4 MiB float32 tensors and 512 small ones."""
    import torch

    import tensorizer_rs

    torch.manual_seed(0)
    tensors = {f"big.{k}": torch.randn(1 << 20) for k in range(max(mib // 4, 1))}
    tensors.update({f"small.{k}": torch.randn(256) for k in range(512)})
    with tensorizer_rs.TensorSerializer(path) as s:
        s.write_state_dict(tensors)


def run_group(tmp: str, world: int, jobs: list[dict[str, Any]], tag: str) -> list[list[dict[str, Any]]]:
    spec = os.path.join(tmp, f"spec-{tag}.json")
    with open(spec, "w") as f:
        json.dump({"world": world, "init": f"file://{tmp}/rdv-{tag}", "timeout": 120, "jobs": jobs}, f)
    worker = os.path.join(TESTS, "distributed_worker.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, worker, spec, str(r)], env=env) for r in range(world)]
    for p in procs:
        if p.wait(timeout=600):
            raise SystemExit(f"a rank exited with {p.returncode}")
    out = []
    for r in range(world):
        with open(f"{spec}.{r}.json") as f:
            out.append(json.load(f))
    return out


def served_by_nginx(log: str) -> int:
    with open(log) as f:
        return sum(int(m.group(1)) for m in re.finditer(r'" \d{3} (\d+) "', f.read()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    rows = []
    checks: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.tensors")
        write_file(path, args.mib)
        size = os.path.getsize(path)
        log = os.path.join(tmp, "access.log")
        with remote_servers.nginx(tmp, f"access_log {log};") as base, remote_servers.s3_bucket() as (endpoint, client):
            client.upload_file(path, "models", "model.tensors")  # type: ignore[attr-defined]
            stores = {
                "http": {"src": f"{base}/model.tensors"},
                "s3": {"src": "s3://models/model.tensors", "s3": remote_servers.s3_credentials(endpoint)},
            }
            for store, source in stores.items():
                for world in args.ranks:
                    # One group per case: an untimed warm-up, then the reps
                    # of both ways, interleaved.
                    jobs = [dict(source, barrier=True, group=True)]
                    for _ in range(args.reps):
                        jobs += [dict(source, barrier=True, group=False), dict(source, barrier=True, group=True)]
                    before = served_by_nginx(log) if os.path.exists(log) else 0
                    results = run_group(tmp, world, jobs, f"{store}-{world}")
                    served_http = served_by_nginx(log) - before if store == "http" else None
                    for way, group in (("independent", False), ("cooperative", True)):
                        picks = [k for k in range(1, len(jobs)) if jobs[k]["group"] == group]
                        walls = [max(r[k]["seconds"] for r in results) for k in picks]
                        read = sum(r[picks[0]]["bytes"] for r in results)
                        rows.append({
                            "store": store, "ranks": world, "way": way, "file_bytes": size, "store_bytes": read,
                            "best_s": min(walls), "median_s": statistics.median(walls),
                        })
                    if served_http is not None:
                        counted = sum(job["bytes"] for r in results for job in r)
                        checks.append(f"http, {world} ranks: nginx served {served_http} bytes in all, "
                                      f"the readers counted {counted}")
    print(f"file: {size / 2**20:.1f} MiB; store bytes per load (x file), wall time best / median of {args.reps}")
    print(f"{'store':6} {'ranks':>5} {'way':12} {'store bytes':>12} {'x file':>7} {'best s':>7} {'median s':>8}")
    for r in rows:
        print(f"{r['store']:6} {r['ranks']:>5} {r['way']:12} {r['store_bytes']:>12} {r['store_bytes'] / size:>7.2f} "
              f"{r['best_s']:>7.2f} {r['median_s']:>8.2f}")
    for line in checks:
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
