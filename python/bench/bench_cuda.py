#!/usr/bin/env python3
"""GPU load benchmark and check: bf16 state dicts of ``--gib`` sizes
(default 1 and 8) loaded to ``cuda`` by each library, beside the limit.

Contenders (each timed from open to all tensors on the device, synchronized):

* ``limit``: pinned host buffer -> device ``copy_`` of the same byte count
  (the pinned cudaMemcpy H2D limit of this machine);
* ``tensorizer_rs per_tensor`` and ``tensorizer_rs carved``:
  ``TensorDeserializer(path, device="cuda")`` with
  ``TENSORIZER_RS_CUDA_ALLOC=per_tensor`` (one torch allocation per tensor)
  and ``=carved`` (one allocation carved into 256-byte-aligned views); the
  native staging ring when ``_native.cuda_available()``, else its pinned
  fallback (the header line says which); with ``--streams N`` also per
  tensor on N copy streams of its own; from page cache and, with
  ``--http``, from nginx on 127.0.0.1 (python/tests/remote_servers.py),
  with one worker process per core up to 8 (``NGINX_WORKERS``), so that
  the server is not what the rows measure;
* ``tensorizer``: ``TensorDeserializer(path, device="cuda")``;
* ``safetensors``: ``safetensors.torch.load_file(path, device="cuda")``;
* ``instanttensor`` and ``fastsafetensors`` when importable (a line says
  why one is skipped).

Before timing, every load is checked bit for bit against the source state
dict (first/last tensors and a sample), so a wrong load fails the run. Each
contender also runs once in a fresh subprocess to measure host RSS growth
(VmHWM after the load minus VmRSS before it).

The wheel has native CUDA loading by default (the ``cuda`` feature;
``TENSORIZER_RS_NATIVE_CUDA=0`` forces the torch fallback).

Usage (one command on a GPU machine: ``bash tests/gpu-bench.sh``)::

    python python/bench/bench_cuda.py                 # 1 and 8 GiB, 3 reps
    python python/bench/bench_cuda.py --gib 1 --reps 5 --http --json out.json
    python python/bench/bench_cuda.py --dry-run       # the plan; needs no GPU

Exits 0 with a message when no CUDA device is present. Downloads nothing.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
TENSORS = 300


def vm(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def state_dict(gib: float) -> dict[str, Any]:
    import torch

    total = int(gib * (1 << 30)) // 2  # bf16 elements
    per = total // TENSORS
    g = torch.Generator().manual_seed(0)
    return {f"layer.{i}.weight": torch.randn(per, generator=g).to(torch.bfloat16) for i in range(TENSORS)}


def write_files(sd: dict[str, Any], d: str) -> dict[str, str]:
    paths = {"rs": os.path.join(d, "rs.tensors"), "tz": os.path.join(d, "tz.tensors"), "st": os.path.join(d, "m.safetensors")}
    import tensorizer_rs

    s = tensorizer_rs.TensorSerializer(paths["rs"])
    s.write_state_dict(sd)
    s.close()
    if importlib.util.find_spec("tensorizer"):
        import tensorizer

        s = tensorizer.TensorSerializer(paths["tz"])
        s.write_state_dict(sd)
        s.close()
    if importlib.util.find_spec("safetensors"):
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in sd.items()}, paths["st"])
    for p in paths.values():  # warm the page cache
        if os.path.exists(p):
            with open(p, "rb") as f:
                while f.read(64 << 20):
                    pass
    return paths


#: tensorizer_rs's CUDA settings per row: (label, TENSORIZER_RS_CUDA_ALLOC, streams).
RS_MODES = [("per_tensor", "per_tensor", 0), ("carved", "carved", 0)]


def rs_loader(source: str, alloc: str, streams: int, readers: int | None = None) -> Callable[[], dict[str, Any]]:
    """tensorizer_rs loading ``source`` to cuda with these settings (set
    for the call: the RSS child runs the same function); ``readers``:
    ``num_readers`` (None: the default, one per core up to 16)."""

    def run() -> dict[str, Any]:
        import tensorizer_rs

        os.environ["TENSORIZER_RS_CUDA_ALLOC"] = alloc
        os.environ["TENSORIZER_RS_CUDA_STREAMS"] = str(streams)
        with tensorizer_rs.TensorDeserializer(source, device="cuda", num_readers=readers) as d:
            return dict(d)

    return run


def rs_modes(streams: int) -> list[tuple[str, str, int]]:
    return RS_MODES + ([(f"per_tensor, {streams} streams", "per_tensor", streams)] if streams else [])


def optional_skips() -> dict[str, str]:
    """Contenders that will not run, with the reason."""
    out = {}
    for mod in ("tensorizer", "safetensors", "instanttensor", "fastsafetensors"):
        if importlib.util.find_spec(mod) is None:
            out[mod] = f"skipped: `import {mod}` fails (not installed in {sys.prefix})"
    if "safetensors" in out:
        for mod in ("instanttensor", "fastsafetensors"):
            out.setdefault(mod, "skipped: needs safetensors to write its file")
    return out


def loaders(
    paths: dict[str, str], url: str | None, streams: int = 0, readers: list[int] | None = None
) -> dict[str, Callable[[], dict[str, Any]]]:
    out: dict[str, Callable[[], dict[str, Any]]] = {}
    for label, alloc, n in rs_modes(streams):
        out[f"tensorizer_rs {label}"] = rs_loader(paths["rs"], alloc, n)
    for r in readers or []:
        out[f"tensorizer_rs carved, {r} readers"] = rs_loader(paths["rs"], "carved", 0, r)
    if url:
        for label, alloc, n in rs_modes(streams):
            out[f"tensorizer_rs http {label}"] = rs_loader(url + "/rs.tensors", alloc, n)
    if os.path.exists(paths["tz"]):
        import tensorizer

        out["tensorizer"] = lambda: dict(tensorizer.TensorDeserializer(paths["tz"], device="cuda"))
    if os.path.exists(paths["st"]):
        from safetensors.torch import load_file

        out["safetensors"] = lambda: load_file(paths["st"], device="cuda")
        if importlib.util.find_spec("instanttensor"):

            def instant() -> dict[str, Any]:
                from instanttensor import safe_open  # tensors point into its reused buffer: clone

                with safe_open(paths["st"], framework="pt", device=0) as f:
                    return {k: t.clone() for k, t in f.tensors()}

            out["instanttensor"] = instant
        if importlib.util.find_spec("fastsafetensors"):

            def fast() -> dict[str, Any]:
                import torch
                from fastsafetensors import SafeTensorsFileLoader, SingleGroup

                loader = SafeTensorsFileLoader(SingleGroup(), torch.device("cuda:0"), nogds=True)
                try:
                    loader.add_filenames({0: [paths["st"]]})
                    fb = loader.copy_files_to_device()
                    got = {k: fb.get_tensor(tensor_name=k).clone() for k in sd_keys(paths["st"])}
                    fb.close()
                    return got
                finally:
                    loader.close()

            out["fastsafetensors"] = fast
    return out


def sd_keys(path: str) -> list[str]:
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        return list(f.keys())


def limit(nbytes: int) -> Callable[[], None]:
    import torch

    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")

    def run() -> None:
        dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize()

    return run


def check(got: dict[str, Any], sd: dict[str, Any], name: str) -> None:
    import torch

    keys = list(sd)
    for k in keys[:3] + keys[-3:] + keys[:: max(1, len(keys) // 16)]:
        t = got[k]
        if t.device.type != "cuda" or not torch.equal(t.cpu(), sd[k]):
            raise SystemExit(f"{name}: tensor {k} differs from the source (or is not on cuda)")


def timed(fn: Callable[[], Any], reps: int) -> list[float]:
    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del r
        torch.cuda.empty_cache()
    return times


RSS_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import bench_cuda, torch
torch.cuda.init(); torch.empty(1, device="cuda")
paths = json.loads(sys.argv[2]); name = sys.argv[3]; url = sys.argv[4] or None
fn = bench_cuda.loaders(paths, url, int(sys.argv[5]), json.loads(sys.argv[6]))[name]
before = bench_cuda.vm("VmRSS")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
r = fn(); torch.cuda.synchronize()
print(json.dumps({"growth": bench_cuda.vm("VmHWM") - before}))
"""


