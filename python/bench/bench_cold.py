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
* ``copy`` fills fresh huge-page memory of the file's size from the file
  with ``preadv`` (64 MiB calls) on as many threads as our loader's default
  readers, and touches it: warm, the kernel's cheapest private copy of the
  cached file, the floor of any warm load that copies.
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
  copies: the file is writable, spec §26.3), locally and over HTTP, and
  on a read-only copy as ``mmap="auto"``'s (views, as safetensors' own,
  which loads that copy too);
  fastsafetensors (``fastsafe_open``, CPU, no GDS) and Run:ai's model
  streamer (``SafetensorsStreamer``) on it, each tensor cloned out of the
  loader's buffers as a caller keeping them must (run the script with the
  Python of ``contenders-requirements.txt``'s environment for these).
* Over HTTP, from nginx on 127.0.0.1 serving the same files (cold: nginx
  reads them from the disk): ``curl`` to /dev/null (the HTTP limit), ours
  on our file and tensorizer on its own.
* The same tensors as a folder of 4 safetensors shards and its index:
  ``tensorizer_rs.load_state_dict`` on the folder (shards loaded two or
  more at once, the reader threads and the cold-read queue shared), safetensors ``load_file`` on each
  shard in turn, and fastsafetensors with the 4 files in one
  ``fastsafe_open``. A warm load reads every shard through first.
* ``torch.load(path, mmap=True, weights_only=True)`` on the same state
  dict written by ``torch.save`` (views of a map of the file, faulted in by
  the touches).
