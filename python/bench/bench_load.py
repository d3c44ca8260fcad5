#!/usr/bin/env python3
"""Load/save benchmark: tensorizer_rs against tensorizer, safetensors, torch.

One run compares, on the same state dict:

* loading: ``tensorizer_rs`` (its own file and tensorizer's file), tensorizer
  (``num_readers`` in {1, 2, 4, 8}; the best is reported), safetensors
  ``load_file`` (mmap, mmap + ``.clone()``, and ``backend="pread"`` where the
  installed safetensors has it), ``safe_open`` + ``get_tensor`` (its lazy
  API), ``torch.load`` and ``torch.load(mmap=True)``;
  beside the raw limits: one-thread reads of the same ``.tensors`` file into a
  preallocated, pre-faulted buffer (and into a fresh one) and a ``copy_`` of
  the same number of bytes between two pre-faulted buffers;
* peak RSS of each load in a fresh subprocess (VmHWM after resetting the
  watermark once imports are done, minus the RSS at that point, minus the
  output size; ``ru_maxrss`` is kept in the JSON);
* saving (case a): tensorizer_rs, tensorizer, ``safetensors.torch.save_file``
  and ``torch.save``, each followed by an fsync done by this harness, beside a
  raw write + fsync of the same number of bytes.

Cases: (a) ``--gib`` GiB (default 1) in 300 bf16 tensors; (b) 20,000 tensors
of 16 float32 each.

Every loaded tensor has every page touched inside the timed region (first and
last byte of each tensor, plus one byte per 4096 through a strided uint8 sum).
Page cache is warm: every file is read once, and every contender runs once
untimed, before timing. Contenders are interleaved within each repetition
(rotating start), so drift of a shared VM hits them alike.

Usage::

    python python/bench/bench_load.py                      # full run
    python python/bench/bench_load.py --gib 0.25 --reps 3  # quick
    python python/bench/bench_load.py --cases b --json out.json

Nothing here downloads anything.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import inspect
import json
import mmap
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PAGE = 4096
CHUNK = 8 << 20  # raw read/write call size
GIB = 1 << 30

# ---------------------------------------------------------------------------
# Allocator policy
# ---------------------------------------------------------------------------

_MALLOC_NOTE = "glibc default (dynamic mmap threshold)"


def pin_malloc_threshold(enabled: bool) -> None:
    """Pin glibc's mmap threshold at 128 KiB.

    glibc raises its mmap threshold (up to 32 MiB) after a large block is
    freed, so from the second repetition on, multi-MiB tensors would be
    served from recycled heap pages without page faults, and how much of
    that a loader gets depends on its allocation pattern, not its speed.
    Pinning the threshold makes every large allocation a fresh mapping in
    every repetition, as in a one-shot process loading a model.
    """
    global _MALLOC_NOTE
    if not enabled:
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        ok = libc.mallopt(M_MMAP_THRESHOLD, 128 << 10)
        libc.mallopt(M_TRIM_THRESHOLD, 128 << 10)
        if ok:
            _MALLOC_NOTE = (
                "glibc mmap threshold pinned at 128 KiB: every load gets "
                "fresh pages (first-touch faults included)"
            )
    except Exception:  # not glibc
        pass


# ---------------------------------------------------------------------------
# Optional libraries
# ---------------------------------------------------------------------------

LIBS: Dict[str, object] = {}
LIB_ERR: Dict[str, str] = {}


def import_libs(skip_rs: bool = False) -> None:
    import importlib

    if skip_rs:
        LIB_ERR["tensorizer_rs"] = LIB_ERR["tensorizer_rs.utils"] = (
            "skipped with --no-rs")
    for name in (
        "torch",
        "tensorizer_rs",
        "tensorizer",
        "safetensors.torch",
        "tensorizer_rs.utils",
    ):
        if name in LIB_ERR:
            continue
        try:
            LIBS[name] = importlib.import_module(name)
        except Exception as e:  # ImportError, or a broken build
            LIB_ERR[name] = f"{type(e).__name__}: {e}"
    if "torch" not in LIBS:
        sys.exit("bench_load.py needs torch: " + LIB_ERR["torch"])


def lib_version(name: str) -> str:
    if name not in LIBS:
        return "not available" if "skipped" in LIB_ERR.get(name, "") else "not installed"
    mod = LIBS[name]
    v = getattr(mod, "__version__", None)
    if v is None and name == "safetensors.torch":
        import safetensors

        v = getattr(safetensors, "__version__", "?")
    return str(v or "?")


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def make_case(case: str, gib: float) -> Dict[str, "object"]:
    import torch

    g = torch.Generator().manual_seed(1234)
    sd = {}
    if case == "a":
        n, cols = 300, 1024
        total_rows = max(n, int(gib * GIB) // (cols * 2))
        w = [0.75 + 0.5 * ((i * 37) % n) / (n - 1) for i in range(n)]
        sw = sum(w)
        rows = [max(1, int(total_rows * x / sw)) for x in w]
        rows[-1] += total_rows - sum(rows)
        for i, r in enumerate(rows):
            t = torch.empty((r, cols), dtype=torch.bfloat16)
            t.normal_(generator=g)
            sd[f"layers.{i // 6}.w{i % 6}"] = t
    elif case == "b":
        for i in range(20_000):
            sd[f"blocks.{i // 10}.p{i % 10}"] = torch.randn(
                16, dtype=torch.float32, generator=g
            )
    else:
        raise ValueError(case)
    return sd


def nbytes(t) -> int:
    return t.numel() * t.element_size()


def data_bytes(tensors) -> int:
    return sum(nbytes(t) for t in tensors)


# ---------------------------------------------------------------------------
# Page touching
# ---------------------------------------------------------------------------

_u8 = ctypes.c_uint8


def touch(tensors) -> int:
    """Read at least one byte of every page of every tensor."""
    acc = 0
    for t in tensors:
        n = nbytes(t)
        if n == 0:
            continue
        if not t.is_contiguous():
            t = t.contiguous()  # copies, so touches everything
        p = t.data_ptr()
        acc += _u8.from_address(p).value + _u8.from_address(p + n - 1).value
        if n > 2 * PAGE:
            acc += int(t.reshape(-1).view(LIBS["torch"].uint8)[::PAGE].sum())
    return acc


def as_tensors(obj) -> list:
    if isinstance(obj, dict):
        return list(obj.values())
    return list(obj)


# ---------------------------------------------------------------------------
# Raw I/O helpers
# ---------------------------------------------------------------------------


def read_into(path: str, buf) -> int:
    """One thread, CHUNK-sized readinto calls into ``buf`` (uint8 tensor)."""
    mv = memoryview(buf.numpy()).cast("B")
    n = len(mv)
    off = 0
    with open(path, "rb", buffering=0) as f:
        while off < n:
            got = f.readinto(mv[off : off + CHUNK])
            if not got:
                break
            off += got
    return off


def rs_threads() -> int:
    """tensorizer_rs's default number of reader threads."""
    native = getattr(LIBS.get("tensorizer_rs"), "_native", None)
    n = getattr(native, "DEFAULT_READERS", None)
    return int(n) if n else max(1, min(16, os.cpu_count() or 1))