def rss_growth(paths: dict[str, str], name: str, url: str | None, streams: int, readers: list[int]) -> int | None:
    args = [sys.executable, "-c", RSS_CHILD, HERE, json.dumps(paths), name, url or "", str(streams), json.dumps(readers)]
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=900, check=True).stdout
        return int(json.loads(out.strip().splitlines()[-1])["growth"])
    except (subprocess.SubprocessError, ValueError, IndexError, KeyError):
        return None


#: nginx worker processes for the ``--http`` rows: one per core, at most 8.
NGINX_WORKERS = min(os.cpu_count() or 1, 8)


def find_nginx() -> str | None:
    """nginx's path, as python/tests/remote_servers.py looks for it."""
    import shutil

    for c in ("/usr/sbin/nginx", "/usr/bin/nginx"):
        if os.path.exists(c):
            return c
    return shutil.which("nginx")


def native_mode() -> str:
    """How tensorizer_rs loads to cuda here, in words."""
    from tensorizer_rs import _cuda, _native

    if os.environ.get(_cuda.ENV_NATIVE, "").strip().lower() in ("0", "false", "no", "off"):
        return f"pinned torch fallback ({_cuda.ENV_NATIVE}=0)"
    if _native.cuda_available():
        return "native staging ring"
    return "pinned torch fallback (no CUDA driver found, or built without the cuda feature)"