* Over S3, from moto_server on 127.0.0.1 (which holds the objects in its
  own memory, so the server side is never cold): ours on our file
  (``s3://`` URI, endpoint and keys from the environment), tensorizer on
  its own (``stream_io.open_stream`` with the same endpoint and keys), ours
  (``tensorizer_rs.safetensors``'s ``load_file``) and Run:ai's streamer on
  the safetensors file, and ours (``load_state_dict``) on the folder's
  prefix (``s3://models/folder/``, shards and index). Run:ai's streamer
  reads S3 through runai-model-streamer-s3, whose ``libstreamers3.so`` it
  ``dlopen``s from its own ``libstreamer/lib``: both packages must be
  installed into the same ``site-packages`` (else "S3 not supported"); it
  takes the endpoint from ``AWS_ENDPOINT_URL`` (path-style addressing to
  moto works as is), the keys from ``AWS_ACCESS_KEY_ID`` and
  ``AWS_SECRET_ACCESS_KEY``, and ``AWS_EC2_METADATA_DISABLED=true`` keeps
  it off the metadata service. moto answers each ranged GET by copying the
  whole object, so Run:ai's 8 MiB requests cost it quadratically (0.5 GiB:
  ~48 s here) and outlast the streamer's 1 s request timeout ("File access
  error" from 0.5 GiB on): the row sets
  ``RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS`` to 60 s. ``--s3-max-gib`` leaves
  the S3 rows out above a size.

With ``--device cuda`` the loaders put every tensor on the GPU and the
clock stops at ``torch.cuda.synchronize()`` instead of the page touches;
the CUDA context is made before the clock starts, as imports are. The
``limit``, ``device`` and ``dd`` rows stay what the storage gives the host.

Files: each size's file kinds (ours, tensorizer's, safetensors, the
folder, ``torch.save``'s) are written once from one seeded state dict.
With ``--group-files`` they are written in groups that fit the free disk
(every contender of one file in the same group; all in one group when they
fit), each group's contenders run interleaved and its files are deleted
before the next group's are written; the run refuses to start when the
largest group does not fit. A contender that fails is recorded as failed
(its error in the table and JSON) and the others go on. ``--targets``
prints issue 43's ratio lines under each table; ``formats.sh`` runs the
whole matrix (1, 4 and 8 GiB).

Medians with min–max over the repetitions. Results are Markdown on stdout
(and JSON with ``--json``); progress, with a rough run-time estimate
first, on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
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
    "limit": "limit: sequential 16 MiB reads into one reused buffer",
    "device": "device: 16 parallel 1 MiB O_DIRECT reads",
    "dd": "dd bs=16M",
    "memory": "fresh memory: the file's size in huge pages, populated",
    "copy": "copy: the file preadv'd into fresh huge-page memory by our default readers",
    "copy-4k": "copy-4k: the same into fresh 4 KiB-page memory (the pages our warm loads get here)",
    "rs-own": "tensorizer_rs, own file",
    "rs-theirs": "tensorizer_rs, tensorizer's file",
    "rs-mmap": "tensorizer_rs mmap=True, own file",
    "rs-own-cached": "tensorizer_rs, own file, TENSORIZER_RS_COLD_READS=0",
    "rs-auto-ro": 'tensorizer_rs mmap="auto", own file on a read-only file system',
    "rs-auto": 'tensorizer_rs mmap="auto", own file (writable: copies)',
    "tensorizer": "tensorizer 2.12.1, its file",
    "safetensors": "safetensors load_file",
    "safetensors-pread": 'safetensors load_file(backend="pread")',
    "safetensors-ro": "safetensors load_file, the safetensors file on a read-only file system",
    "rs-st": "tensorizer_rs.safetensors load_file, the safetensors file",
    "rs-st-ro": "tensorizer_rs.safetensors load_file, the safetensors file on a read-only file system (views)",
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
    "torch-mmap": "torch.load(mmap=True, weights_only=True), the same tensors by torch.save",
    "rs-pt": "tensorizer_rs, the same torch.save file",
    "rs-st-s3": "tensorizer_rs.safetensors load_file, the safetensors file over S3 (moto)",
    "runai-s3": "Run:ai model streamer 0.17.1 (+ -s3), the safetensors file over S3 (moto)",
    "rs-folder-s3": "tensorizer_rs.load_state_dict, the 4-shard folder's S3 prefix (moto)",
}
#: Shards in the folder the ``*-folder`` contenders load (the same tensors
#: as the single files, split in order into this many safetensors files
#: beside a ``model.safetensors.index.json``, as Hugging Face writes them).
FOLDER_SHARDS = 4
#: Contenders that load from nginx on 127.0.0.1, serving the files' folder.
HTTP = ("curl-http", "rs-http", "tensorizer-http", "rs-st-http")
#: Contenders that load from moto_server on 127.0.0.1 (which holds the
#: objects in its own memory: the server is never cold).
S3 = ("rs-s3", "tensorizer-s3", "rs-st-s3", "runai-s3", "rs-folder-s3")
#: Run:ai's S3 request timeout (``RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS``)
#: against moto: its 1 s default fails there from 0.5 GiB on.
RUNAI_S3_TIMEOUT_MS = 60_000
#: The moto endpoint, passed to the workers in the environment.
S3_VAR = "BENCH_COLD_S3"
S3_BUCKET = "models"
FILE_OF = {
    "limit": "own", "device": "own", "dd": "own", "memory": "own", "rs-own": "own", "rs-theirs": "theirs", "rs-mmap": "own",
    "rs-own-cached": "own", "rs-auto-ro": "ro", "rs-auto": "own", "rs-st-ro": "st-ro", "safetensors-ro": "st-ro",
    "tensorizer": "theirs", "safetensors": "st", "safetensors-pread": "st", "rs-st": "st",
    "fastsafetensors": "st", "runai": "st", "rs-st-http": "st",
    "curl-http": "own", "rs-http": "own", "tensorizer-http": "theirs",
    "rs-s3": "own", "tensorizer-s3": "theirs",
    "rs-folder": "folder", "st-folder": "folder", "fastsafetensors-folder": "folder",
    "copy": "own", "copy-4k": "own", "torch-mmap": "pt", "rs-pt": "pt", "rs-st-s3": "st", "runai-s3": "st", "rs-folder-s3": "folder",
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

        # The read limit: every byte through one reused, already
        # faulted buffer, so the row measures the storage and the page
        # cache, not fresh memory.
        size = os.path.getsize(path)
        buf = np.ones(CHUNK, dtype=np.uint8)
        start = time.perf_counter()
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass
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
    if kind in ("copy", "copy-4k"):
        return _copy(path, huge=kind == "copy")
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
    elif kind in ("rs-st-s3", "runai-s3", "rs-folder-s3"):
        n, start = _s3_load(kind, path, finish, target)
    elif kind == "torch-mmap":
        start = time.perf_counter()
        n = finish(torch.load(path, mmap=True, weights_only=True).values())
    elif kind in ("rs-st", "rs-st-http", "rs-st-ro"):
        from tensorizer_rs.safetensors.torch import load_file as rs_load_file

        start = time.perf_counter()
        n = finish(rs_load_file(path, device=target).values())
    elif kind.startswith("rs-"):
        import tensorizer_rs

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
    elif kind in ("safetensors", "safetensors-pread", "safetensors-ro"):
        from safetensors.torch import load_file

        backend = "pread" if kind == "safetensors-pread" else "mmap"
        start = time.perf_counter()
        n = finish(load_file(path, device=target, backend=backend).values())
    else:
        raise SystemExit(f"unknown contender {kind!r}")
    return {"s": time.perf_counter() - start, "bytes": n}


def _copy(path: str, huge: bool) -> dict:
    """The kernel's cheapest private copy of the cached file: fresh memory of
    its size (one anonymous mapping, 2 MiB-aligned, advised for huge pages
    when `huge`) filled by ``preadv`` in 64 MiB calls from as many threads as
    our loader's default readers, each its share in order, then every page
    touched. Where transparent huge pages are ``madvise`` (this VM), memory
    not advised gets 4 KiB pages: what our loader takes for loads through the
    page cache on a machine whose balloon takes free memory back (spec §23.4)."""
    import ctypes
    import mmap as _mmap
    import threading

    from tensorizer_rs import _native

    threads = max(1, int(_native.DEFAULT_READERS))
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    start = time.perf_counter()
    region = _mmap.mmap(-1, -(-size // HUGE) * HUGE + HUGE, flags=_mmap.MAP_PRIVATE | _mmap.MAP_ANONYMOUS)
    if huge:
        region.madvise(_mmap.MADV_HUGEPAGE)
    lead = -ctypes.addressof(ctypes.c_char.from_buffer(region)) % HUGE
    view = memoryview(region)[lead : lead + size]
    share = -(-size // threads)
    errors: list[BaseException] = []

    def fill(k: int) -> None:
        at, end = k * share, min(size, (k + 1) * share)
        try:
            while at < end:
                got = os.preadv(fd, [view[at : min(end, at + (64 << 20))]], at)
                if got <= 0:
                    raise OSError(f"short read at {at} of {path}")
                at += got
        except BaseException as e:  # reported on the calling thread
            errors.append(e)

    workers = [threading.Thread(target=fill, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    _touch_buffer(view)
    took = time.perf_counter() - start
    os.close(fd)
    return {"s": took, "bytes": size}


def _s3_load(kind: str, uri: str, finish, target: str) -> tuple[int, float]:
    """The S3 loads of the safetensors file and the folder's prefix; returns
    bytes and the clock's start (imports and the environment come first).
    Run:ai's streamer takes the endpoint from ``AWS_ENDPOINT_URL`` (read by
    its S3 plugin, runai-model-streamer-s3, which must sit in the same
    ``site-packages`` as runai-model-streamer: it is ``dlopen``ed from there,
    else "S3 not supported") and the keys from the environment."""
    os.environ.update(_s3_env())
    if kind == "runai-s3":
        # Its S3 client gives a request 1 s by default; moto, copying the
        # whole object for each of its 8 MiB ranged GETs, takes longer
        # from 0.5 GiB on and the load fails ("File access error").
        os.environ.setdefault("RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS", str(RUNAI_S3_TIMEOUT_MS))
        from runai_model_streamer import SafetensorsStreamer

        start = time.perf_counter()
        with SafetensorsStreamer() as streamer:
            streamer.stream_file(uri, device=target)
            return finish([t.clone() for _, t in streamer.get_tensors()]), start
    if kind == "rs-st-s3":
        from tensorizer_rs.safetensors.torch import load_file as rs_load_file

        start = time.perf_counter()
        return finish(rs_load_file(uri, device=target).values()), start
    import tensorizer_rs

    start = time.perf_counter()
    return finish(tensorizer_rs.load_state_dict(uri, device=target).values()), start


def _shards(folder: str) -> list[str]:
    """The safetensors shards of the folder, in name order."""
    return sorted(str(p) for p in Path(folder).glob("*.safetensors"))


def _s3_env() -> dict[str, str]:
    """The environment our loader reads an ``s3://`` URI's endpoint and keys from."""
    return {
        "S3_ENDPOINT_URL": os.environ[S3_VAR], "AWS_ENDPOINT_URL": os.environ[S3_VAR], "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
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


#: The files of one size, by kind (``FILE_OF``'s values but the read-only
#: ones), and where each lives under the size's folder.
FILE_NAMES = {
    "own": "own.tensors", "theirs": "theirs.tensors", "st": "model.safetensors", "folder": "folder", "pt": "model.pt",
}  # fmt: skip
#: Read-only copies (loop-mounted, root only, cold runs only), each made on
#: demand from the file kind it names.
READ_ONLY_OF = {"ro": "own", "st-ro": "st"}
#: Room kept free beside the files of a group (torch.save's and the loads'
#: temporary files, the machine's other users).
DISK_SLACK = 2 << 30


def file_bytes(gib: float) -> int:
    """A generous size of one file kind at `gib` (headers and alignment)."""
    return int(gib * (1 << 30) * 1.02) + (64 << 20)


def write_files(gib: float, tensors: int, d: Path, wanted: list[str] | None = None) -> dict[str, str]:
    """The files of one size, `wanted` kinds only (all by default); each
    kind is reused when present and complete."""
    import torch

    paths = {k: d / name for k, name in FILE_NAMES.items()}
    missing = [k for k in wanted or list(FILE_NAMES) if not (d / f"complete-{k}").exists()]
    if missing:
        d.mkdir(parents=True, exist_ok=True)
        per = int(gib * (1 << 30)) // tensors // 2  # bf16 elements per tensor
        cols = 1024
        rows = max(1, per // cols)
        log(f"writing {gib} GiB ({tensors} tensors of {rows}x{cols} bf16) as {', '.join(missing)} to {d}")
        gen = torch.Generator().manual_seed(0)
        sd = {f"layers.{i}.weight": torch.randn(rows, cols, generator=gen).to(torch.bfloat16) for i in range(tensors)}
        for kind in missing:
            write_kind(kind, sd, paths[kind])
            (d / f"complete-{kind}").touch()
        del sd
    return {k: str(v) for k, v in paths.items()}


def write_kind(kind: str, sd: dict, path: Path) -> None:
    import safetensors.torch
    import tensorizer
    import tensorizer_rs
    import torch

    if kind == "own":
        with tensorizer_rs.TensorSerializer(str(path)) as s:
            s.write_state_dict(sd)
    elif kind == "theirs":
        s2 = tensorizer.TensorSerializer(str(path))
        s2.write_state_dict(sd)
        s2.close()
    elif kind == "st":
        safetensors.torch.save_file(sd, str(path))
    elif kind == "folder":
        write_folder(sd, path)
    else:
        torch.save(sd, str(path))


def delete_files(d: Path, kinds: list[str]) -> None:
    log(f"deleting {', '.join(kinds)} in {d}")
    for kind in kinds:
        (d / f"complete-{kind}").unlink(missing_ok=True)
        path = d / FILE_NAMES[kind]
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def groups_of(kinds: list[str], gib: float, room: int) -> list[list[str]]:
    """`kinds` split into groups whose files fit in `room` bytes together:
    the contenders of one file kind always in one group, file kinds packed
    in first-use order (everything in one group when it all fits, so every
    contender alternates with every other)."""
    order: list[str] = []
    for k in kinds:
        if FILE_OF[k] not in order:
            order.append(FILE_OF[k])
    per = file_bytes(gib)
    packs: list[list[str]] = []
    for fk in order:
        if packs and (len(packs[-1]) + 1) * per <= room:
            packs[-1].append(fk)
        else:
            packs.append([fk])
    return [[k for k in kinds if FILE_OF[k] in pack] for pack in packs]


def estimate_s(kinds: list[str], gib: float, reps: int, cold: bool, groups: int) -> float:
    """A rough run time for one size: a load's process start, cache drop and
    warm read-through, plus its bytes at 1 GB/s (S3 at 0.4 GB/s); each file
    kind written once per group at 0.1 GB/s (generating bf16 tensors and
    writing them on this machine); Run:ai's streamer from moto at ~170 s
    × GB² (48 s at 0.5 GiB here)."""
    size = gib * (1 << 30) / 1e9
    load = sum(5 + size / (0.4 if k in S3 else 1.0) + size for k in kinds)
    load += 170 * size * size * kinds.count("runai-s3")  # moto's copies for its 8 MiB requests
    writes = len({FILE_OF[k] for k in kinds}) * (5 + size / 0.1) + groups * 5
    return reps * load * (2 if cold else 1) + writes


def read_only_copy(src: str, d: Path, name: str) -> tuple[str, list[list[str]]]:
    """`src` copied into an ext4 image loop-mounted read-only at `d`/`name`
    (needs root); returns the copy's path and the commands that undo it."""
    image, mnt = d / f"{name}.img", d / name
    mnt.mkdir(exist_ok=True)
    with image.open("wb") as f:
        f.truncate(os.path.getsize(src) + (256 << 20))
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)  # noqa: E731
    run("mkfs.ext4", "-q", "-F", str(image))
    run("mount", "-o", "loop", str(image), str(mnt))
    run("cp", src, str(mnt / Path(src).name))
    run("mount", "-o", "remount,ro", str(mnt))
    return str(mnt / Path(src).name), [["umount", str(mnt)], ["rm", "-f", str(image)]]


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


#: The rows that load nothing into tensors: what the machine gives, never a
#: contender ("fastest other"). Ours are the ``rs-*`` rows.
LIMITS = ("limit", "device", "dd", "memory", "copy", "copy-4k", "curl-http")


def speedup(stats: dict, state: str, theirs: str, ours: str) -> float | None:
    """How many times faster `ours` loaded than `theirs` (median over median)."""
    a, b = stats.get(theirs, {}).get(state, {}), stats.get(ours, {}).get(state, {})
    return a["median"] / b["median"] if a and b else None


def target_lines(stats: dict) -> list[str]:
    """The ratio lines issue 43's targets read (a speed ratio: > 1 is ours faster)."""
    lines = []

    def say(what: str, x: float | None, goal: float) -> None:
        verdict = "–" if x is None else ("met" if x >= goal else "missed")
        lines.append(f"- {what}: {'–' if x is None else f'{x:.2f}×'} (target ≥ {goal}: {verdict})")

    # Other loaders of the same bytes, local: single files, and the folder's.
    others = [k for k in stats if not k.startswith("rs-") and k not in LIMITS and not k.endswith(("-s3", "-http"))]
    for ours, theirs in (("rs-st", "safetensors"), ("rs-own", "safetensors"), ("rs-folder", "st-folder")):
        say(f"cold, {ours} ÷ {theirs}", speedup(stats, "cold", theirs, ours), 1.2)
        pool = [o for o in others if o.endswith("-folder") == ours.endswith("-folder")]
        fast = [(x, o) for x, o in ((speedup(stats, "cold", o, ours), o) for o in pool) if x is not None]
        x, o = min(fast) if fast else (None, "–")
        say(f"cold, {ours} ÷ the fastest other ({o})", x, 1.0)
    for ours in ("rs-own", "rs-theirs", "rs-st"):
        say(f"cold, {ours} × the read limit", speedup(stats, "cold", "limit", ours), 0.85)
    say("warm, rs-st ÷ safetensors pread (private copies both)", speedup(stats, "warm", "safetensors-pread", "rs-st"), 1.0)
    say("warm, rs-st ÷ safetensors load_file (its views of a map)", speedup(stats, "warm", "safetensors", "rs-st"), 1.0)
    say("warm, rs-st-ro ÷ safetensors-ro (views of a map both, the same read-only copy)", speedup(stats, "warm", "safetensors-ro", "rs-st-ro"), 1.0)
    for ours in ("rs-theirs", "rs-own"):
        for floor in ("copy", "copy-4k"):
            say(f"warm, {ours} ÷ {floor}", speedup(stats, "warm", floor, ours), 0.9)
    say("S3, rs-st-s3 ÷ runai-s3 (cold)", speedup(stats, "cold", "runai-s3", "rs-st-s3"), 1.0)
    say("S3, rs-st-s3 ÷ runai-s3 (warm)", speedup(stats, "warm", "runai-s3", "rs-st-s3"), 1.0)
    return lines


def table(gib: float, tensors: int, kinds: list[str], stats: dict, failed: dict) -> str:
    limit, st = stats.get("limit", {}), stats.get("safetensors", {})
    out = [
        f"## {gib:g} GiB, {tensors} bf16 tensors\n",
        "| contender | cold: median (min–max) | × limit | × safetensors | warm: median (min–max) | × limit "
        "| × safetensors |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in kinds:
        c, w = stats[k].get("cold", {}), stats[k].get("warm", {})
        name = CONTENDERS[k] + (f" (**failed**: {failed[k]})" if k in failed else "")
        out.append(
            f"| {name} | {fmt(c)} | {ratio(limit.get('cold', {}), c)} | {ratio(st.get('cold', {}), c)} "
            f"| {fmt(w)} | {ratio(limit.get('warm', {}), w)} | {ratio(st.get('warm', {}), w)} |"
        )
    return "\n".join(out) + "\n"


def serve(kinds: list[str], files: dict[str, str], d: Path, env: dict, served: contextlib.ExitStack):
    """nginx and moto for the group's remote contenders (moto gets only the
    objects they read); returns nginx's base URL or None."""
    base = None
    if any(k in HTTP or k in S3 for k in kinds):
        sys.path.insert(0, str(REPO / "python" / "tests"))
        import remote_servers
    if any(k in HTTP for k in kinds):
        base = served.enter_context(remote_servers.nginx(str(d)))
    if any(k in S3 for k in kinds):
        endpoint, client = served.enter_context(remote_servers.s3_bucket(S3_BUCKET))
        env[S3_VAR] = endpoint
        for local in sorted({files[FILE_OF[k]] for k in kinds if k in S3}):
            objects = [local]
            if os.path.isdir(local):
                objects = _shards(local) + [str(Path(local) / "model.safetensors.index.json")]
            for one in objects:
                name = str(Path(one).relative_to(d))
                log(f"uploading {name} to moto")
                client.upload_file(one, S3_BUCKET, name)  # type: ignore[attr-defined]
    return base


def where_of(kind: str, path: str, base: str | None, d: Path) -> str:
    if kind in HTTP:
        return f"{base}/{Path(path).name}"
    if kind in S3:
        name = Path(path).relative_to(d)
        return f"s3://{S3_BUCKET}/{name}/" if os.path.isdir(path) else f"s3://{S3_BUCKET}/{name}"
    return path


def run_group(kinds: list[str], files: dict[str, str], d: Path, env: dict, reps: int, states, label: str):
    """Every contender of `kinds` `reps` times in each state, interleaved
    (in a shuffled order after the first repetition);
    returns the times and the contenders that failed (with the error's last
    line): a failure is recorded and the others go on."""
    times: dict[str, dict[str, list[float]]] = {k: {"cold": [], "warm": []} for k in kinds}
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as served:
        base = serve(kinds, files, d, env, served)
        for rep in range(reps):
            # After the first repetition, each takes the contenders in an
            # order of its own (seeded: the same in every run), so that no
            # contender always follows the same neighbour (a load that frees
            # gigabytes leaves the next one memory the host took back).
            order = list(kinds)
            if rep > 0:
                random.Random(rep).shuffle(order)
            for state in states:
                for kind in order:
                    if kind in failed:
                        continue
                    path = files[FILE_OF[kind]]
                    if state == "cold" or "cold" in states:
                        # Warm: only this load's file in the cache (at 8 GiB
                        # other files' pages would crowd memory and make
                        # later loads reclaim them).
                        drop_caches()
                    if state == "warm":
                        warm(path)
                    try:
                        r = run_one(kind, where_of(kind, path, base, d), env)
                    except RuntimeError as e:
                        failed[kind] = (str(e).strip().splitlines() or ["?"])[-1][:200]
                        log(f"{label} rep {rep + 1} {state:4} {kind:12} FAILED: {failed[kind]}")
                        continue
                    times[kind][state].append(r["s"])
                    log(f"{label} rep {rep + 1} {state:4} {kind:12} {r['s'] * 1e3:8.0f} ms")
    return times, failed


def refuse_debug_build() -> None:
    """Exits when tensorizer_rs here is a debug build (what the tests link:
    the workspace at opt-level 1, with debug assertions): its loads are
    not the product's. ``formats.sh`` builds and uses a release one."""
    from tensorizer_rs import _native

    if not getattr(_native, "OPTIMIZED", False) and not os.environ.get("TZR_BENCH_ALLOW_DEBUG"):
        raise SystemExit(
            f"{_native.__file__} is a debug build: run python/bench/formats.sh (it builds a release one), or "
            "put a release build first on PYTHONPATH (TZR_BENCH_ALLOW_DEBUG=1 to measure this one anyway)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--gib", type=float, nargs="+", default=[1.0, 8.0])
    ap.add_argument("--tensors", type=int, default=300)
    ap.add_argument("--reps", type=int, nargs="+", default=[3], help="per size in --gib order (the last repeats)")
    ap.add_argument("--only", nargs="+", choices=list(CONTENDERS), help="a subset of the contenders")
    ap.add_argument("--dir", default=str(REPO / "target" / "bench-cold"))
    ap.add_argument("--keep", action="store_true", help="keep the files for the next run")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the loaders put the tensors")
    ap.add_argument("--no-drop", action="store_true", help="never drop the page cache (warm loads only)")
    ap.add_argument(
        "--group-files", action="store_true",
        help="write each size's file kinds in groups that fit the free disk, deleting each group's after it",
    )  # fmt: skip
    ap.add_argument("--s3-max-gib", type=float, help="leave the S3 contenders out above this size")
    ap.add_argument("--room-gib", type=float, help="disk the files may take (default: the free space less 2 GiB)")
    ap.add_argument("--plan", action="store_true", help="print the groups, disk and time estimate, and stop")
    ap.add_argument("--targets", action="store_true", help="print issue 43's ratio lines under each table")
    args = ap.parse_args()
    refuse_debug_build()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0

    cold = not args.no_drop and can_drop()
    if not cold:
        log("not dropping the page cache (--no-drop, or it needs root): warm loads only")
    states = ("cold", "warm") if cold else ("warm",)
    kinds_all = args.only or list(CONTENDERS)
    reps_of = {gib: args.reps[min(i, len(args.reps) - 1)] for i, gib in enumerate(args.gib)}
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.dir).free
    room = int(args.room_gib * (1 << 30)) if args.room_gib else free - DISK_SLACK
    plan = {}
    for gib in args.gib:
        kinds = [k for k in kinds_all if not (k in S3 and args.s3_max_gib is not None and gib > args.s3_max_gib)]
        kinds = kinds if cold else [k for k in kinds if FILE_OF[k] not in READ_ONLY_OF]
        groups = groups_of(kinds, gib, room) if args.group_files else [kinds]
        need = max(len({FILE_OF[k] for k in g}) for g in groups) * file_bytes(gib)
        log(f"{gib:g} GiB: {len(groups)} group(s) of files, the largest {need / 2**30:.1f} GiB: {groups}")
        if need > room:
            raise SystemExit(
                f"{gib:g} GiB needs {(need + DISK_SLACK) / 2**30:.1f} GiB free in {args.dir} (its largest group of "
                f"files and 2 GiB more); it has {free / 2**30:.1f}, room for files {room / 2**30:.1f}"
                f"{'' if args.group_files else ' (try --group-files)'}"
            )
        plan[gib] = groups
    total = sum(estimate_s(sum(g, []), gib, reps_of[gib], cold, len(g)) for gib, g in plan.items())
    log(f"estimated run time: ~{total / 60:.0f} min (rough)")
    if args.plan:
        return 0
    env = {**os.environ, DEVICE_VAR: args.device}
    results: dict = {"cold_available": cold, "sizes": {}, "estimate_s": total, "started": time.time()}
    print(f"# First loads in a fresh process ({'cold and warm' if cold else 'warm only: no cache drops'})\n")
    print(
        f"{os.cpu_count()} CPUs; files in {args.dir}; contenders interleaved"
        f"{' within each group of files' if args.group_files else ''}; tensors loaded to {args.device}.\n"
    )
    for gib, groups in plan.items():
        d = Path(args.dir) / f"{gib:g}gib"
        times: dict = {}
        failed: dict = {}
        kinds = sum(groups, [])
        for i, group in enumerate(groups):
            needs = {FILE_OF[k] for k in group}
            fks = sorted({READ_ONLY_OF.get(fk, fk) for fk in needs})
            files = write_files(gib, args.tensors, d, fks)
            undo: list[list[str]] = []
            for ro in sorted(needs & set(READ_ONLY_OF)):
                files[ro], more = read_only_copy(files[READ_ONLY_OF[ro]], d, ro)
                undo += more
            label = f"{gib:g} GiB group {i + 1}/{len(groups)}"
            t, f = run_group(group, files, d, env, reps_of[gib], states, label)
            times.update(t)
            failed.update(f)
            for cmd in undo:
                subprocess.run(cmd, check=False, capture_output=True)
            if args.group_files and not args.keep:
                delete_files(d, fks)
        stats = {k: {s: summary(v) for s, v in times[k].items()} for k in kinds}
        results["sizes"][f"{gib:g}"] = {
            "stats": stats, "failed": failed, "reps": reps_of[gib], "groups": groups, "targets": target_lines(stats),
        }  # fmt: skip
        print(table(gib, args.tensors, kinds, stats, failed))
        left = [k for k in kinds_all if k not in kinds]
        if left:
            print(f"Left out at this size: {', '.join(left)}.\n")
        if args.targets:
            print("\n".join(target_lines(stats)) + "\n")
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    results["took_s"] = time.time() - results["started"]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
