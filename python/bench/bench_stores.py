#!/usr/bin/env python3
"""Every remote store in one run: HTTP (nginx), S3 (moto_server), Redis
(redis-server), GCS (gcp-storage-emulator) and Azure Blob (Azurite), all
on 127.0.0.1, each loaded the same ways:

* the limit: N concurrent ranged ``curl`` GETs of the object from the same
  server (HTTP, and S3 / GCS / Azure through their plain object URLs); for
  Redis, N concurrent ``redis-cli GET``s of the keys the file is stored
  under (there is no curl for Redis);
* ``rs native``: tensorizer_rs's reader with N readers into buffers
  allocated and touched once (the transfer itself);
* ``rs deserializer``: ``TensorDeserializer(uri, num_readers=N)`` into
  fresh tensors, as a user calls it;
* ``tensorizer``: ``TensorDeserializer(open_stream(uri), num_readers=k)``
  for k in 1, 2, 4, the best reported (HTTP and S3; Redis with one reader,
  the only number its Redis stream allows; tensorizer has no gs:// or
  az://);
* resets: ``rs native`` through a loopback relay that resets a connection
  every ``--reset-every-mib`` MiB relayed, interleaved with the same relay
  not resetting (best and median of ``--pairs`` pairs).

Every contender runs once untimed, then ``--reps`` times interleaved with
the others; the best time is reported. Nothing is downloaded from outside
this machine. The emulators are Python (gcp-storage-emulator, moto) and
Node (Azurite) servers: their own speed is the limit there, and what the
rows compare is ours against curl on the same server.

Usage::

    python python/bench/bench_stores.py                      # every store
    python python/bench/bench_stores.py --stores http redis  # a subset
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import remote_servers  # noqa: E402
import tensorizer_rs  # noqa: E402
from bench_remote import NativeLoad, ResetProxy, curl_ranges, make_file  # noqa: E402
from tensorizer_rs import _native  # noqa: E402

MIB = 1 << 20
STORES = ("http", "s3", "redis", "gs", "az")


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Store:
    """One running server with the file uploaded: how to reach it directly
    and through a relay on another port."""

    def __init__(self, name: str, uri: str, port: int, limit: Callable[[], None], *,
                 env: dict[str, str] | None = None, s3: dict[str, object] | None = None,
                 relayed: Callable[[int], tuple[str, dict[str, str], dict[str, object]]] | None = None,
                 tensorizer: bool = True) -> None:
        self.name, self.uri, self.port, self.limit = name, uri, port, limit
        self.env, self.s3 = env or {}, s3 or {}
        self.relayed = relayed or (lambda p: (uri.replace(f":{port}", f":{p}"), self.env, self.s3))
        self.tensorizer = tensorizer


@contextlib.contextmanager
def start(name: str, path: str, streams: int) -> Iterator[Store]:
    size = os.path.getsize(path)
    key = "model.tensors"
    if name == "http":
        with remote_servers.nginx(os.path.dirname(path)) as base:
            url = f"{base}/{os.path.basename(path)}"
            yield Store(name, url, int(base.rsplit(":", 1)[1]), lambda: curl_ranges(url, size, streams))
    elif name == "s3":
        with remote_servers.s3_bucket("bench") as (endpoint, client):
            s3 = remote_servers.s3_credentials(endpoint)
            _native.upload(path, f"s3://bench/{key}", **s3)  # type: ignore[arg-type]
            url = client.generate_presigned_url(  # type: ignore[attr-defined]
                "get_object", Params={"Bucket": "bench", "Key": key}, ExpiresIn=3600)
            port = int(endpoint.rsplit(":", 1)[1])

            def via(p: int) -> tuple[str, dict[str, str], dict[str, object]]:
                return f"s3://bench/{key}", {}, {**s3, "s3_endpoint": f"http://127.0.0.1:{p}"}

            yield Store(name, f"s3://bench/{key}", port, lambda: curl_ranges(url, size, streams), s3=s3, relayed=via)
    elif name == "redis":
        with remote_servers.redis() as port:
            uri = f"redis://127.0.0.1:{port}/bench"
            _native.upload(path, uri)
            keys = subprocess.run(["redis-cli", "-p", str(port), "--raw", "KEYS", "bench*"], check=True,
                                  capture_output=True, text=True).stdout.split()

            def limit() -> None:
                # N concurrent clients, each GETting its share of the keys.
                shares = [keys[i::streams] for i in range(streams)]
                procs = []
                for share in shares:
                    if not share:
                        continue
                    p = subprocess.Popen(["redis-cli", "-p", str(port), "--raw"], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL)
                    assert p.stdin is not None
                    p.stdin.write("".join(f"GET {k}\n" for k in share).encode())
                    p.stdin.close()
                    procs.append(p)
                for p in procs:
                    if p.wait() != 0:
                        raise RuntimeError("redis-cli failed")

            yield Store(name, uri, port, limit)
    elif name in ("gs", "az"):
        # The emulator, the variable that points the scheme at it, and the
        # object's plain URL path (readable without credentials).
        starter, base_var, url_path = {
            "gs": (remote_servers.gcs, "GOOGLE_BASE_URL", f"/tzr/{key}"),
            "az": (remote_servers.azurite, "AZURITE_BLOB_STORAGE_URL", f"/devstoreaccount1/tzr/{key}"),
        }[name]
        with starter() as env, environment(env):
            uri = f"{name}://tzr/{key}"
            _native.upload(path, uri)
            port = int(env[base_var].rsplit(":", 1)[1])
            url = f"http://127.0.0.1:{port}{url_path}"

            def via(p: int) -> tuple[str, dict[str, str], dict[str, object]]:
                return uri, {**env, base_var: f"http://127.0.0.1:{p}"}, {}

            yield Store(name, uri, port, lambda: curl_ranges(url, size, streams), env=env, relayed=via,
                        tensorizer=False)
    else:
        raise ValueError(f"unknown store {name!r}")


def contenders(store: Store, args: argparse.Namespace) -> dict[str, Callable[[], None]]:
    n = args.streams
    out: dict[str, Callable[[], None]] = {
        f"limit ({'redis-cli' if store.name == 'redis' else 'curl'}, {n} streams)": store.limit,
        f"rs native, {n} readers": NativeLoad(store.uri, n, **store.s3),
    }

    if store.name in ("s3", "gs"):
        # moto and gcp-storage-emulator copy the whole object for every
        # range request: there, fewer requests win.
        out["rs native, 1 reader"] = NativeLoad(store.uri, 1, **store.s3)

    def rs_deser() -> None:
        src: Any = tensorizer_rs.stream_io.open_stream(store.uri, **store.s3) if store.s3 else store.uri
        with tensorizer_rs.TensorDeserializer(src, device="cpu", num_readers=n) as d:
            assert len(d) > 0

    out[f"rs deserializer, {n} readers"] = rs_deser
    if store.tensorizer:
        import tensorizer

        # tensorizer cannot reopen a Redis stream: one reader there.
        for k in args.tensorizer_readers if store.name != "redis" else [1]:

            def tz(k: int = k) -> None:
                stream = tensorizer.stream_io.open_stream(store.uri, **store.s3)
                d = tensorizer.TensorDeserializer(stream, device="cpu", num_readers=k)
                assert len(d) > 0
                d.close()

            out[f"tensorizer, num_readers={k}"] = tz
    return out


def measure(store: Store, args: argparse.Namespace) -> dict[str, Any]:
    fns = contenders(store, args)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for name, fn in fns.items():
        log(f"{store.name}: warming {name}")
        fn()
    for _ in range(args.reps):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    # Resets: the same relay, resetting or not, interleaved.
    relays = {every: ResetProxy(store.port, every) for every in (None, args.reset_every_mib * MIB)}
    loads = {}
    for every, relay in relays.items():
        uri, env, s3 = store.relayed(relay.port)
        with environment(env):
            loads[every] = (NativeLoad(uri, args.streams, **s3), env)
    for load, env in loads.values():
        with environment(env):
            load()
    resetting = relays[args.reset_every_mib * MIB]
    resetting.resets = 0
    pair_times: dict[int | None, list[float]] = {e: [] for e in loads}
    for _ in range(args.pairs):
        for every, (load, env) in loads.items():
            with environment(env):
                t = time.perf_counter()
                load()
                pair_times[every].append(time.perf_counter() - t)
    for relay in relays.values():
        relay.close()
    clean, reset = pair_times[None], pair_times[args.reset_every_mib * MIB]
    return {
        "times": times,
        "relay_clean": clean,
        "relay_reset": reset,
        "resets": resetting.resets,
    }


def report(results: dict[str, dict[str, Any]], sizes: dict[str, int], args: argparse.Namespace) -> str:
    lines = [
        f"streams/readers: {args.streams}; best / median of {args.reps} interleaved runs; "
        f"resets: one every {args.reset_every_mib} MiB, {args.pairs} interleaved pairs; {os.cpu_count()} CPUs",
        "",
        "| store | MiB | limit MB/s | rs native MB/s | rs native ÷ limit | rs deserializer MB/s | "
        "best tensorizer MB/s | rs deserializer ÷ tensorizer | with resets ÷ clean (best / median) | resets |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for store, r in results.items():
        size = sizes[store]
        best = {k: min(v) for k, v in r["times"].items()}
        rate = {k: size / v / 1e6 for k, v in best.items()}
        limit = next(v for k, v in rate.items() if k.startswith("limit"))
        native = next(v for k, v in rate.items() if k.startswith("rs native"))
        deser = next(v for k, v in rate.items() if k.startswith("rs deserializer"))
        tz = [v for k, v in rate.items() if k.startswith("tensorizer")]
        tz_best = max(tz) if tz else None
        ratio = f"{min(r['relay_reset']) / min(r['relay_clean']):.3f} / " \
                f"{statistics.median(r['relay_reset']) / statistics.median(r['relay_clean']):.3f}"
        lines.append(
            f"| {store} | {size // MIB} | {limit:.0f} | {native:.0f} | {native / limit:.2f}× | {deser:.0f} | "
            + (f"{tz_best:.0f} | {deser / tz_best:.2f}× | " if tz_best else "n/a | n/a | ")
            + f"{ratio} | {r['resets']} |"
        )
    lines += ["", "Every row (best / median):", "", "| store | contender | best | median | MB/s (best) |",
              "|---|---|---:|---:|---:|"]
    for store, r in results.items():
        for k, v in r["times"].items():
            lines.append(f"| {store} | {k} | {min(v) * 1e3:.0f} ms | {statistics.median(v) * 1e3:.0f} ms | "
                         f"{sizes[store] / min(v) / 1e6:.0f} |")
        lines.append(f"| {store} | rs native via the relay, clean | {min(r['relay_clean']) * 1e3:.0f} ms | "
                     f"{statistics.median(r['relay_clean']) * 1e3:.0f} ms | |")
        lines.append(f"| {store} | rs native via the relay, resets | {min(r['relay_reset']) * 1e3:.0f} ms | "
                     f"{statistics.median(r['relay_reset']) * 1e3:.0f} ms | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    ap.add_argument("--mib", type=int, default=256, help="file size for nginx and Redis (default 256)")
    ap.add_argument("--emulator-mib", type=int, default=128,
                    help="file size for moto, gcp-storage-emulator and Azurite (default 128)")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--tensorizer-readers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--reset-every-mib", type=int, default=32)
    ap.add_argument("--json", help="write the raw times here too")
    args = ap.parse_args()

    results: dict[str, dict[str, Any]] = {}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as d:
        files = {}
        for mib in {args.mib, args.emulator_mib}:
            files[mib] = os.path.join(d, f"model-{mib}.tensors")
            make_file(files[mib], mib)
        for name in args.stores:
            mib = args.mib if name in ("http", "redis") else args.emulator_mib
            sizes[name] = os.path.getsize(files[mib])
            log(f"== {name}: {mib} MiB")
            with start(name, files[mib], args.streams) as store:
                results[name] = measure(store, args)
    print(report(results, sizes, args))
    out = {"machine": platform.machine(), "cpus": os.cpu_count(), "args": vars(args), "sizes": sizes,
           "results": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
