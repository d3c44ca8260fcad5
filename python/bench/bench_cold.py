"""First loads as a serving pod sees them: a fresh process per load, from a
cold page cache and from a warm one, beside the machine's limits.

    python python/bench/bench_cold.py                    # 1 and 8 GiB, 3 reps
    python python/bench/bench_cold.py --gib 1 --reps 5 --json cold.json

Each size is one state dict of bf16 tensors (``--tensors``, 300), written
once by each library: ours (``tensorizer_rs``, aligned), tensorizer's
(tensorizer 2.12.1) and a safetensors file. Every load runs in a new Python
process that has already imported its library (imports are not timed),
touches one byte of every 4 KiB page of every tensor, and reports the time
from the call to the last touch. Before each cold load the page cache is
dropped (``sync; echo 3 > /proc/sys/vm/drop_caches``), which needs root; a
run that cannot drop it says so and reports warm loads only. Before each
warm load the cache is dropped too (where it can be) and the load's own
file read through once, so only that file is cached. Contenders
alternate within each repetition, so drift hits all of them alike.

Rows:

* ``limit: sequential 16 MiB reads`` reads the file with 16 MiB ``readinto``
  calls into one freshly allocated buffer (touching it as the loaders do):
  what one reader that copies every byte can do. Ratios are against it.
* ``dd bs=16M`` reads to /dev/null (no copy, no fresh memory).
* ``memory`` faults in as much fresh huge-page memory as the file holds, on
  one thread per core, and reads nothing: the least a load of private
  copies costs here besides the reads. In a virtual machine whose balloon
  reports free pages to the host it is far from free (spec §23.4).
* ``tensorizer_rs`` on its own file and on tensorizer's, with default
  options (private copies), and ``mmap=True`` on its own file; on its own
  file with ``TENSORIZER_RS_COLD_READS=0`` too (every read through the
  page cache, as before spec §23's cold path).
* ``device`` reads the file with sixteen 1 MiB ``O_DIRECT`` requests in
  flight into fresh huge-page memory: what the device gives a reader that
  keeps its queue full (the cold path's way, spec §23).
* ``mmap="auto"`` on a copy of our file in an ext4 image loop-mounted
  read-only (root only; the views of §23.6), and on the writable original
  (where it copies).
* ``tensorizer 2.12.1`` on its own file; ``safetensors load_file`` with
  its default backend (views of a map of the file, faulted in by the
  touches) and with ``backend="pread"`` (private copies);
  ``tensorizer_rs.safetensors``'s ``load_file`` on the same file (private
  copies: the file is writable, spec §26.3), locally and over HTTP;
  fastsafetensors (``fastsafe_open``, CPU, no GDS) and Run:ai's model
  streamer (``SafetensorsStreamer``) on it, each tensor cloned out of the
  loader's buffers as a caller keeping them must (run the script with the
  Python of ``contenders-requirements.txt``'s environment for these).
* Over HTTP, from nginx on 127.0.0.1 serving the same files (cold: nginx
  reads them from the disk): ``curl`` to /dev/null (the HTTP limit), ours
  on our file and tensorizer on its own.
* The same tensors as a folder of 4 safetensors shards and its index:
  ``tensorizer_rs.load_state_dict`` on the folder (shards loaded in
  parallel, the reader threads shared), safetensors ``load_file`` on each
  shard in turn, and fastsafetensors with the 4 files in one
  ``fastsafe_open``. A warm load reads every shard through first.
* Over S3, from moto_server on 127.0.0.1 (which holds the objects in its
  own memory, so the server side is never cold): ours on our file
  (``s3://`` URI, endpoint and keys from the environment) and tensorizer on
  its own (``stream_io.open_stream`` with the same endpoint and keys).

With ``--device cuda`` the loaders put every tensor on the GPU and the
clock stops at ``torch.cuda.synchronize()`` instead of the page touches;
the CUDA context is made before the clock starts, as imports are. The
``limit``, ``device`` and ``dd`` rows stay what the storage gives the host.

Medians with min–max over the repetitions. Results are Markdown on stdout
(and JSON with ``--json``); progress on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
PAGE = 4096
CHUNK = 16 << 20
HUGE = 2 << 20
#: Where the workers put the tensors (``--device``), passed in the environment.
DEVICE_VAR = "BENCH_COLD_DEVICE"

CONTENDERS = {
    "limit": "limit: sequential 16 MiB reads",
    "device": "device: 16 parallel 1 MiB O_DIRECT reads",
    "dd": "dd bs=16M",
    "memory": "fresh memory: the file's size in huge pages, populated",
    "rs-own": "tensorizer_rs, own file",
    "rs-theirs": "tensorizer_rs, tensorizer's file",
    "rs-mmap": "tensorizer_rs mmap=True, own file",
    "rs-own-4k": "tensorizer_rs, own file, 4 KiB pages always",
    "rs-own-huge": "tensorizer_rs, own file, huge pages always",
    "rs-own-cached": "tensorizer_rs, own file, TENSORIZER_RS_COLD_READS=0",
    "rs-auto-ro": 'tensorizer_rs mmap="auto", own file on a read-only file system',
    "rs-auto": 'tensorizer_rs mmap="auto", own file (writable: copies)',
    "tensorizer": "tensorizer 2.12.1, its file",
    "safetensors": "safetensors load_file",
    "safetensors-pread": 'safetensors load_file(backend="pread")',
    "rs-st": "tensorizer_rs.safetensors load_file, the safetensors file",
    "fastsafetensors": "fastsafetensors 0.5.0 (CPU, nogds), the safetensors file",
    "runai": "Run:ai model streamer 0.17.1, the safetensors file",
    "rs-st-http": "tensorizer_rs.safetensors load_file, the safetensors file over HTTP (nginx)",
    "curl-http": "curl to /dev/null over HTTP (nginx)",
    "rs-http": "tensorizer_rs, own file over HTTP (nginx)",
    "tensorizer-http": "tensorizer 2.12.1, its file over HTTP (nginx)",
    "rs-s3": "tensorizer_rs, own file over S3 (moto)",
    "tensorizer-s3": "tensorizer 2.12.1, its file over S3 (moto)",
    "rs-folder": "tensorizer_rs.load_state_dict, the 4-shard safetensors folder",
    "st-folder": "safetensors load_file, each of the 4 shards in turn",
    "fastsafetensors-folder": "fastsafetensors 0.5.0 (CPU, nogds), the 4 shards in one fastsafe_open",
}
#: Shards in the folder the ``*-folder`` contenders load (the same tensors
#: as the single files, split in order into this many safetensors files
#: beside a ``model.safetensors.index.json``, as Hugging Face writes them).
FOLDER_SHARDS = 4
#: Contenders that load from nginx on 127.0.0.1, serving the files' folder.
HTTP = ("curl-http", "rs-http", "tensorizer-http", "rs-st-http")
#: Contenders that load from moto_server on 127.0.0.1 (which holds the
#: objects in its own memory: the server is never cold).
S3 = ("rs-s3", "tensorizer-s3")
#: The moto endpoint, passed to the workers in the environment.
S3_VAR = "BENCH_COLD_S3"
S3_BUCKET = "models"
FILE_OF = {
    "limit": "own", "device": "own", "dd": "own", "memory": "own", "rs-own": "own", "rs-theirs": "theirs", "rs-mmap": "own",
    "rs-own-4k": "own", "rs-own-huge": "own", "rs-own-cached": "own", "rs-auto-ro": "ro", "rs-auto": "own",
    "tensorizer": "theirs", "safetensors": "st", "safetensors-pread": "st", "rs-st": "st",
    "fastsafetensors": "st", "runai": "st", "rs-st-http": "st",
    "curl-http": "own", "rs-http": "own", "tensorizer-http": "theirs",
    "rs-s3": "own", "tensorizer-s3": "theirs",
    "rs-folder": "folder", "st-folder": "folder", "fastsafetensors-folder": "folder",
}  # fmt: skip


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- in the worker process -------------------------------------------------


def _touch_tensors(tensors) -> int:
    """One byte of every page of every tensor; returns the bytes covered."""
    import torch

    total = 0
    for t in tensors:
        flat = t.detach().reshape(-1).view(torch.uint8)
        if flat.numel():
            flat[::PAGE].sum()
        total += flat.numel()
    return total


def _touch_buffer(buf) -> None:
    import numpy as np

    np.frombuffer(buf, dtype=np.uint8)[::PAGE].sum()


def _on_device(tensors, device: str) -> int:
    """The bytes of `tensors`, once the device has finished with them."""
    import torch

    total = 0
    for t in tensors:
        if t.device.type != device:
            raise SystemExit(f"a tensor is on {t.device}, not on {device}")
        total += t.numel() * t.element_size()
    torch.cuda.synchronize()
    return total


def worker(kind: str, path: str) -> dict:
    """Loads `path` as `kind` does and returns seconds and bytes."""
    target = os.environ.get(DEVICE_VAR, "cpu")
    if kind == "limit":
        import numpy as np

        from probe_direct import buffered  # (this script's directory)

        size = os.path.getsize(path)
        start = time.perf_counter()
        buf = np.empty(size, dtype=np.uint8)
        buffered(path, size, buf, CHUNK)
        _touch_buffer(buf)
        return {"s": time.perf_counter() - start, "bytes": size}
    if kind == "device":
        import mmap as _mmap

        from probe_direct import direct  # (this script's directory)

        size = os.path.getsize(path)
        step = 1 << 20
        start = time.perf_counter()
        region = _mmap.mmap(-1, size + step, flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS)
        region.madvise(_mmap.MADV_HUGEPAGE)
        direct(path, size, region, step, 16)
        _touch_buffer(memoryview(region)[:size])
        return {"s": time.perf_counter() - start, "bytes": size}
    if kind == "memory":
        import ctypes
        import mmap as _mmap
        import threading

        # ctypes lets go of the GIL during the call (mmap.madvise does not),
        # so the threads fault in at the same time.
        from tensorizer_rs._syscalls import prefault

        size = os.path.getsize(path)
        start = time.perf_counter()
        region = _mmap.mmap(-1, size, flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS)
        region.madvise(_mmap.MADV_HUGEPAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(region))
        threads = min(os.cpu_count() or 1, 16)
        step = -(-size // threads // HUGE) * HUGE
        runs = [(at, min(step, size - at)) for at in range(0, size, step)]
        workers = [threading.Thread(target=prefault, args=(base + at, n)) for at, n in runs]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        return {"s": time.perf_counter() - start, "bytes": size}
    if kind == "curl-http":
        start = time.perf_counter()
        subprocess.run(["curl", "-sf", "-o", "/dev/null", path], check=True)
        return {"s": time.perf_counter() - start, "bytes": 0}
    if kind == "dd":
        start = time.perf_counter()
        subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=16M"], check=True, capture_output=True)
        return {"s": time.perf_counter() - start, "bytes": os.path.getsize(path)}
    import torch  # (imported before the clock starts)

    if target != "cpu":
        torch.empty(1, device=target)  # the CUDA context, before the clock as imports are
        torch.cuda.synchronize()
    finish = _touch_tensors if target == "cpu" else lambda ts: _on_device(ts, target)
    if kind.endswith("-folder"):
        shards = _shards(path)
        start = time.perf_counter()
        if kind == "rs-folder":
            import tensorizer_rs

            n = finish(tensorizer_rs.load_state_dict(path, device=target).values())
        elif kind == "st-folder":
            from safetensors.torch import load_file

            n = finish([t for s in shards for t in load_file(s, device=target).values()])
        else:
            from fastsafetensors import fastsafe_open

            with fastsafe_open(filenames=shards, nogds=True, device=target) as f:
                n = finish([f.get_tensor(k).clone() for k in f.keys()])
    elif kind in ("rs-st", "rs-st-http"):
        from tensorizer_rs.safetensors.torch import load_file as rs_load_file

        start = time.perf_counter()
        n = finish(rs_load_file(path, device=target).values())
    elif kind.startswith("rs-"):
        import tensorizer_rs

        if kind in ("rs-own-4k", "rs-own-huge"):
            # Experiments: the same load with its large buffers in 4 KiB
            # pages, or in huge pages, whatever the load plan chose.
            from tensorizer_rs import _memory

            chosen = _memory.host_memory
            forced = kind == "rs-own-huge"
            _memory.host_memory = lambda size, huge=True, lead=0: chosen(size, forced, lead)

        if kind == "rs-s3":
            # The URI with the endpoint and keys in the environment: the
            # loader's own parallel ranged reads.
            os.environ.update(_s3_env())
        start = time.perf_counter()
        mode = {"rs-mmap": True, "rs-auto-ro": "auto", "rs-auto": "auto"}.get(kind, False)
        d = tensorizer_rs.TensorDeserializer(path, device=target, mmap=mode)
        n = finish(d.values())
    elif kind == "tensorizer-s3":
        import tensorizer
        from tensorizer import stream_io

        endpoint = os.environ[S3_VAR]
        start = time.perf_counter()
        stream = stream_io.open_stream(
            path, "rb", s3_access_key_id="testing", s3_secret_access_key="testing", s3_endpoint=endpoint,
            force_http=True,
        )
        d = tensorizer.TensorDeserializer(stream, device=target)
        n = finish(d.values())
    elif kind in ("tensorizer", "tensorizer-http"):
        import tensorizer

        start = time.perf_counter()
        d = tensorizer.TensorDeserializer(path, device=target)
        n = finish(d.values())
    elif kind == "fastsafetensors":
        from fastsafetensors import fastsafe_open

        start = time.perf_counter()
        with fastsafe_open(filenames=[path], nogds=True, device=target) as f:
            # Clones: the file buffer (and the tensors over it) is freed at
            # close, and the caller keeps the tensors.
            n = finish([f.get_tensor(k).clone() for k in f.keys()])
    elif kind == "runai":
        from runai_model_streamer import SafetensorsStreamer

        start = time.perf_counter()
        with SafetensorsStreamer() as streamer:
            streamer.stream_file(path, device=target)
            n = finish([t.clone() for _, t in streamer.get_tensors()])
    elif kind in ("safetensors", "safetensors-pread"):
        from safetensors.torch import load_file

        backend = "pread" if kind == "safetensors-pread" else "mmap"
        start = time.perf_counter()
        n = finish(load_file(path, device=target, backend=backend).values())
    else:
        raise SystemExit(f"unknown contender {kind!r}")
    return {"s": time.perf_counter() - start, "bytes": n}


def _shards(folder: str) -> list[str]:
    """The safetensors shards of the folder, in name order."""
    return sorted(str(p) for p in Path(folder).glob("*.safetensors"))


def _s3_env() -> dict[str, str]:
    """The environment our loader reads an ``s3://`` URI's endpoint and keys from."""
    return {
        "S3_ENDPOINT_URL": os.environ[S3_VAR], "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }  # fmt: skip


# -- in the parent -----------------------------------------------------------


def can_drop() -> bool:
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
        return True
    except OSError:
        return False


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def warm(path: str) -> None:
    for one in _shards(path) if os.path.isdir(path) else [path]:
        with open(one, "rb", buffering=0) as f:
            while f.read(CHUNK):
                pass


def write_folder(sd: dict, d: Path) -> None:
    """`sd` split in order into FOLDER_SHARDS safetensors files in `d`, and
    their index, as Hugging Face's ``save_pretrained`` lays them out."""
    import safetensors.torch

    d.mkdir(parents=True, exist_ok=True)
    names = list(sd)
    per = -(-len(names) // FOLDER_SHARDS)
    weight_map = {}
    for k in range(FOLDER_SHARDS):
        shard = f"model-{k + 1:05d}-of-{FOLDER_SHARDS:05d}.safetensors"
        part = {n: sd[n] for n in names[k * per : (k + 1) * per]}
        safetensors.torch.save_file(part, str(d / shard), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard))
    total = sum(t.numel() * t.element_size() for t in sd.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))


