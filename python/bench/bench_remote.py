#!/usr/bin/env python3
"""Remote-load benchmark of every store, in one run, on 127.0.0.1: HTTP
(nginx), S3 (moto_server), Redis (redis-server), GCS (gcp-storage-emulator)
and Azure Blob (Azurite). Per store, on the same object and server:

* the limit: N concurrent ``curl -r`` ranged GETs, each fetching one
  contiguous Nth of the object to ``/dev/null`` (HTTP; S3 through a
  presigned URL; GCS and Azure through the emulator's plain object URL, the
  bucket / container being anonymously readable). Redis has no curl: N
  threads, each on its own raw socket, pipelining RESP ``GET``s of its share
  of the keys the file is stored under and reading the values into one
  reused buffer; N ``redis-cli --raw`` GET clients are shown beside it (their
  output formatting caps them far below the socket);
* ``rs native``: tensorizer_rs's reader with N readers (8 MiB range
  requests, hashes verified off) filling preallocated, already-touched
  buffers -- the transfer pipeline itself (S3 and GCS: also 1 reader, since
  moto and gcp-storage-emulator copy the whole object per range request);
* ``rs deserializer``: ``tensorizer_rs.TensorDeserializer(uri,
  num_readers=N)`` into fresh CPU tensors, as a user calls it;
* ``tensorizer`` 2.12.1: ``TensorDeserializer(open_stream(uri),
  num_readers=k)`` for each k of ``--tensorizer-readers``, the best reported
  (Redis: k=1 only, tensorizer cannot reopen a Redis stream). tensorizer has
  no gs:// or az://: there it reads the emulator's plain ``http://`` object
  URL, labelled "(plain http URL)";
* resets: ``rs native`` through a loopback splice relay that resets a
  connection each time another ``--reset-every-mib`` MiB has been relayed,
  interleaved with the same relay not resetting (``--pairs`` pairs, at
  least 5; best and median of each). Redis goes through the relay too.
  Each reset costs one more request, and on moto and gcp-storage-emulator
  a request costs the server a copy (and a hash) of the whole object; the
  server's cost of one such request (a ranged GET from the middle of the
  object to its end, on a new connection, from this process, timed to its
  first byte of body, median of 5) is measured, and the ratio is also
  given net of it (resets per load times that cost taken off the resetting
  time), which is the client's own cost.

Every contender runs once untimed, then ``--reps`` times interleaved with
the others; best and median are reported (the VM is shared). Nothing is
downloaded from outside this machine. moto and gcp-storage-emulator are
single-process Python servers and Azurite is Node: their own CPU is the
limit there, and what the rows compare is ours against curl on the same
server.

Usage::

    python python/bench/bench_remote.py                               # every store, modest sizes
    python python/bench/bench_remote.py --stores http s3 --http-mib 1024
    python python/bench/bench_remote.py --reps 2 --pairs 5 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import fcntl
import http.client
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
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import remote_servers  # noqa: E402
import tensorizer_rs  # noqa: E402
from tensorizer_rs import _native  # noqa: E402

MIB = 1 << 20
STORES = ("http", "s3", "redis", "gs", "az")
MIN_PAIRS = 5
# Timed one-byte requests per store (their median is the server's cost of a request).
REQUEST_REPS = 5


def log(*a: object) -> None:
    print(*a, file=sys.stderr, flush=True)


def pin_malloc_threshold(enabled: bool) -> str:
    """Pins glibc's mmap threshold at 128 KiB (as bench_load.py does), so
    that every load's tensors are fresh pages in every repetition; else
    glibc raises the threshold after the first free and recycles multi-MiB
    tensors from its heap, which favours loaders of many tensors under
    32 MiB (tensorizer) over one big buffer (ours). Returns a note."""
    if not enabled:
        return "glibc default malloc (dynamic mmap threshold)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        if libc.mallopt(m_mmap_threshold, 128 << 10) and libc.mallopt(m_trim_threshold, 128 << 10):
            return "glibc mmap threshold pinned at 128 KiB (every load gets fresh pages)"
    except OSError:
        pass
    return "glibc default malloc (mallopt failed)"


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


def one_request(url: str, size: int) -> None:
    """A request like the one a reset makes: on a new connection, from this
    process (no curl start-up in the time), a ranged GET from the middle of
    the object to its end, timed to its first byte of body and then
    abandoned. That is what the server spends before it sends anything
    (moto copies the whole object; Azurite takes a few ms to start a long
    range, against 1 ms for a 1-byte one)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", path, headers={"Range": f"bytes={size // 2}-"})
        resp = conn.getresponse()
        if resp.status != 206 or len(resp.read(1)) != 1:
            raise RuntimeError(f"{url}: a ranged GET answered {resp.status}")
    finally:
        conn.close()


def redis_gets(port: int, keys: list[str], streams: int) -> None:
    """N concurrent redis-cli clients, each GETting its share of ``keys``."""
    procs = []
    for share in (keys[i::streams] for i in range(streams)):
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
            raise RuntimeError(f"redis-cli failed with {p.returncode}")


def redis_raw(port: int, keys: list[str], streams: int) -> None:
    """N threads, each with its own connection, pipelining RESP ``GET``s
    of its share of ``keys`` and reading each value straight into one
    reused buffer (``readinto`` releases the GIL): the socket limit, which
    redis-cli's output formatting does not reach."""

    def one(share: list[str]) -> None:
        with socket.create_connection(("127.0.0.1", port)) as sock, sock.makefile("rb", 1 << 20) as f:
            sock.sendall(b"".join(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k.encode()) for k in share))
            buf = bytearray()
            for _ in share:
                line = f.readline()
                if not line.startswith(b"$") or line.startswith(b"$-"):
                    raise RuntimeError(f"unexpected Redis reply {line[:40]!r}")
                n = int(line[1:]) + 2  # the value and its CRLF
                if len(buf) < n:
                    buf = bytearray(n)
                view = memoryview(buf)[:n]
                while view:
                    got = f.readinto(view)
                    if not got:
                        raise RuntimeError("Redis closed the connection")
                    view = view[got:]

    errors: list[BaseException] = []

    def run(share: list[str]) -> None:
        try:
            one(share)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(keys[i::streams],)) for i in range(streams) if keys[i::streams]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` set in os.environ (how gs:// and az:// find the emulators)."""
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


class NativeLoad:
    """The native reader into buffers allocated and touched once; ``env``
    is set around every call."""

    def __init__(self, uri: str, readers: int, env: dict[str, str] | None = None, **s3: object) -> None:
        self.uri, self.readers, self.env, self.s3 = uri, readers, env or {}, s3
        with environment(self.env):
            source = _native.NativeSource(uri, **s3)  # type: ignore[arg-type]
            reader = _native.NativeReader(source, num_readers=readers)
            self.sizes = [e.data_length for e in reader.entries((0, 1, 2))]
        self.buffers = [np.ones(n, np.uint8) for n in self.sizes]

    def __call__(self) -> None:
        with environment(self.env):
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


class Store:
    """One running server with the file uploaded: the URI and keyword
    arguments ours and tensorizer use, the limit, and the same through a
    relay listening on another port."""

    def __init__(self, name: str, uri: str, port: int, limit: Callable[[], None], *,
                 env: dict[str, str] | None = None, s3: dict[str, object] | None = None,
                 relayed: Callable[[int], tuple[str, dict[str, str], dict[str, object]]] | None = None,
                 tensorizer_uri: str | None = None, extra: dict[str, Callable[[], None]] | None = None) -> None:
        self.name, self.uri, self.port, self.limit = name, uri, port, limit
        self.env, self.s3 = env or {}, s3 or {}
        self.relayed = relayed or (lambda p: (uri.replace(f":{port}", f":{p}"), self.env, self.s3))
        self.tensorizer_uri = tensorizer_uri
        self.extra = extra or {}
        self.upload_s: float | None = None
        # One ranged request of one byte (None where a request costs nothing to speak of).
        self.request: Callable[[], None] | None = None


def _upload(path: str, uri: str, **kw: object) -> float:
    t = time.perf_counter()
    _native.upload(path, uri, **kw)  # type: ignore[arg-type]
    return time.perf_counter() - t


@contextlib.contextmanager
def start(name: str, path: str, streams: int) -> Iterator[Store]:
    """Starts the server for ``name``, uploads ``path`` with ours and yields
    the Store."""
    size = os.path.getsize(path)
    key = "model.tensors"
    if name == "http":
        with remote_servers.nginx(os.path.dirname(path)) as base:
            url = f"{base}/{os.path.basename(path)}"
            store = Store(name, url, int(base.rsplit(":", 1)[1]), lambda: curl_ranges(url, size, streams),
                          tensorizer_uri=url)
            store.request = lambda: one_request(url, size)
            yield store
    elif name == "s3":
        with remote_servers.s3_bucket("bench") as (endpoint, client):
            s3 = remote_servers.s3_credentials(endpoint)
            uri = f"s3://bench/{key}"
            upload_s = _upload(path, uri, **s3)
            url = client.generate_presigned_url(  # type: ignore[attr-defined]
                "get_object", Params={"Bucket": "bench", "Key": key}, ExpiresIn=3600)

            def via(p: int) -> tuple[str, dict[str, str], dict[str, object]]:
                return uri, {}, {**s3, "s3_endpoint": f"http://127.0.0.1:{p}"}

            store = Store(name, uri, int(endpoint.rsplit(":", 1)[1]), lambda: curl_ranges(url, size, streams),
                          s3=s3, relayed=via, tensorizer_uri=uri)
            store.upload_s = upload_s
            store.request = lambda: one_request(url, size)
            yield store
    elif name == "redis":
        with remote_servers.redis() as port:
            uri = f"redis://127.0.0.1:{port}/bench"
            upload_s = _upload(path, uri)
            keys = subprocess.run(["redis-cli", "-p", str(port), "--raw", "KEYS", "bench*"], check=True,
                                  capture_output=True, text=True).stdout.split()
            store = Store(name, uri, port, lambda: redis_raw(port, keys, streams), tensorizer_uri=uri,
                          extra={f"redis-cli --raw GET, {streams} clients": lambda: redis_gets(port, keys, streams)})
            store.upload_s = upload_s
            yield store
    elif name in ("gs", "az"):
        # The emulator, the variable that points the scheme at it, and the
        # object's plain URL path (readable without credentials).
        starter, base_var, url_path = {
            "gs": (remote_servers.gcs, "GOOGLE_BASE_URL", f"/tzr/{key}"),
            "az": (remote_servers.azurite, "AZURITE_BLOB_STORAGE_URL", f"/devstoreaccount1/tzr/{key}"),
        }[name]
        with starter() as env:
            uri = f"{name}://tzr/{key}"
            with environment(env):
                upload_s = _upload(path, uri)
            port = int(env[base_var].rsplit(":", 1)[1])
            url = f"http://127.0.0.1:{port}{url_path}"

            def via_emulator(p: int) -> tuple[str, dict[str, str], dict[str, object]]:
                return uri, {**env, base_var: f"http://127.0.0.1:{p}"}, {}

            store = Store(name, uri, port, lambda: curl_ranges(url, size, streams), env=env,
                          relayed=via_emulator, tensorizer_uri=url)
            store.upload_s = upload_s
            store.request = lambda: one_request(url, size)
            yield store
    else:
        raise ValueError(f"unknown store {name!r}")


def contenders(store: Store, args: argparse.Namespace) -> dict[str, Callable[[], None]]:
    n = args.streams
    out: dict[str, Callable[[], None]] = {
        f"limit: {'raw-socket RESP GET' if store.name == 'redis' else 'curl -r'}, {n} streams": store.limit,
        **store.extra,
        f"rs native, {n} readers": NativeLoad(store.uri, n, store.env, **store.s3),
    }
    if store.name in ("s3", "gs"):
        out["rs native, 1 reader"] = NativeLoad(store.uri, 1, store.env, **store.s3)

    def rs_deser() -> None:
        with environment(store.env):
            src: Any = tensorizer_rs.stream_io.open_stream(store.uri, **store.s3) if store.s3 else store.uri
            with tensorizer_rs.TensorDeserializer(src, device="cpu", num_readers=n) as d:
                assert len(d) > 0

    out[f"rs deserializer, {n} readers"] = rs_deser
    if store.tensorizer_uri is not None:
        import tensorizer

        label = " (plain http URL)" if store.name in ("gs", "az") else ""
        for k in args.tensorizer_readers if store.name != "redis" else [1]:

            def tz(k: int = k) -> None:
                stream = tensorizer.stream_io.open_stream(store.tensorizer_uri, **store.s3)
                d = tensorizer.TensorDeserializer(stream, device="cpu", num_readers=k)
                assert len(d) > 0
                d.close()

            out[f"tensorizer{label}, num_readers={k}"] = tz
    return out


def measure(store: Store, args: argparse.Namespace) -> dict[str, Any]:
    fns = contenders(store, args)
    errors: dict[str, str] = {}
    for name, fn in list(fns.items()):
        log(f"{store.name}: warming {name}")
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - a contender that fails is reported, not fatal
            log(f"{store.name}: {name} failed: {e!r}")
            errors[name] = repr(e)
            del fns[name]
    times: dict[str, list[float]] = {k: [] for k in fns}
    for rep in range(args.reps):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
            log(f"{store.name} rep {rep}: {name}: {times[name][-1] * 1e3:.0f} ms")
    # What one request costs the server before its first byte, to tell the
    # client's cost of a reset (one more request) from the server's.
    request_s = None
    if store.request is not None:
        store.request()
        costs = []
        for _ in range(REQUEST_REPS):
            t = time.perf_counter()
            store.request()
            costs.append(time.perf_counter() - t)
        request_s = statistics.median(costs)
        log(f"{store.name}: one ranged request, to its first byte: {request_s * 1e3:.1f} ms (median of {REQUEST_REPS})")
    # Resets: the same relay, resetting or not, interleaved.
    every = args.reset_every_mib * MIB
    relays = {e: ResetProxy(store.port, e) for e in (None, every)}
    loads = {}
    for e, relay in relays.items():
        uri, env, s3 = store.relayed(relay.port)
        loads[e] = NativeLoad(uri, args.streams, env, **s3)
    for load in loads.values():
        load()
    relays[every].resets = 0
    pair_times: dict[int | None, list[float]] = {e: [] for e in loads}
    for i in range(max(args.pairs, MIN_PAIRS)):
        for e, load in loads.items():
            t = time.perf_counter()
            load()
            pair_times[e].append(time.perf_counter() - t)
        log(f"{store.name} pair {i}: clean {pair_times[None][-1] * 1e3:.0f} ms, "
            f"resets {pair_times[every][-1] * 1e3:.0f} ms")
    for relay in relays.values():
        relay.close()
    return {"times": times, "errors": errors, "relay_clean": pair_times[None], "relay_reset": pair_times[every],
            "resets": relays[every].resets, "upload_s": store.upload_s, "request_s": request_s}


def _pick(times: dict[str, list[float]], prefix: str) -> list[float] | None:
    return next((v for k, v in times.items() if k.startswith(prefix)), None)


def summary(r: dict[str, Any], size: int, streams: int) -> dict[str, Any]:
    """The table's numbers for one store (MB/s from the best time)."""
    times = r["times"]
    rate = {k: size / min(v) / 1e6 for k, v in times.items()}
    limit = next(v for k, v in rate.items() if k.startswith("limit"))
    native = rate.get(f"rs native, {streams} readers")
    deser = rate.get(f"rs deserializer, {streams} readers")
    tz = [v for k, v in rate.items() if k.startswith("tensorizer")]
    tz_best = max(tz) if tz else None
    clean, reset = r["relay_clean"], r["relay_reset"]
    # Each reset costs one more request; the server's part of it is known.
    per_load = r["resets"] / len(reset)
    server = per_load * r["request_s"] if r.get("request_s") is not None else None
    return {
        "limit": limit, "native": native, "deser": deser, "tensorizer": tz_best,
        "native_vs_limit": native / limit if native else None,
        "deser_vs_limit": deser / limit if deser else None,
        "native_vs_tensorizer": native / tz_best if native and tz_best else None,
        "deser_vs_tensorizer": deser / tz_best if deser and tz_best else None,
        "reset_best": min(reset) / min(clean), "reset_median": statistics.median(reset) / statistics.median(clean),
        "resets": r["resets"],
        "request_ms": r["request_s"] * 1e3 if r.get("request_s") is not None else None,
        "reset_net_best": (min(reset) - server) / min(clean) if server is not None else None,
        "reset_net_median": (statistics.median(reset) - server) / statistics.median(clean) if server is not None else None,
    }


def _f(v: float | None, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def report(results: dict[str, dict[str, Any]], sizes: dict[str, int], args: argparse.Namespace) -> str:
    n = args.streams
    lines = [
        f"streams/readers: {n}; best of {args.reps} interleaved runs (median in the detail table); resets: one "
        f"every {args.reset_every_mib} MiB relayed, {max(args.pairs, MIN_PAIRS)} interleaved pairs; "
        f"{os.cpu_count()} CPUs; {args.malloc_note}; goals: ours >= 0.9x limit, >= 2x tensorizer, resets <= 1.1x clean",
        "",
        "| store | MiB | limit MB/s | rs native MB/s | rs deser MB/s | tensorizer best MB/s | native / limit | "
        "deser / limit | native / tz | deser / tz | resets / clean (best / median) | resets | "
        "server ms per request | resets / clean net of the server's request cost (best / median) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for store, r in results.items():
        s = summary(r, sizes[store], n)
        tz = _f(s["tensorizer"], ".0f") + (" (http URL)" if store in ("gs", "az") and s["tensorizer"] else "")
        lines.append(
            f"| {store} | {sizes[store] / MIB:.0f} | {s['limit']:.0f} | {_f(s['native'], '.0f')} | "
            f"{_f(s['deser'], '.0f')} | {tz} | {_f(s['native_vs_limit'], '.2f')}x | {_f(s['deser_vs_limit'], '.2f')}x"
            f" | {_f(s['native_vs_tensorizer'], '.2f')}x | {_f(s['deser_vs_tensorizer'], '.2f')}x | "
            f"{s['reset_best']:.3f} / {s['reset_median']:.3f} | {s['resets']} | {_f(s['request_ms'], '.1f')} | "
            f"{_f(s['reset_net_best'], '.3f')} / {_f(s['reset_net_median'], '.3f')} |"
        )
    lines += ["", "| store | contender | best | median | MB/s (best) |", "|---|---|---:|---:|---:|"]
    for store, r in results.items():
        rows = dict(r["times"])
        rows["rs native via the relay, clean"] = r["relay_clean"]
        rows["rs native via the relay, resetting"] = r["relay_reset"]
        for k, v in rows.items():
            lines.append(f"| {store} | {k} | {min(v) * 1e3:.0f} ms | {statistics.median(v) * 1e3:.0f} ms | "
                         f"{sizes[store] / min(v) / 1e6:.0f} |")
        for k, e in r["errors"].items():
            lines.append(f"| {store} | {k} | failed: {e[:120]} | | |")
    uploads = [f"{s} {r['upload_s'] * 1e3:.0f} ms" for s, r in results.items() if r["upload_s"] is not None]
    if uploads:
        lines += ["", "Upload of the file by ours (once, before the reads): " + ", ".join(uploads)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", nargs="+", default=list(STORES), choices=STORES)
    ap.add_argument("--http-mib", type=int, default=1024)
    ap.add_argument("--s3-mib", type=int, default=128)
    ap.add_argument("--redis-mib", type=int, default=1024)
    ap.add_argument("--gcs-mib", type=int, default=512)
    ap.add_argument("--azure-mib", type=int, default=512)
    ap.add_argument("--streams", type=int, default=4, help="concurrent ranged streams (curl) and readers (ours)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=MIN_PAIRS, help=f"clean/reset pairs (at least {MIN_PAIRS})")
    ap.add_argument("--tensorizer-readers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--reset-every-mib", type=int, default=64)
    ap.add_argument("--json", help="write the results (every time) here too")
    ap.add_argument("--no-mallopt", action="store_true",
                    help="leave glibc's dynamic mmap threshold (recycled heap pages after the first rep)")
    args = ap.parse_args()
    args.malloc_note = pin_malloc_threshold(not args.no_mallopt)
    mibs = {"http": args.http_mib, "s3": args.s3_mib, "redis": args.redis_mib, "gs": args.gcs_mib,
            "az": args.azure_mib}

    results: dict[str, dict[str, Any]] = {}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as d:
        files: dict[int, str] = {}
        for name in args.stores:
            mib = mibs[name]
            if mib not in files:
                files[mib] = os.path.join(d, f"model-{mib}.tensors")
                make_file(files[mib], mib)
            sizes[name] = os.path.getsize(files[mib])
            log(f"== {name}: {mib} MiB")
            with start(name, files[mib], args.streams) as store:
                results[name] = measure(store, args)
    print(report(results, sizes, args))
    out = {"machine": platform.machine(), "cpus": os.cpu_count(), "args": vars(args), "sizes": sizes,
           "results": results, "summary": {s: summary(r, sizes[s], args.streams) for s, r in results.items()}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