def copy_limit(path: str, threads: int, held: dict) -> tuple:
    """The copy limit of a CPU load: the whole file copied from the page
    cache into one fresh anonymous mapping advised for transparent huge
    pages (2 MiB-aligned, whole huge pages), ``threads`` threads each
    ``preadv``-ing its share in 64 MiB calls (the GIL is released in them).
    The mapping stays in ``held`` until the untimed cleanup."""
    size = os.path.getsize(path)
    length = -(-size // (2 << 20)) * (2 << 20) + (2 << 20)
    m = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    start = -base % (2 << 20)
    mv = memoryview(m)[start : start + size]
    held["map"], held["view"] = m, mv
    fd = os.open(path, os.O_RDONLY)
    try:
        share = -(-size // threads)

        def work(k: int) -> None:
            off, end = k * share, min(size, (k + 1) * share)
            while off < end:
                got = os.preadv(fd, [mv[off : min(end, off + (64 << 20))]], off)
                if got <= 0:
                    raise OSError(f"short read at {off}")
                off += got

        errors: list = []

        def guarded(k: int) -> None:
            try:
                work(k)
            except BaseException as e:  # reported on the calling thread
                errors.append(e)

        ts = [threading.Thread(target=guarded, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
    finally:
        os.close(fd)
    return ()


def _drop_map(held: dict) -> None:
    mv, m = held.pop("view", None), held.pop("map", None)
    if mv is not None:
        mv.release()
    if m is not None:
        m.close()


def read_file_once(path: str) -> None:
    buf = bytearray(CHUNK)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    dfd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def rm(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------


class Contender:
    """A timed operation.

    ``prepare`` runs untimed before every timed call; ``run`` is timed and
    returns the loaded tensors (which are then touched inside the timing);
    ``cleanup`` runs untimed after it.
    """

    def __init__(
        self,
        key: str,
        label: str,
        run: Callable[[], object],
        *,
        group: str = "",
        kind: str = "loader",  # loader | limit | saver
        prepare: Optional[Callable[[], None]] = None,
        cleanup: Optional[Callable[[], None]] = None,
        nbytes: Optional[int] = None,
        fsync_target: Optional[str] = None,
        lib_fsync: str = "",
        available: bool = True,
        why: str = "",
        rss: bool = True,
    ):
        self.key, self.label, self.run = key, label, run
        self.group = group or key
        self.kind = kind
        self.prepare, self.cleanup = prepare, cleanup
        self.nbytes = nbytes
        self.fsync_target = fsync_target
        self.lib_fsync = lib_fsync
        self.available, self.why = available, why
        self.rss = rss
        self.times: List[float] = []
        self.extra: List[float] = []  # fsync times for savers
        self.error: Optional[str] = None


def tensorizer_load(path: str, num_readers: Optional[int]):
    tz = LIBS["tensorizer"]
    d = tz.TensorDeserializer(path, device="cpu", num_readers=num_readers)
    try:
        return {k: v for k, v in d.items()}
    finally:
        d.close()


def tensorizer_rs_load(path: str, **kwargs):
    rs = LIBS["tensorizer_rs"]
    d = rs.TensorDeserializer(path, device="cpu", **kwargs)
    try:
        return {k: v for k, v in d.items()}
    finally:
        close = getattr(d, "close", None)
        if close:
            close()


def _safe_open_all(path: str) -> dict:
    """Every tensor through ``safe_open(...).get_tensor``, the lazy API."""
    from safetensors import safe_open

    with safe_open(path, framework="pt", device="cpu") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def safetensors_has_backend() -> bool:
    st = LIBS.get("safetensors.torch")
    if st is None:
        return False
    try:
        return "backend" in inspect.signature(st.load_file).parameters
    except (TypeError, ValueError):
        return False


def load_contenders(plan: dict, state: dict) -> List[Contender]:
    """Loaders and limits for one case. ``state`` holds prefaulted buffers."""
    torch = LIBS["torch"]
    paths = plan["paths"]
    have_rs = "tensorizer_rs" in LIBS
    have_tz = "tensorizer" in LIBS and "tz" in paths
    tz_why = plan.get("tz_unavailable") or "not installed"
    tz_own = plan.get("tz_writer") == "tensorizer"
    have_st = "safetensors.torch" in LIBS
    rs_why = lib_version("tensorizer_rs") + " (" + LIB_ERR.get("tensorizer_rs", "") + ")"
    cs: List[Contender] = []

    cs.append(
        Contender(
            "rs",
            "**tensorizer_rs** (own file, default: private copies)",
            lambda: tensorizer_rs_load(paths["rs"]),
            available=have_rs and bool(paths.get("rs")),
            why=rs_why if not have_rs else plan.get("rs_write_error", ""),
        )
    )
    cs.append(
        Contender(
            "rs_mmap",
            "tensorizer_rs mmap=True (own file; zero-copy, opt-in)",
            lambda: tensorizer_rs_load(paths["rs"], mmap=True),
            available=have_rs and bool(paths.get("rs")),
            why=rs_why if not have_rs else plan.get("rs_write_error", ""),
        )
    )
    cs.append(
        Contender(
            "rs_on_tz",
            "tensorizer_rs (tensorizer's file)",
            lambda: tensorizer_rs_load(paths["tz"]),
            available=have_rs and have_tz and tz_own,
            why=rs_why if not have_rs else (
                "same file as above (tensorizer cannot write this case)"
                if have_tz else tz_why),
        )
    )
    for nr in (1, 2, 4, 8):
        cs.append(
            Contender(
                f"tz{nr}",
                f"tensorizer num_readers={nr}",
                (lambda nr=nr: lambda: tensorizer_load(paths["tz"], nr))(),
                group="tz",
                available=have_tz,
                why=tz_why,
            )
        )
    if have_st:
        st = LIBS["safetensors.torch"]
        cs.append(
            Contender(
                "st_mmap",
                "safetensors load_file (mmap, no copy)",
                lambda: st.load_file(paths["st"]),
            )
        )
        cs.append(
            Contender(
                "st_clone",
                "safetensors load_file + .clone()",
                lambda: {k: v.clone() for k, v in st.load_file(paths["st"]).items()},
            )
        )
        cs.append(
            Contender(
                "st_safe_open",
                "safetensors safe_open + get_tensor",
                lambda: _safe_open_all(paths["st"]),
            )
        )
        if safetensors_has_backend():
            cs.append(
                Contender(
                    "st_pread",
                    "safetensors load_file(backend=\"pread\")",
                    lambda: st.load_file(paths["st"], backend="pread"),
                )
            )
    else:
        cs.append(
            Contender("st_mmap", "safetensors", lambda: None, available=False,
                      why="not installed")
        )
    cs.append(
        Contender(
            "torch_load",
            "torch.load",
            lambda: torch.load(paths["pt"], map_location="cpu", weights_only=True),
        )
    )
    cs.append(
        Contender(
            "torch_mmap",
            "torch.load(mmap=True)",
            lambda: torch.load(
                paths["pt"], map_location="cpu", weights_only=True, mmap=True
            ),
        )
    )

    # ---- limits --------------------------------------------------------
    raw_path = paths["tz"] if "tz" in paths else paths.get("rs", paths["st"])
    n_raw = os.path.getsize(raw_path)

    def ensure(name: str, n: int):
        if name not in state:
            b = torch.empty(n, dtype=torch.uint8)
            b.fill_(1)  # pre-fault
            state[name] = b
        return state[name]

    def raw_prefaulted():
        buf = ensure("buf0", n_raw)
        read_into(raw_path, buf)
        return ()

    def raw_fresh():
        buf = torch.empty(n_raw, dtype=torch.uint8)
        read_into(raw_path, buf)
        return (buf,)

    def memcpy():
        ensure("buf1", n_raw).copy_(ensure("buf0", n_raw))
        return ()

    raw_name = os.path.basename(raw_path)
    if plan.get("case") == "a":
        nt = rs_threads()
        held: dict = {}
        cs.append(
            Contender(
                "copy_limit",
                f"copy limit: page cache → fresh huge-page memory "
                f"({raw_name}, {nt} thread{'s' * (nt != 1)} like tensorizer_rs)",
                lambda: copy_limit(raw_path, nt, held),
                kind="limit",
                nbytes=n_raw,
                cleanup=lambda: _drop_map(held),
            )
        )
    cs.append(
        Contender(
            "raw_read",
            f"raw read of {raw_name}, 1 thread, pre-faulted buffer",
            raw_prefaulted,
            kind="limit",
            nbytes=n_raw,
            prepare=lambda: ensure("buf0", n_raw),
        )
    )
    cs.append(
        Contender(
            "raw_read_fresh",
            f"raw read of {raw_name}, 1 thread, fresh buffer",
            raw_fresh,
            kind="limit",
            nbytes=n_raw,
        )
    )
    cs.append(
        Contender(
            "memcpy",
            f"memcpy (torch copy_, {torch.get_num_threads()} thread"
            f"{'s' * (torch.get_num_threads() != 1)}), pre-faulted",
            memcpy,
            kind="limit",
            nbytes=n_raw,
            prepare=lambda: (ensure("buf0", n_raw), ensure("buf1", n_raw)),
            rss=False,
        )
    )
    return cs


def save_contenders(plan: dict, sd: dict, state: dict) -> List[Contender]:
    torch = LIBS["torch"]
    d = plan["dir"]
    have_rs = "tensorizer_rs" in LIBS
    cs: List[Contender] = []
    nb = data_bytes(sd.values())

    def p(name):
        return os.path.join(d, "save-" + name)

    def rs_save(layout=None):
        rs = LIBS["tensorizer_rs"]
        kw = {} if layout is None else {"layout": layout}
        s = rs.TensorSerializer(p("rs.tensors"), **kw)
        s.write_state_dict(sd)
        s.close()

    cs.append(
        Contender(
            "rs_save",
            "**tensorizer_rs** (default layout)",
            rs_save,
            kind="saver",
            fsync_target=p("rs.tensors"),
            lib_fsync="library (fsync + rename, inside the save time) and harness",
            available=have_rs,
            why=lib_version("tensorizer_rs"),
        )
    )
    cs.append(
        Contender(
            "rs_save_tzl",
            "tensorizer_rs layout=\"tensorizer\"",
            lambda: rs_save("tensorizer"),
            kind="saver",
            fsync_target=p("rs.tensors"),
            lib_fsync="library (fsync + rename, inside the save time) and harness",
            available=have_rs,
            why=lib_version("tensorizer_rs"),
        )
    )

    def tz_save():
        tz = LIBS["tensorizer"]
        s = tz.TensorSerializer(p("tz.tensors"))
        s.write_state_dict(sd)
        s.close()

    cs.append(
        Contender(
            "tz_save",
            "tensorizer (CRC32 + SHA-256 per tensor)",
            tz_save,
            kind="saver",
            fsync_target=p("tz.tensors"),
            lib_fsync="harness only (tensorizer never fsyncs)",
            available="tensorizer" in LIBS,
            why="not installed",
        )
    )
    if "safetensors.torch" in LIBS:
        st = LIBS["safetensors.torch"]
        cs.append(
            Contender(
                "st_save",
                "safetensors save_file",
                lambda: st.save_file(sd, p("st.safetensors")),
                kind="saver",
                fsync_target=p("st.safetensors"),
                lib_fsync="harness only (save_file never fsyncs)",
            )
        )
    cs.append(
        Contender(
            "torch_save",
            "torch.save",
            lambda: torch.save(sd, p("pt.pt")),
            kind="saver",
            fsync_target=p("pt.pt"),
            lib_fsync="harness only (torch.save never fsyncs)",
        )
    )

    def raw_write():
        buf = state["wbuf"]
        mv = memoryview(buf.numpy()).cast("B")
        with open(p("raw.bin"), "wb", buffering=0) as f:
            off = 0
            while off < len(mv):
                off += f.write(mv[off : off + CHUNK])

    def wprep():
        if "wbuf" not in state:
            b = torch.empty(nb, dtype=torch.uint8)
            b.fill_(7)
            state["wbuf"] = b

    cs.append(
        Contender(
            "raw_write",
            "raw write of the same bytes, 1 thread",
            raw_write,
            kind="limit",
            prepare=wprep,
            fsync_target=p("raw.bin"),
            lib_fsync="harness",
            nbytes=nb,
        )
    )
    for c in cs:
        c.prepare = (lambda c=c, prev=c.prepare: (prev() if prev else None,
                                                  rm(c.fsync_target)))
        c.cleanup = (lambda c=c: rm(c.fsync_target))
    return cs


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


#: Bytes of memory cycled (mapped, written, unmapped) before every timed
#: call; 0: none. See `warm_memory`.
WARM_BYTES = 0


WARM_NOTE = ("; before each timed load as much memory as the output is "
             "cycled, untimed (`warm_memory`: this VM hands memory freed a few "
             "seconds ago back to its host)")


def warm_memory(n: int) -> None:
    """Maps `n` bytes (huge-page advised), writes every page and unmaps
    them, untimed. In a VM whose balloon reports free memory to the host
    (free page reporting; this machine's virtio_balloon does), memory freed
    more than a few seconds ago is given back, and the next program to touch
    it waits for the host to back it again: up to 5x slower first touches,
    falling on whichever contender runs after an idle or a big free. Cycling
    the memory first puts every contender on the same footing; the cold
    case is the "first load (fresh process)" column."""
    if n <= 0:
        return
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        if hasattr(mmap, "MADV_HUGEPAGE"):
            m.madvise(mmap.MADV_HUGEPAGE)
        import numpy as np

        a = np.frombuffer(m, dtype=np.uint8)
        a[::PAGE] = 1
        del a
    finally:
        m.close()


def time_once(c: Contender) -> None:
    if c.prepare:
        c.prepare()
    warm_memory(WARM_BYTES)
    gc.collect()
    try:
        t0 = time.perf_counter()
        out = c.run()
        if c.kind != "saver" and out is not None:
            touch(as_tensors(out))
        t1 = time.perf_counter()
        if c.fsync_target:
            fsync_path(c.fsync_target)
            t2 = time.perf_counter()
            c.extra.append(t2 - t1)
            c.times.append(t2 - t0)
        else:
            c.times.append(t1 - t0)
        del out
    finally:
        if c.cleanup:
            c.cleanup()
        gc.collect()


def run_all(cs: List[Contender], reps: int, warmup: int, log) -> None:
    live = [c for c in cs if c.available]
    for _ in range(warmup):
        for c in live:
            if c.error:
                continue
            try:
                time_once(c)
            except Exception as e:
                c.error = f"{type(e).__name__}: {e}"
                log(f"  {c.key}: {c.error}")
            c.times.clear()
            c.extra.clear()
    for r in range(reps):
        ok = [c for c in live if not c.error]
        order = ok[r % len(ok):] + ok[: r % len(ok)] if ok else []
        for c in order:
            try:
                time_once(c)
            except Exception as e:
                c.error = f"{type(e).__name__}: {e}"
                log(f"  {c.key}: {c.error}")
        log(f"  rep {r + 1}/{reps} done")


# ---------------------------------------------------------------------------
# Peak RSS in a subprocess
# ---------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(field + r":\s+(\d+)", f.read())
    return int(m.group(1)) if m else 0


def worker_main(args) -> None:
    pin_malloc_threshold(not args.no_mallopt)
    import_libs(args.no_rs)
    if args.torch_threads:
        LIBS["torch"].set_num_threads(args.torch_threads)
    with open(args.plan) as f:
        plan = json.load(f)
    plan = plan[args.case]
    state: dict = {}
    cs = {c.key: c for c in load_contenders(plan, state)}
    c = cs[args.worker]
    gc.collect()
    base = _status_kib("VmRSS")
    # ru_maxrss cannot be trusted here: it is max(peak of the address space,
    # the peak recorded whenever a thread exited), and importing torch
    # starts and ends threads at a ~200 MiB transient peak that nothing
    # resets. Resetting the address space's watermark (clear_refs 5) and
    # reading VmHWM gives the peak of this load alone; ru_maxrss is reported
    # beside it.
    reset = False
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        reset = True
    except OSError:
        pass
    t0 = time.perf_counter()
    out = c.run()
    touch(as_tensors(out) if out is not None else ())
    first_s = time.perf_counter() - t0
    n_out = data_bytes(as_tensors(out)) if out is not None else 0
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    hwm = _status_kib("VmHWM") if reset else 0
    print(json.dumps({"base_kib": base, "peak_kib": hwm or maxrss,
                      "ru_maxrss_kib": maxrss, "reset": reset and bool(hwm),
                      "out_bytes": n_out, "first_s": first_s}))


def measure_rss(c: Contender, args, case: str, plan_path: str) -> Optional[dict]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", c.key,
           "--case", case, "--plan", plan_path]
    if args.no_mallopt:
        cmd.append("--no-mallopt")
    if args.no_rs:
        cmd.append("--no-rs")
    if args.torch_threads:
        cmd += ["--torch-threads", str(args.torch_threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------
# Reporting
# ---------------------------------------------------------------------------


def fmt_t(s: Optional[float]) -> str:
    if s is None:
        return "—"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} µs"


def fmt_mib(b: Optional[float]) -> str:
    return "—" if b is None else f"{b / (1 << 20):+.0f} MiB" if abs(b) >= 10 << 20 \
        else f"{b / (1 << 20):+.1f} MiB"


def best(c: Contender) -> Optional[float]:
    return min(c.times) if c.times else None


def med(c: Contender) -> Optional[float]:
    return statistics.median(c.times) if c.times else None


def status_row(c: Contender, ncols: int, label: Optional[str] = None) -> str:
    msg = c.error or c.why or "skipped"
    cells = [label or c.label, f"*{msg}*"] + [""] * (ncols - 2)
    return "| " + " | ".join(cells) + " |"


def report_load(case: str, plan: dict, cs: List[Contender], rss: dict,
                touch_s: float, reps: int) -> List[str]:
    by = {c.key: c for c in cs}
    out_bytes = plan["data_bytes"]
    rs = by.get("rs")
    rs_t = best(rs) if rs and rs.times else None
    raw_t = best(by["raw_read"]) if by["raw_read"].times else None
    fresh = by.get("raw_read_fresh")
    fresh_t = best(fresh) if fresh and fresh.times else None
    big = case == "a"
    L: List[str] = []
    title = (f"### Case a: {plan['n_tensors']} bf16 tensors, "
             f"{out_bytes / (1 << 20):.1f} MiB of data" if big else
             f"### Case b: {plan['n_tensors']:,} tensors of 16 float32 "
             f"({out_bytes / 1024:.0f} KiB of data)")
    L += [title, ""]
    L.append(f"Load (best / median of {reps}, warm page cache, every page "
             f"touched{WARM_NOTE if big else ''}). \"× copy limit\": the copy "
             f"limit's time over this row's. \"× raw read\": the raw read's time over this row's "
             f"(above 1: faster than that read); \"tensorizer_rs speedup\": "
             f"this row's time over tensorizer_rs's (above 1: tensorizer_rs "
             f"is faster). Peak RSS: VmHWM of a fresh process after the "
             f"watermark is reset post-import, minus the RSS at that point, "
             f"minus the {out_bytes / (1 << 20):.1f} MiB output (a limit row: "
             f"minus its buffer).")
    L.append("")
    cl = by.get("copy_limit")
    cl_t = best(cl) if cl and cl.times else None
    if big:
        hdr = ["contender", "best", "median", "GB/s", "× copy limit",
               "× raw read (pre-faulted)", "× raw read (fresh buffer)",
               "tensorizer_rs speedup", "first load (fresh process)",
               "peak RSS − output"]
    else:
        hdr = ["contender", "best", "median", "µs / tensor",
               "over raw read, µs / tensor", "tensorizer_rs speedup",
               "peak RSS − output"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))

    # tensorizer: one row for its best num_readers
    tz = [c for c in cs if c.group == "tz" and c.times]
    tz_best = min(tz, key=best) if tz else None
    rows: List[Contender] = []
    for c in cs:
        if c.group == "tz":
            if c is tz_best or (tz_best is None and c.key == "tz1"):
                rows.append(c)
            continue
        rows.append(c)

    n = plan["n_tensors"]
    for c in rows:
        label = c.label
        if c is tz_best:
            label = f"tensorizer (best: num_readers={c.key[2:]})"
        if not c.times:
            L.append(status_row(c, len(hdr), label if c.group != "tz" else "tensorizer"))
            continue
        b, m = best(c), med(c)
        nb = c.nbytes if c.nbytes is not None else out_bytes
        r = rss.get(c.key)
        if r is None:
            rss_s = "—"
        elif "error" in r:
            rss_s = "error"
        else:
            # A loader's output is the state dict; a limit's is its buffer.
            extra = (r["peak_kib"] - r["base_kib"]) * 1024 - nb
            rss_s = fmt_mib(extra)
            if not r.get("reset"):
                rss_s += " (peak incl. imports)"
        spd = "—"
        if rs_t and c.kind != "limit":
            spd = "1.00×" if c is rs else f"{b / rs_t:.2f}×"
        if big:
            ratio = f"{raw_t / b:.2f}" if raw_t else "—"
            ratio2 = f"{fresh_t / b:.2f}" if fresh_t else "—"
            ratio_cl = f"{cl_t / b:.2f}" if cl_t else "—"
            first = fmt_t(r.get("first_s")) if r and "first_s" in r else "—"
            row = [label, fmt_t(b), fmt_t(m), f"{nb / b / 1e9:.2f}", ratio_cl,
                   ratio, ratio2, spd, first, rss_s]
        else:
            per = b / n * 1e6
            over = (b - raw_t) / n * 1e6 if raw_t else None
            if c.kind == "limit":
                per_s, over_s = "", ""
            else:
                per_s = f"{per:.2f}"
                over_s = f"{over:.2f}" if over is not None else "—"
            row = [label, fmt_t(b), fmt_t(m), per_s, over_s, spd, rss_s]
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    # tensorizer num_readers detail
    tzs = [c for c in cs if c.group == "tz"]
    if any(c.times for c in tzs):
        parts = [f"num_readers={c.key[2:]}: {fmt_t(best(c))} / {fmt_t(med(c))}"
                 for c in tzs if c.times]
        L.append("tensorizer by num_readers (best / median): " + "; ".join(parts)
                 + ". Its default for a local file is 8.")
        L.append("")
    if plan.get("tz_write_error"):
        L.append(f"tensorizer 2.12.1 cannot write this case "
                 f"({plan['tz_write_error']}: its metadata index is fixed at "
                 f"256 KiB); the file its rows read was written by "
                 f"{plan.get('tz_writer', 'nobody — rows skipped')}.")
        L.append("")
    if big and cl_t:
        parts = []
        for key, what in (("rs", "own file"), ("rs_on_tz", "tensorizer's file")):
            c = by.get(key)
            if c and c.times:
                r_first = (rss.get(key) or {}).get("first_s")
                r_cl = (rss.get("copy_limit") or {}).get("first_s")
                first = (f", first load in a fresh process {r_cl / r_first:.2f}×"
                         if r_first and r_cl else "")
                parts.append(f"{what} {cl_t / best(c):.2f}× (median {med(cl) / med(c):.2f}×{first})")
        tzc = tz_best.times if tz_best else None
        vs_tz = (f"; tensorizer_rs is {best(tz_best) / rs_t:.2f}× tensorizer's best"
                 if tzc and rs_t else "")
        L.append(f"tensorizer_rs at the copy limit (its best time over tensorizer_rs's, "
                 f"{fmt_t(cl_t)} best; 1.00× = the limit): " + "; ".join(parts) + vs_tz
                 + ". The limit copies the bytes only; tensorizer_rs's time also parses, "
                 "makes the tensors and touches every page.")
        L.append("")
    L.append(f"Page-touch pass alone over the same tensors already in memory: "
             f"{fmt_t(touch_s)} (included in every loader's time).")
    L.append("")
    return L


def report_save(plan: dict, cs: List[Contender], reps: int) -> List[str]:
    by = {c.key: c for c in cs}
    nb = plan["data_bytes"]
    rs = by.get("rs_save")
    rs_t = best(rs) if rs and rs.times else None
    raw = by.get("raw_write")
    raw_t = best(raw) if raw and raw.times else None
    L = [f"Save of the same state dict ({nb / (1 << 20):.1f} MiB), each to a "
         f"new file, then fsync of file and directory by this harness "
         f"(best / median of {reps}). \"× raw write\": raw write + fsync time "
         f"over this row's; \"tensorizer_rs speedup\": this row's time over "
         f"tensorizer_rs's.", ""]
    hdr = ["contender", "save + fsync best", "median", "of which fsync "
           "(median)", "GB/s", "× raw write", "tensorizer_rs speedup",
           "who fsyncs"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for c in cs:
        if not c.times:
            L.append(status_row(c, len(hdr)))
            continue
        b, m = best(c), med(c)
        fs = statistics.median(c.extra) if c.extra else None
        spd = "—"
        if rs_t and c.kind != "limit":
            spd = "1.00×" if c is rs else f"{b / rs_t:.2f}×"
        ratio = f"{raw_t / b:.2f}" if raw_t else "—"
        L.append("| " + " | ".join([
            c.label, fmt_t(b), fmt_t(m), fmt_t(fs), f"{nb / b / 1e9:.2f}",
            ratio, spd, c.lib_fsync]) + " |")
    L.append("")
    return L


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def fs_type(path: str) -> str:
    """Filesystem type of ``path`` from /proc/mounts (tmpfs makes fsync free)."""
    best, kind = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt, typ = parts[1], parts[2]
                p = os.path.realpath(path)
                if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, kind = mnt, typ
    except OSError:
        pass
    return kind


def find_tzr() -> Optional[str]:
    """The repository's `tzr` CLI: $TZR, PATH, or target/{release,debug}."""
    cand = [os.environ.get("TZR"), shutil.which("tzr")]
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    cand += [os.path.join(root, "target", p, "tzr") for p in ("release", "debug")]
    for c in cand:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def write_files(case: str, sd: dict, d: str, log) -> dict:
    torch = LIBS["torch"]
    paths = {}
    plan: dict = {"dir": d, "paths": paths, "case": case}
    if "tensorizer_rs" in LIBS:
        paths["rs"] = os.path.join(d, f"{case}.rs.tensors")
        t0 = time.perf_counter()
        try:
            s = LIBS["tensorizer_rs"].TensorSerializer(paths["rs"])
            s.write_state_dict(sd)
            s.close()
            log(f"  wrote {paths['rs']} in {time.perf_counter() - t0:.1f} s")
        except Exception as e:
            plan["rs_write_error"] = f"write failed: {type(e).__name__}: {e}"
            paths.pop("rs")
            log("  tensorizer_rs " + plan["rs_write_error"])
    if "safetensors.torch" in LIBS:
        paths["st"] = os.path.join(d, f"{case}.safetensors")
        LIBS["safetensors.torch"].save_file(sd, paths["st"])
    if "tensorizer" in LIBS:
        # The file tensorizer reads. tensorizer 2.12.1 reserves a fixed
        # 256 KiB metadata index and fails ("Metadata overflow") beyond
        # a few thousand tensors; then use a file it can read but not write
        # (index > 256 KiB, spec/10-extensions.md), from tensorizer_rs or
        # from the repository's `tzr convert`.
        paths["tz"] = os.path.join(d, f"{case}.tz.tensors")
        t0 = time.perf_counter()
        try:
            s = LIBS["tensorizer"].TensorSerializer(paths["tz"])
            s.write_state_dict(sd)
            s.close()
            plan["tz_writer"] = "tensorizer"
            log(f"  wrote {paths['tz']} in {time.perf_counter() - t0:.1f} s")
        except Exception as e:
            plan["tz_write_error"] = f"{type(e).__name__}: {e}"
            log(f"  tensorizer cannot write case {case}: {plan['tz_write_error']}")
            rm(paths["tz"])
            tzr = find_tzr()
            if "rs" in paths:
                shutil.copyfile(paths["rs"], paths["tz"])
                plan["tz_writer"] = "tensorizer_rs (default layout)"
            elif tzr and "st" in paths:
                r = subprocess.run([tzr, "convert", paths["st"], paths["tz"]],
                                   capture_output=True, text=True)
                if r.returncode == 0:
                    plan["tz_writer"] = f"`tzr convert` ({tzr})"
                else:
                    log(f"  tzr convert failed: {r.stderr.strip()}")
            if "tz_writer" not in plan:
                paths.pop("tz")
                plan["tz_unavailable"] = (
                    f"tensorizer cannot write it ({plan['tz_write_error']}), "
                    "and neither tensorizer_rs nor a tzr binary is available "
                    "to write a file it can read")
            else:
                log(f"  tensorizer's file written by {plan['tz_writer']}")
    paths["pt"] = os.path.join(d, f"{case}.pt")
    torch.save(sd, paths["pt"])
    if not ({"tz", "rs", "st"} & set(paths)):
        sys.exit("need tensorizer, tensorizer_rs or safetensors for the raw-read limit")
    for p in paths.values():
        read_file_once(p)  # warm the page cache
    plan["sizes"] = {k: os.path.getsize(v) for k, v in paths.items()}
    plan["data_bytes"] = data_bytes(sd.values())
    plan["n_tensors"] = len(sd)
    return plan


def main() -> None:
    global WARM_BYTES
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float,
                    default=float(os.environ.get("BENCH_GIB", "1")),
                    help="case (a) size in GiB (default 1; env BENCH_GIB)")
    ap.add_argument("--reps", type=int,
                    default=int(os.environ.get("BENCH_REPS", "5")),
                    help="timed repetitions per contender (default 5; env BENCH_REPS)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed runs per contender before timing (default 1)")
    ap.add_argument("--cases", default=os.environ.get("BENCH_CASES", "ab"),
                    help="which cases: a, b or ab (default ab; env BENCH_CASES)")
    ap.add_argument("--no-save", action="store_true", help="skip the save benchmark")
    ap.add_argument("--no-warm-memory", action="store_true",
                    help="case a: do not cycle the output's size of memory "
                    "before each timed load (see warm_memory)")
    ap.add_argument("--no-rss", action="store_true",
                    help="skip the peak-RSS subprocesses")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch.set_num_threads for parent and workers "
                         "(default: torch's choice)")
    ap.add_argument("--no-mallopt", action="store_true",
                    help="leave glibc's dynamic mmap threshold alone")
    ap.add_argument("--no-rs", action="store_true",
                    default=bool(os.environ.get("BENCH_NO_RS")),
                    help="run as if tensorizer_rs were not installed (env BENCH_NO_RS)")
    ap.add_argument("--dir", default=None,
                    help="where to write files (a fresh subdirectory is made "
                         "and removed; default: the system temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the files")
    ap.add_argument("--json", metavar="PATH", help="also write results as JSON")
    # internal: peak-RSS worker
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.no_rs:
        from bench_cold import refuse_debug_build  # (this script's directory)

        refuse_debug_build()

    if args.worker:
        worker_main(args)
        return

    pin_malloc_threshold(not args.no_mallopt)
    import_libs(args.no_rs)
    torch = LIBS["torch"]
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    cases = [c for c in "ab" if c in args.cases]
    work = tempfile.mkdtemp(prefix="tzr-bench-", dir=args.dir)
    log(f"files under {work}")
    results: dict = {"cases": {}}
    md: List[str] = []
    try:
        md += ["## bench_load.py", ""]
        md.append(
            f"Machine: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
            f"Python {platform.python_version()}, torch {torch.__version__} "
            f"({torch.get_num_threads()} intra-op threads), "
            f"tensorizer_rs {lib_version('tensorizer_rs')}, "
            f"tensorizer {lib_version('tensorizer')}, "
            f"safetensors {lib_version('safetensors.torch')}. "
            f"Files in {os.path.dirname(work)} ({fs_type(work)}). Allocator: {_MALLOC_NOTE}."
        )
        md.append("")
        if "tensorizer_rs" not in LIBS:
            md.append(f"**tensorizer_rs: not available** "
                      f"({LIB_ERR.get('tensorizer_rs')}); its rows are skipped.")
            md.append("")
        plans = {}
        plan_path = os.path.join(work, "plan.json")
        for case in cases:
            log(f"case {case}: building state dict")
            sd = make_case(case, args.gib)
            cdir = os.path.join(work, case)
            os.makedirs(cdir)
            plan = write_files(case, sd, cdir, log)
            plans[case] = plan
            with open(plan_path, "w") as f:
                json.dump(plans, f)

            touch_times = []
            for _ in range(4):
                t0 = time.perf_counter()
                touch(list(sd.values()))
                touch_times.append(time.perf_counter() - t0)
            touch_s = min(touch_times[1:])

            state: dict = {}
            cs = load_contenders(plan, state)
            log(f"case {case}: timing loads ({args.reps} reps)")
            WARM_BYTES = 0 if args.no_warm_memory or case != "a" else plan["data_bytes"] + (64 << 20)
            run_all(cs, args.reps, args.warmup, log)
            WARM_BYTES = 0
            state.clear()
            gc.collect()

            rss: dict = {}
            if not args.no_rss:
                log(f"case {case}: peak RSS, one fresh process per contender")
                for c in cs:
                    if c.available and not c.error and c.rss:
                        rss[c.key] = measure_rss(c, args, case, plan_path)
            md += report_load(case, plan, cs, rss, touch_s, args.reps)

            res = {
                "plan": {k: v for k, v in plan.items() if k != "dir"},
                "touch_s": touch_s,
                "load": {c.key: {"label": c.label, "times_s": c.times,
                                 "available": c.available, "why": c.why,
                                 "error": c.error, "rss": rss.get(c.key)}
                         for c in cs},
            }

            if case == "a" and not args.no_save:
                state = {}
                scs = save_contenders(plan, sd, state)
                log(f"case {case}: timing saves ({args.reps} reps)")
                run_all(scs, args.reps, args.warmup, log)
                state.clear()
                md += report_save(plan, scs, args.reps)
                res["save"] = {c.key: {"label": c.label, "times_s": c.times,
                                       "fsync_s": c.extra, "who_fsyncs": c.lib_fsync,
                                       "available": c.available, "error": c.error}
                               for c in scs}
            results["cases"][case] = res
            del sd
            gc.collect()
            if not args.keep:
                shutil.rmtree(cdir, ignore_errors=True)

        results["env"] = {
            "cpus": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "tensorizer_rs": lib_version("tensorizer_rs"),
            "tensorizer": lib_version("tensorizer"),
            "safetensors": lib_version("safetensors.torch"),
            "allocator": _MALLOC_NOTE, "reps": args.reps, "gib": args.gib,
        }
        print("\n".join(md))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
            log(f"wrote {args.json}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")


if __name__ == "__main__":
    main()