def write_files(gib: float, tensors: int, d: Path) -> dict[str, str]:
    """The three files of one size (reused when present and complete)."""
    import torch

    paths = {
        "own": d / "own.tensors", "theirs": d / "theirs.tensors", "st": d / "model.safetensors", "folder": d / "folder",
    }  # fmt: skip
    done = d / "complete"
    if done.exists() and all(p.exists() for p in paths.values()):
        return {k: str(v) for k, v in paths.items()}
    d.mkdir(parents=True, exist_ok=True)
    per = int(gib * (1 << 30)) // tensors // 2  # bf16 elements per tensor
    cols = 1024
    rows = max(1, per // cols)
    log(f"writing {gib} GiB ({tensors} tensors of {rows}x{cols} bf16) to {d}")
    gen = torch.Generator().manual_seed(0)
    sd = {f"layers.{i}.weight": torch.randn(rows, cols, generator=gen).to(torch.bfloat16) for i in range(tensors)}
    import safetensors.torch
    import tensorizer
    import tensorizer_rs

    with tensorizer_rs.TensorSerializer(str(paths["own"])) as s:
        s.write_state_dict(sd)
    s2 = tensorizer.TensorSerializer(str(paths["theirs"]))
    s2.write_state_dict(sd)
    s2.close()
    safetensors.torch.save_file(sd, str(paths["st"]))
    write_folder(sd, paths["folder"])
    del sd
    done.touch()
    return {k: str(v) for k, v in paths.items()}


def read_only_copy(src: str, d: Path) -> tuple[str, list[list[str]]]:
    """`src` copied into an ext4 image loop-mounted read-only under `d`
    (needs root); returns the copy's path and the commands that undo it."""
    image, mnt = d / "ro.img", d / "ro"
    mnt.mkdir(exist_ok=True)
    with image.open("wb") as f:
        f.truncate(os.path.getsize(src) + (256 << 20))
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)  # noqa: E731
    run("mkfs.ext4", "-q", "-F", str(image))
    run("mount", "-o", "loop", str(image), str(mnt))
    run("cp", src, str(mnt / "own.tensors"))
    run("mount", "-o", "remount,ro", str(mnt))
    return str(mnt / "own.tensors"), [["umount", str(mnt)], ["rm", "-f", str(image)]]


