"""Redis Cluster against single-node Redis, on this machine.

One file (default 256 MiB of bf16 in 16 MiB tensors) is stored with the
native writer (``tzr copy``'s code) in one redis-server and in a
three-master cluster (tests/redis-cluster.sh), then read back, the
contenders interleaved, ``--reps`` times each:

* ``raw GET``: the socket limit, N threads per server each pipelining
  RESP ``GET``s of its share of that server's keys (bench_remote.py's
  ``redis_raw``; on the cluster, every master at once);
* ``rs native``: tensorizer_rs's reader with N readers into buffers
  allocated and touched once (opening, listing and every read included);
* ``rs deser``: ``TensorDeserializer(uri, num_readers=N)`` into fresh tensors.

Run: ``python python/bench/bench_redis_cluster.py [--mib 256] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import bench_remote  # noqa: E402
import remote_servers  # noqa: E402
import tensorizer_rs  # noqa: E402
from tensorizer_rs import _native  # noqa: E402

MIB = 1 << 20
SCRIPT = os.path.join(HERE, "..", "..", "tests", "redis-cluster.sh")


def keys_on(port: int) -> list[str]:
    out = subprocess.run(["redis-cli", "-p", str(port), "--raw", "KEYS", "bench*"], check=True,
                         capture_output=True, text=True).stdout
    return [k for k in out.split("\n") if k and not k.endswith(".tzr-generation")]


def raw_all(ports: list[int], streams: int) -> Callable[[], None]:
    """Every server's keys at once, ``streams`` connections per server."""
    shares = [(p, keys_on(p)) for p in ports]

    def run() -> None:
        threads = [threading.Thread(target=bench_remote.redis_raw, args=(p, k, streams)) for p, k in shares if k]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    return run


def deser(uri: str, readers: int) -> Callable[[], None]:
    def run() -> None:
        with tensorizer_rs.TensorDeserializer(uri, device="cpu", num_readers=readers) as d:
            for _ in d.values():
                pass

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--streams", type=int, default=4)
    args = ap.parse_args()
    n = args.streams
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.tensors")
        bench_remote.make_file(path, args.mib)
        size = os.path.getsize(path)
        cluster_dir = os.path.join(d, "cluster")
        out = subprocess.run([SCRIPT, "start", cluster_dir], check=True, capture_output=True, text=True)
        ports = [int(p) for p in out.stdout.split()]
        try:
            with remote_servers.redis() as single:
                uris = {"single": f"redis://127.0.0.1:{single}/bench",
                        "cluster": f"redis+cluster://127.0.0.1:{ports[0]}/bench"}
                for uri in uris.values():
                    _native.upload(path, uri, overwrite=True)
                masters = [len(keys_on(p)) for p in ports]
                contenders: dict[str, Callable[[], None]] = {}
                for name, uri in uris.items():
                    servers = [single] if name == "single" else ports
                    contenders[f"{name}: raw GET, {n} per server"] = raw_all(servers, n)
                    contenders[f"{name}: rs native, {n} readers"] = bench_remote.NativeLoad(uri, n)
                    contenders[f"{name}: rs native, 1 reader"] = bench_remote.NativeLoad(uri, 1)
                    contenders[f"{name}: rs deser, {n} readers"] = deser(uri, n)
                times: dict[str, list[float]] = {k: [] for k in contenders}
                for _ in range(args.reps):
                    for k, f in contenders.items():
                        t = time.perf_counter()
                        f()
                        times[k].append(time.perf_counter() - t)
        finally:
            subprocess.run([SCRIPT, "stop", cluster_dir], check=False)
    print(f"{size / MIB:.0f} MiB file; cluster keys per master {masters}; {args.reps} reps, interleaved; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| contender | best MB/s | median MB/s |")
    print("|---|---:|---:|")
    for k, ts in times.items():
        print(f"| {k} | {size / min(ts) / 1e6:.0f} | {size / statistics.median(ts) / 1e6:.0f} |")


if __name__ == "__main__":
    main()
