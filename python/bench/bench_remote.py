#!/usr/bin/env python3
"""Remote-load benchmark: HTTP (nginx) and S3 (moto_server) on 127.0.0.1.

One run compares, on the same file and server:

* ``curl``: N concurrent ``curl -r`` processes, each fetching one contiguous
  Nth of the object to ``/dev/null`` -- the raw limit for N ranged streams;
* ``rs native``: ``tensorizer_rs``'s reader with N readers (8 MiB range
  requests, hashes verified off) filling preallocated, already-touched
  buffers -- the transfer pipeline itself;
* ``rs deserializer``: ``tensorizer_rs.TensorDeserializer(uri,
  num_readers=N)`` into fresh CPU tensors, as a user calls it;
* ``tensorizer``: ``TensorDeserializer(open_stream(uri), num_readers=k)`` for
  k in 1, 2, 4, 8; the best is reported;
* HTTP only: ``rs native`` through a loopback TCP proxy (splice relay), once
  clean and once resetting a connection after every 256 MiB relayed, to show
  what a reset costs (at least 7 interleaved pairs; best and median).

Each contender runs once untimed, then ``--reps`` times interleaved; the
best time is reported. Nothing is downloaded from outside this machine.

Usage::

    python python/bench/bench_remote.py                         # 1 GiB HTTP, 256 MiB S3, 3 reps
    python python/bench/bench_remote.py --http-mib 256 --reps 2 # quick
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import remote_servers  # noqa: E402
import tensorizer_rs  # noqa: E402
from tensorizer_rs import _native  # noqa: E402

MIB = 1 << 20


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def make_file(path: str, mib: int) -> None:
    """``mib`` MiB of bf16 in 16 MiB tensors (and one remainder)."""
    g = torch.Generator().manual_seed(1)
    state: dict[str, torch.Tensor] = {}
    left = mib * MIB // 2
    i = 0
    while left > 0:
        n = min(left, 8 * MIB)
        state[f"layer.{i}.weight"] = torch.randn(n, generator=g).to(torch.bfloat16)
        left -= n
        i += 1
    with tensorizer_rs.TensorSerializer(path) as s:
        s.write_state_dict(state)


def curl_ranges(url: str, size: int, streams: int) -> None:
    step = -(-size // streams)
    procs = [
        subprocess.Popen(
            ["curl", "-s", "-f", "-o", "/dev/null", "-r", f"{a}-{min(a + step, size) - 1}", url],
            stdout=subprocess.DEVNULL,
        )
        for a in range(0, size, step)
    ]
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(f"curl failed with {p.returncode}")


class NativeLoad:
    """The native reader into buffers allocated and touched once."""

    def __init__(self, uri: str, readers: int, **s3: object) -> None:
        self.uri, self.readers, self.s3 = uri, readers, s3
        source = _native.NativeSource(uri, **s3)  # type: ignore[arg-type]
        reader = _native.NativeReader(source, num_readers=readers)
        self.sizes = [e.data_length for e in reader.entries((0, 1, 2))]
        self.buffers = [np.ones(n, np.uint8) for n in self.sizes]

    def __call__(self) -> None:
        source = _native.NativeSource(self.uri, **self.s3)  # type: ignore[arg-type]
        reader = _native.NativeReader(source, num_readers=self.readers)
        reader.load_into(list(range(len(self.sizes))), self.buffers)


class ResetProxy:
    """A loopback TCP relay (splice, no copies through Python) that resets a
    connection each time the bytes relayed to clients pass another
    ``reset_every`` bytes (never, if None)."""

    def __init__(self, upstream: int, reset_every: int | None) -> None:
        self.upstream, self.reset_every = upstream, reset_every
        self.sent = 0
        self.resets = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            state = {"reset": False}
            threading.Thread(target=self._pump, args=(client, server, client, state), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, client, state), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass  # the default 64 KiB pipe works too, in smaller steps
        # Both relays count (the same Python work per step); only one resets.
        counting = dst is client
        every = self.reset_every
        try:
            while not state["reset"]:
                n = os.splice(src.fileno(), w, 1 << 20)
                if n == 0:
                    break
                left = n
                while left:
                    left -= os.splice(r, dst.fileno(), left)
                if counting:
                    with self.lock:
                        before = self.sent
                        self.sent += n
                        if every is not None and self.sent // every > before // every:
                            self.resets += 1
                            state["reset"] = True
        except OSError:
            pass
        finally:
            os.close(r)
            os.close(w)
            if state["reset"]:
                # Linger 0 turns the close into a RST; SHUT_RD wakes the
                # other pump without sending a FIN first.
                try:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass  # the other direction closed it first
                for sock in (client, src, dst):
                    try:
                        sock.shutdown(socket.SHUT_RD)
                    except OSError:
                        pass
            for sock in (src, dst):
                if sock is not client or state["reset"]:
                    sock.close()
                else:
                    try:
                        sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass

    def close(self) -> None:
        self.listener.close()


def best(fn: Callable[[], None], reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def run_case(label: str, uri: str, curl_url: str, size: int, args: argparse.Namespace, s3: dict[str, object]):
    import tensorizer

    n = args.streams
    stream_kw = {k: v for k, v in s3.items()}
    contenders: dict[str, Callable[[], None]] = {
        f"curl, {n} ranged streams": lambda: curl_ranges(curl_url, size, n),
        f"rs native, {n} readers": NativeLoad(uri, n, **s3),
    }
    if s3:
        # moto copies the whole object on every range request, so fewer
        # requests win there; show ours with one reader too.
        contenders["rs native, 1 reader"] = NativeLoad(uri, 1, **s3)

    def rs_deser() -> None:
        src = tensorizer_rs.stream_io.open_stream(uri, **stream_kw) if s3 else uri
        with tensorizer_rs.TensorDeserializer(src, device="cpu", num_readers=n) as d:
            assert len(d) > 0

    contenders[f"rs deserializer, {n} readers"] = rs_deser
    for k in args.tensorizer_readers:

        def tz(k: int = k) -> None:
            stream = tensorizer.stream_io.open_stream(uri, **stream_kw)
            d = tensorizer.TensorDeserializer(stream, device="cpu", num_readers=k)
            assert len(d) > 0
            d.close()

        contenders[f"tensorizer, num_readers={k}"] = tz
    results: dict[str, float] = {}
    for name, fn in contenders.items():
        log(f"{label}: warming {name}")
        fn()
    for rep in range(args.reps):
        for name, fn in contenders.items():
            t = time.perf_counter()
            fn()
            dt = time.perf_counter() - t
            results[name] = min(results.get(name, dt), dt)
            log(f"{label} rep {rep}: {name}: {dt * 1e3:.0f} ms")
    return results


def report(out: dict[str, object]) -> str:
    lines = [f"streams/readers: {out['args']['streams']}, reps: {out['args']['reps']} (best), cpus: {out['cpus']}", ""]
    for case, mib in (("http", out["args"]["http_mib"]), ("s3", out["args"]["s3_mib"])):
        res: dict[str, float] = out[case]  # type: ignore[assignment]
        curl = next(v for k, v in res.items() if k.startswith("curl"))
        tz_best = min(v for k, v in res.items() if k.startswith("tensorizer"))
        lines += [f"### {case}: {mib} MiB", "", "| contender | time | MB/s | speed vs curl | speed vs best tensorizer |",
                  "|---|---:|---:|---:|---:|"]
        for k, v in res.items():
            mbps = mib * MIB / v / 1e6
            lines.append(f"| {k} | {v * 1e3:.0f} ms | {mbps:.0f} | {curl / v:.2f}x | {tz_best / v:.2f}x |")
        lines.append("")
    proxy: dict[str, float] = out["http_proxy"]  # type: ignore[assignment]
    lines.append(
        f"rs native through the proxy (best / median of interleaved runs): clean {proxy['clean'] * 1e3:.0f} / "
        f"{proxy['clean_median'] * 1e3:.0f} ms; with a reset every {out['args']['reset_every_mib']} MiB "
        f"({proxy['resets']:.0f} resets in the timed runs) {proxy['reset'] * 1e3:.0f} / "
        f"{proxy['reset_median'] * 1e3:.0f} ms = {proxy['reset'] / proxy['clean']:.3f}x / "
        f"{proxy['reset_median'] / proxy['clean_median']:.3f}x the clean time"
    )
    lines.append(f"S3 upload of {out['args']['s3_mib']} MiB (multipart, ours): {out['s3_upload_s'] * 1e3:.0f} ms")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--http-mib", type=int, default=1024)
    ap.add_argument("--s3-mib", type=int, default=256)
    ap.add_argument("--streams", type=int, default=4, help="concurrent ranged streams (curl) and readers (ours)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tensorizer-readers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--reset-every-mib", type=int, default=256)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()

    out: dict[str, object] = {"machine": platform.machine(), "cpus": os.cpu_count(), "args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as d:
        http_path = os.path.join(d, "http.tensors")
        make_file(http_path, args.http_mib)
        s3_path = os.path.join(d, "s3.tensors")
        make_file(s3_path, args.s3_mib)
        size = os.path.getsize(http_path)
        with remote_servers.nginx(d) as base:
            url = f"{base}/http.tensors"
            http = run_case("http", url, url, size, args, {})
            out["http"] = http
            port = int(base.rsplit(":", 1)[1])
            # Interleaved clean/reset pairs, best and median of each: the
            # Python relay is itself noisy on a small VM.
            proxies = {every: ResetProxy(port, every) for every in (None, args.reset_every_mib * MIB)}
            loads = {e: NativeLoad(f"http://127.0.0.1:{p.port}/http.tensors", args.streams) for e, p in proxies.items()}
            for load in loads.values():
                load()
            times: dict[int | None, list[float]] = {e: [] for e in loads}
            reset_proxy = proxies[args.reset_every_mib * MIB]
            reset_proxy.resets = 0
            for _ in range(max(args.reps, 7)):
                for every, load in loads.items():
                    t = time.perf_counter()
                    load()
                    times[every].append(time.perf_counter() - t)
            resets: dict[str, float] = {"resets": reset_proxy.resets}
            for every, ts in times.items():
                key = "clean" if every is None else "reset"
                resets[key] = min(ts)
                resets[key + "_median"] = statistics.median(ts)
            for proxy in proxies.values():
                proxy.close()
            out["http_proxy"] = resets
        with remote_servers.moto() as endpoint:
            import boto3

            client = boto3.client(
                "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                region_name="us-east-1",
            )
            client.create_bucket(Bucket="bench")
            s3 = {"s3_access_key_id": "testing", "s3_secret_access_key": "testing", "s3_endpoint": endpoint,
                  "force_http": True}
            t = time.perf_counter()
            _native.s3_upload(s3_path, "s3://bench/model.tensors", **s3)  # type: ignore[arg-type]
            out["s3_upload_s"] = time.perf_counter() - t
            presigned = client.generate_presigned_url("get_object", Params={"Bucket": "bench", "Key": "model.tensors"})
            out["s3"] = run_case("s3", "s3://bench/model.tensors", presigned, os.path.getsize(s3_path), args, s3)
    print(report(out))
    log(json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