def run_one(kind: str, path: str, env: dict[str, str]) -> dict:
    if kind == "rs-own-cached":
        env = {**env, "TENSORIZER_RS_COLD_READS": "0"}
    out = subprocess.run(
        [sys.executable, str(HERE), "--worker", kind, path], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"{kind} on {path} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs else {}


def fmt(st: dict) -> str:
    if not st:
        return "–"
    return f"{st['median'] * 1e3:.0f} ms ({st['min'] * 1e3:.0f}–{st['max'] * 1e3:.0f})"


def ratio(limit: dict, st: dict) -> str:
    return f"{limit['median'] / st['median']:.2f}" if limit and st else "–"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0, 8.0])
    ap.add_argument("--tensors", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=list(CONTENDERS), help="a subset of the contenders")
    ap.add_argument("--dir", default=str(REPO / "target" / "bench-cold"))
    ap.add_argument("--keep", action="store_true", help="keep the files for the next run")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the loaders put the tensors")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0

    cold = can_drop()
    if not cold:
        log("cannot drop the page cache (needs root): warm loads only")
    kinds = args.only or list(CONTENDERS)
    env = {**os.environ, DEVICE_VAR: args.device}
    results: dict = {"cold_available": cold, "sizes": {}}
    print(f"# First loads in a fresh process ({'cold and warm' if cold else 'warm only: cannot drop caches'})\n")
    print(
        f"{os.cpu_count()} CPUs; files in {args.dir}; {args.reps} repetitions, contenders interleaved; "
        f"tensors loaded to {args.device}.\n"
    )
    for gib in args.gib:
        d = Path(args.dir) / f"{gib:g}gib"
        files = write_files(gib, args.tensors, d)
        undo: list[list[str]] = []
        served = contextlib.ExitStack()
        base = None
        if any(k in HTTP for k in kinds):
            sys.path.insert(0, str(REPO / "python" / "tests"))
            import remote_servers

            base = served.enter_context(remote_servers.nginx(str(d)))
        if any(k in S3 for k in kinds):
            sys.path.insert(0, str(REPO / "python" / "tests"))
            import remote_servers

            endpoint, client = served.enter_context(remote_servers.s3_bucket(S3_BUCKET))
            env[S3_VAR] = endpoint
            for kind in S3:
                name = Path(files[FILE_OF[kind]]).name
                log(f"uploading {name} to moto")
                client.upload_file(files[FILE_OF[kind]], S3_BUCKET, name)  # type: ignore[attr-defined]
        if "rs-auto-ro" in kinds:
            if cold:
                files["ro"], undo = read_only_copy(files["own"], d)
            else:
                log("a read-only file system needs root: rs-auto-ro left out")
                kinds = [k for k in kinds if k != "rs-auto-ro"]
        times: dict[str, dict[str, list[float]]] = {k: {"cold": [], "warm": []} for k in kinds}
        for rep in range(args.reps):
            for state in ("cold", "warm") if cold else ("warm",):
                for kind in kinds:
                    path = files[FILE_OF[kind]]
                    if state == "cold":
                        drop_caches()
                    else:
                        # Only this load's file in the cache: at 8 GiB the
                        # other files' pages would crowd a small machine's
                        # memory and make later loads reclaim them.
                        if cold:
                            drop_caches()
                        warm(path)
                    where = f"{base}/{Path(path).name}" if kind in HTTP else path
                    if kind in S3:
                        where = f"s3://{S3_BUCKET}/{Path(path).name}"
                    r = run_one(kind, where, env)
                    times[kind][state].append(r["s"])
                    log(f"{gib:g} GiB rep {rep + 1} {state:4} {kind:12} {r['s'] * 1e3:8.0f} ms")
        served.close()
        for cmd in undo:
            subprocess.run(cmd, check=False, capture_output=True)
        stats = {k: {s: summary(v) for s, v in times[k].items()} for k in kinds}
        results["sizes"][f"{gib:g}"] = stats
        limit = stats.get("limit", {})
        print(f"## {gib:g} GiB, {args.tensors} bf16 tensors\n")
        print("| contender | cold: median (min–max) | × limit | warm: median (min–max) | × limit |")
        print("|---|---|---|---|---|")
        for k in kinds:
            c, w = stats[k].get("cold", {}), stats[k].get("warm", {})
            print(
                f"| {CONTENDERS[k]} | {fmt(c)} | {ratio(limit.get('cold', {}), c)} | {fmt(w)} "
                f"| {ratio(limit.get('warm', {}), w)} |"
            )
        print()
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