def dry_run(a: argparse.Namespace) -> int:
    """The plan, without touching a GPU or writing files."""
    print(f"bench_cuda plan: sizes {', '.join(f'{g:g} GiB' for g in a.gib)} of bf16 in {TENSORS} tensors, {a.reps} reps")
    print("page cache: each file is read once before timing (warm)")
    try:
        import torch

        cuda = torch.cuda.is_available()
        print(f"torch {torch.__version__}: CUDA {'available' if cuda else 'NOT available (the real run exits 0 and measures nothing)'}")
    except ImportError:
        print("torch: NOT installed (the real run exits 0 and measures nothing)")
    try:
        print(f"tensorizer_rs CUDA path: {native_mode()}")
    except ImportError as e:
        print(f"tensorizer_rs: NOT importable ({e})")
    rows = ["limit (pinned H2D)"] + [f"tensorizer_rs {label}" for label, _, _ in rs_modes(a.streams)]
    rows += [f"tensorizer_rs carved, {r} readers" for r in a.readers]
    if a.http:
        nginx = find_nginx()
        if nginx:
            print(f"http: nginx at {nginx}, on 127.0.0.1, {NGINX_WORKERS} worker processes (python/tests/remote_servers.py)")
            rows += [f"tensorizer_rs http {label}" for label, _, _ in rs_modes(a.streams)]
        else:
            print("http: skipped: nginx is not installed (apt-get install nginx-light)")
    skips = optional_skips()
    rows += [m for m in ("tensorizer", "safetensors", "instanttensor", "fastsafetensors") if m not in skips]
    print("rows: " + "; ".join(rows))
    for mod, why in skips.items():
        print(f"{mod}: {why}")
    print(f"host RSS growth: {'off (--no-rss)' if a.no_rss else 'measured once per row in a fresh subprocess'}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0, 8.0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--http", action="store_true", help="also load tensorizer_rs's file from nginx on 127.0.0.1")
    ap.add_argument("--no-rss", action="store_true")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--streams", type=int, default=0, help="also a tensorizer_rs row with this many copy streams")
    ap.add_argument("--readers", type=int, nargs="*", default=[], help="also tensorizer_rs carved rows with these num_readers")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and what would be skipped; needs no GPU")
    a = ap.parse_args()
    if a.dry_run:
        return dry_run(a)
    try:
        import torch
    except ImportError:
        print("bench_cuda: torch is not installed; nothing to measure")
        return 0
    if not torch.cuda.is_available():
        print("bench_cuda: no CUDA device (torch.cuda.is_available() is False); nothing to measure")
        return 0
    mode = native_mode()
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; tensorizer_rs CUDA path: {mode}")
    for mod, why in optional_skips().items():
        print(f"{mod}: {why}")
    results: list[dict[str, Any]] = []
    for gib in a.gib:
        with tempfile.TemporaryDirectory(dir=a.dir) as d:
            sd = state_dict(gib)
            nbytes = sum(t.numel() * 2 for t in sd.values())
            paths = write_files(sd, d)
            ctx: Any = None
            url = None
            if a.http and not find_nginx():
                print("http: skipped: nginx is not installed (apt-get install nginx-light)")
            elif a.http:
                sys.path.insert(0, os.path.join(HERE, "..", "tests"))
                import remote_servers

                ctx = remote_servers.nginx(d, workers=NGINX_WORKERS)
                url = ctx.__enter__()
            try:
                runs: dict[str, Callable[[], Any]] = {"limit (pinned H2D)": limit(nbytes)}
                for name, fn in loaders(paths, url, a.streams, a.readers).items():
                    try:
                        got = fn()  # the warm-up run
                    except Exception as e:  # an optional loader with another API: reported, skipped
                        if name in ("instanttensor", "fastsafetensors"):
                            print(f"{name}: skipped ({type(e).__name__}: {e})")
                            continue
                        raise
                    check(got, sd, name)
                    del got
                    runs[name] = fn
                print(f"\n## {gib:g} GiB bf16 in {TENSORS} tensors ({nbytes / (1 << 30):.2f} GiB), {a.reps} reps\n")
                print("| loader | best s | median s | GB/s (best) | × limit | host RSS growth MiB |")
                print("|---|---|---|---|---|---|")
                best_limit = None
                for name, fn in runs.items():
                    times = timed(fn, a.reps)
                    best = min(times)
                    best_limit = best_limit or best
                    growth = None if a.no_rss or name.startswith("limit") else rss_growth(paths, name, url, a.streams, a.readers)
                    g = "" if growth is None else f"{growth / (1 << 20):.0f}"
                    print(
                        f"| {name} | {best:.3f} | {statistics.median(times):.3f} | {nbytes / best / 1e9:.2f} "
                        f"| {best_limit / best:.2f} | {g} |"
                    )
                    results.append({"gib": gib, "loader": name, "times": times, "rss_growth": growth})
            finally:
                if ctx is not None:
                    ctx.__exit__(None, None, None)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "mode": mode, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
