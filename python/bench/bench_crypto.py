#!/usr/bin/env python3
"""Crypto benchmark: encrypted and verified loads, ciphers, hashes, Argon2id.

One run reports, best and median of ``--reps`` repetitions each, side by
side with tensorizer 2.12.1 (which uses libsodium through libnacl):

* **encrypted loads** of ``--gib`` GiB in 300 bf16 tensors (key mode):
  tensorizer's ``TensorDeserializer`` with ``DecryptionParams.from_key``
  beside tensorizer_rs's, on a file written by tensorizer and on one
  written by tensorizer_rs, for each ``--readers`` count; unencrypted loads
  of the same tensors by both for reference;
* **verified loads** (``verify_hash=True``, CRC-32 + SHA-256) by
  tensorizer_rs and tensorizer, per reader count, beside
* **single-core kernels**: libsodium's ``crypto_secretbox_open_detached``
  on 2 MiB chunks (tensorizer's chunk size), ``hashlib.sha256``; and, from
  ``cargo bench -p tensorizer-native --bench crypto`` (skip with
  ``--no-native``), our XSalsa20-Poly1305 (before: RustCrypto
  ``crypto_secretbox`` 0.1; after: the kernel picked at run time), SHA-256
  and CRC-32 on one core;
* **Argon2id** with tensorizer's default cost (libsodium MODERATE:
  opslimit 3, memlimit 256 MiB): libsodium's ``crypto_pwhash`` against
  ``tensorizer_rs._native.derive_key``, and passphrase-mode loads of a
  one-tensor file by both (one derivation each).

Page cache is warm (every file read once before timing); contenders are
interleaved within each repetition. Every page of every loaded tensor is
touched inside the timed region. Results are Markdown on stdout; progress
on stderr.

Usage::

    python python/bench/bench_crypto.py                       # 1 GiB, 5 reps
    python python/bench/bench_crypto.py --gib 0.25 --reps 3   # quick
    python python/bench/bench_crypto.py --no-native --no-kdf
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

import tensorizer as tz  # noqa: E402

try:
    import tensorizer_rs as rs  # noqa: E402
    from tensorizer_rs import _native  # noqa: E402
except ImportError:  # pragma: no cover - reported in the output
    rs = None
    _native = None

PAGE = 4096
CHUNK = 2 << 20  # tensorizer's encryption chunk
GIB = 1 << 30
MODERATE = (3, 256 << 20)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pin_malloc_threshold() -> None:
    """Fresh pages for every large tensor (as in bench_load.py)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


def touch(tensors) -> int:
    acc = 0
    for t in tensors:
        n = t.numel() * t.element_size()
        if n == 0:
            continue
        acc += int(t.reshape(-1).view(torch.uint8)[::PAGE].sum())
    return acc


def state_dict(gib: float) -> Dict[str, torch.Tensor]:
    n = 300
    each = int(gib * GIB) // n // 2
    g = torch.Generator().manual_seed(0)
    return {f"model.layers.{i}.weight": torch.randn(each, generator=g).to(torch.bfloat16) for i in range(n)}


# ---------------------------------------------------------------------------
# libsodium through ctypes (the library tensorizer loads via libnacl)
# ---------------------------------------------------------------------------


def libsodium() -> ctypes.CDLL:
    import libnacl  # tensorizer's own binding; its handle is the loaded libsodium

    # A handle of our own, so that our prototypes do not touch libnacl's.
    so = ctypes.CDLL(libnacl.nacl._name)
    so.sodium_version_string.restype = ctypes.c_char_p
    vp, ull = ctypes.c_void_p, ctypes.c_ulonglong
    so.crypto_secretbox_detached.argtypes = [vp, vp, vp, ull, ctypes.c_char_p, ctypes.c_char_p]
    so.crypto_secretbox_open_detached.argtypes = [vp, vp, vp, ull, ctypes.c_char_p, ctypes.c_char_p]
    so.crypto_pwhash.argtypes = [vp, ull, ctypes.c_char_p, ull, ctypes.c_char_p, ull, ctypes.c_size_t, ctypes.c_int]
    return so


def sodium_secretbox_open(so, total: int, reps: int) -> List[float]:
    buf = (ctypes.c_ubyte * total).from_buffer(bytearray(os.urandom(1 << 20) * (total >> 20)))
    key = os.urandom(32)
    nonce = os.urandom(24)
    chunks = total // CHUNK
    macs = [ctypes.create_string_buffer(16) for _ in range(chunks)]
    base = ctypes.addressof(buf)

    def seal() -> None:
        for i in range(chunks):
            p = base + i * CHUNK
            so.crypto_secretbox_detached(p, ctypes.addressof(macs[i]), p, CHUNK, nonce, key)

    times = []
    for _ in range(reps):
        seal()
        t = time.perf_counter()
        for i in range(chunks):
            p = base + i * CHUNK
            if so.crypto_secretbox_open_detached(p, p, ctypes.addressof(macs[i]), CHUNK, nonce, key) != 0:
                raise RuntimeError("libsodium rejected its own box")
        times.append(time.perf_counter() - t)
    return times


def sodium_pwhash(so, reps: int) -> List[float]:
    out = ctypes.create_string_buffer(32)
    pw = b"correct horse"
    salt = bytes(16)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        # alg 2 = crypto_pwhash_ALG_ARGON2ID13
        rc = so.crypto_pwhash(ctypes.addressof(out), 32, pw, len(pw), salt, MODERATE[0], MODERATE[1], 2)
        times.append(time.perf_counter() - t)
        if rc != 0:
            raise RuntimeError("crypto_pwhash failed")
    ours = _native.derive_key(pw, MODERATE[0], MODERATE[1], salt) if _native else None
    if ours is not None and bytes(ours) != out.raw:
        raise RuntimeError("tensorizer_rs derive_key differs from libsodium")
    return times


# ---------------------------------------------------------------------------
# Loads
# ---------------------------------------------------------------------------


def tz_load(path: str, **kw) -> List[torch.Tensor]:
    d = tz.TensorDeserializer(path, device="cpu", **kw)
    try:
        out = list(d.values())
        touch(out)
        return out
    finally:
        d.close()


def rs_load(path: str, **kw) -> List[torch.Tensor]:
    d = rs.TensorDeserializer(path, device="cpu", **kw)
    try:
        out = list(d.values())
        touch(out)
        return out
    finally:
        d.close()


def summary(times: List[float]) -> tuple:
    return min(times), statistics.median(times)


def row(name: str, times: List[float], nbytes: Optional[int], ref: Optional[List[float]] = None) -> str:
    best, med = summary(times)
    gbps = f"{nbytes / best / 1e9:.2f} / {nbytes / med / 1e9:.2f}" if nbytes else ""
    ratio = ""
    if ref:
        rb, rm = summary(ref)
        ratio = f"{rb / best:.2f}× / {rm / med:.2f}×"
    return f"| {name} | {best * 1e3:.1f} | {med * 1e3:.1f} | {gbps} | {ratio} |"


def native_bench(mib: int) -> List[str]:
    """Runs the Rust kernel benchmark and returns its table rows."""
    env = dict(os.environ, TZR_BENCH_MIB=str(mib), TZR_BENCH_KDF="1")
    log("cargo bench -p tensorizer-native --bench crypto ...")
    proc = subprocess.run(
        ["cargo", "bench", "-q", "-p", "tensorizer-native", "--bench", "crypto"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return [f"| native bench failed: {proc.stderr.strip().splitlines()[-1:]} | | | | |"]
    return [ln for ln in proc.stdout.splitlines() if ln.startswith("| ") and not ln.startswith("| measurement")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0, help="size of the encrypted state dict (default 1)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--readers", type=str, default=None, help="comma-separated reader counts (default 1,<cores>)")
    ap.add_argument("--dir", default=None, help="directory for the files (default: a temp dir)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--no-native", action="store_true", help="skip the cargo bench rows")
    ap.add_argument("--no-kdf", action="store_true", help="skip Argon2id")
    ap.add_argument("--native-mib", type=int, default=256, help="load size for the native bench (default 256)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if rs is None:
        log("tensorizer_rs is not importable; build it with maturin develop first")
        return 2
    pin_malloc_threshold()
    cores = os.cpu_count() or 1
    readers = [int(x) for x in args.readers.split(",")] if args.readers else sorted({1, cores})
    so = libsodium()
    workdir = args.dir or tempfile.mkdtemp(prefix="tzr-crypto-bench-")
    os.makedirs(workdir, exist_ok=True)
    results: Dict[str, List[float]] = {}
    lines: List[str] = []
    try:
        log(f"building a {args.gib} GiB state dict ...")
        sd = state_dict(args.gib)
        nbytes = sum(t.numel() * t.element_size() for t in sd.values())
        key = os.urandom(32)
        paths = {
            "tz_enc": os.path.join(workdir, "tz.enc.tensors"),
            "rs_enc": os.path.join(workdir, "rs.enc.tensors"),
            "tz_plain": os.path.join(workdir, "tz.tensors"),
            "rs_plain": os.path.join(workdir, "rs.tensors"),
        }
        log("writing files ...")
        s = tz.TensorSerializer(paths["tz_enc"], encryption=tz.EncryptionParams(key))
        s.write_state_dict(sd)
        s.close()
        s = tz.TensorSerializer(paths["tz_plain"])
        s.write_state_dict(sd)
        s.close()
        s = rs.TensorSerializer(paths["rs_enc"], encryption=rs.EncryptionParams(key))
        s.write_state_dict(sd)
        s.close()
        s = rs.TensorSerializer(paths["rs_plain"])
        s.write_state_dict(sd)
        s.close()
        del sd
        gc.collect()
        for p in paths.values():
            with open(p, "rb") as f:
                while f.read(64 << 20):
                    pass

        contenders: Dict[str, Callable[[], object]] = {}
        for n in readers:
            tzk = lambda: tz.DecryptionParams.from_key(key)  # noqa: E731
            rsk = lambda: rs.DecryptionParams.from_key(key)  # noqa: E731
            contenders[f"tensorizer, encrypted (its file), {n} readers"] = (
                lambda n=n: tz_load(paths["tz_enc"], num_readers=n, encryption=tzk())
            )
            contenders[f"tensorizer_rs, encrypted (tensorizer's file), {n} readers"] = (
                lambda n=n: rs_load(paths["tz_enc"], num_readers=n, encryption=rsk())
            )
            contenders[f"tensorizer_rs, encrypted (its file), {n} readers"] = (
                lambda n=n: rs_load(paths["rs_enc"], num_readers=n, encryption=rsk())
            )
            contenders[f"tensorizer, plain, {n} readers"] = lambda n=n: tz_load(paths["tz_plain"], num_readers=n)
            contenders[f"tensorizer_rs, plain, {n} readers"] = lambda n=n: rs_load(paths["rs_plain"], num_readers=n)
            contenders[f"tensorizer, verified, {n} readers"] = (
                lambda n=n: tz_load(paths["tz_plain"], num_readers=n, verify_hash=True)
            )
            contenders[f"tensorizer_rs, verified, {n} readers"] = (
                lambda n=n: rs_load(paths["rs_plain"], num_readers=n, verify_hash=True)
            )
        names = list(contenders)
        log("warming up ...")
        for name in names:
            contenders[name]()
            gc.collect()
        times: Dict[str, List[float]] = {name: [] for name in names}
        for rep in range(args.reps):
            log(f"rep {rep + 1}/{args.reps}")
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                gc.collect()
                t = time.perf_counter()
                out = contenders[name]()
                times[name].append(time.perf_counter() - t)
                del out
        results.update(times)

        log("single-core kernels ...")
        kernel_bytes = 256 << 20
        sodium = sodium_secretbox_open(so, kernel_bytes, args.reps)
        results["libsodium secretbox_open"] = sodium
        data = os.urandom(1 << 20) * (kernel_bytes >> 20)
        sha = []
        for _ in range(args.reps):
            t = time.perf_counter()
            import hashlib

            hashlib.sha256(data).digest()
            sha.append(time.perf_counter() - t)
        results["hashlib sha256"] = sha
        del data

        kdf: Dict[str, List[float]] = {}
        if not args.no_kdf:
            log("Argon2id ...")
            kdf_reps = max(3, args.reps // 2)
            kdf["libsodium crypto_pwhash"] = sodium_pwhash(so, kdf_reps)
            ours = []
            for _ in range(kdf_reps):
                t = time.perf_counter()
                _native.derive_key(b"correct horse", MODERATE[0], MODERATE[1], bytes(16))
                ours.append(time.perf_counter() - t)
            kdf["tensorizer_rs derive_key"] = ours
            one = {"w": torch.ones(1024)}
            pp = os.path.join(workdir, "pass.tensors")
            s = tz.TensorSerializer(pp, encryption=tz.EncryptionParams.from_string("correct horse"))
            s.write_state_dict(one)
            s.close()
            kdf["tensorizer, passphrase load (1 tensor)"] = []
            kdf["tensorizer_rs, passphrase load (1 tensor)"] = []
            for _ in range(kdf_reps):
                t = time.perf_counter()
                tz_load(pp, encryption=tz.DecryptionParams.from_string("correct horse"))
                kdf["tensorizer, passphrase load (1 tensor)"].append(time.perf_counter() - t)
                t = time.perf_counter()
                rs_load(pp, encryption=rs.DecryptionParams.from_string("correct horse"))
                kdf["tensorizer_rs, passphrase load (1 tensor)"].append(time.perf_counter() - t)
            results.update(kdf)

        native_rows = [] if args.no_native else native_bench(args.native_mib)

        # ------------------------------------------------------------------
        cpu = "?"
        try:
            with open("/proc/cpuinfo") as f:
                m = re.search(r"model name\s*:\s*(.*)", f.read())
                cpu = m.group(1) if m else cpu
        except OSError:
            pass
        flags = ""
        try:
            with open("/proc/cpuinfo") as f:
                fl = re.search(r"flags\s*:\s*(.*)", f.read())
                have = set(fl.group(1).split()) if fl else set()
                flags = ", ".join(x for x in ("avx2", "avx512f", "sha_ni") if x in have)
        except OSError:
            pass
        lines.append(
            f"## Crypto: {nbytes / GIB:.2f} GiB, {args.reps} reps (best / median), {cores} cores ({cpu}; {flags}), "
            f"libsodium {so.sodium_version_string().decode()}, tensorizer {tz.__version__}, Python {platform.python_version()}"
        )
        lines.append("")
        lines.append("| measurement | best ms | median ms | GB/s best / median | vs tensorizer (best / median) |")
        lines.append("|---|---|---|---|---|")
        for n in readers:
            ref = times[f"tensorizer, encrypted (its file), {n} readers"]
            for name in names:
                if not name.endswith(f", {n} readers"):
                    continue
                if "encrypted" in name:
                    r = ref
                elif "plain" in name:
                    r = times[f"tensorizer, plain, {n} readers"]
                else:
                    r = times[f"tensorizer, verified, {n} readers"]
                lines.append(row(name, times[name], nbytes, None if name.startswith("tensorizer,") else r))
        lines.append(row("libsodium crypto_secretbox_open_detached, 2 MiB chunks, 1 core", sodium, kernel_bytes))
        lines.append(row("hashlib.sha256, 1 core", sha, kernel_bytes))
        sha_speed = kernel_bytes / min(sha)
        for n in readers:
            v = min(times[f"tensorizer_rs, verified, {n} readers"])
            p = min(times[f"tensorizer_rs, plain, {n} readers"])
            per_reader = nbytes / v / n
            lines.append(
                f"| tensorizer_rs verified load, GB/s per reader ({n} readers) vs hashlib SHA-256 on 1 core | | | "
                f"{per_reader / 1e9:.2f} | {per_reader / sha_speed:.2f}× |"
            )
            if v > p:
                hashing = nbytes / (v - p) / n
                lines.append(
                    f"| tensorizer_rs hashing inside the verified load (bytes / (verified − plain) / readers), "
                    f"{n} readers, vs hashlib SHA-256 | | | {hashing / 1e9:.2f} | {hashing / sha_speed:.2f}× |"
                )
        if kdf:
            ref = kdf["libsodium crypto_pwhash"]
            for name, t in kdf.items():
                lines.append(row(f"Argon2id MODERATE: {name}", t, None, None if name.startswith(("libsodium", "tensorizer,")) else ref))
            lines.append(
                row(
                    "passphrase load, tensorizer_rs vs tensorizer",
                    kdf["tensorizer_rs, passphrase load (1 tensor)"],
                    None,
                    kdf["tensorizer, passphrase load (1 tensor)"],
                )
            )
        if native_rows:
            lines.append("")
            lines.append(
                f"Rust kernels, one core (`cargo bench -p tensorizer-native --bench crypto`, "
                f"TZR_BENCH_MIB={args.native_mib}):"
            )
            lines.append("")
            lines.append("| measurement | best | median | GB/s best | GB/s median |")
            lines.append("|---|---|---|---|---|")
            lines.extend(native_rows)
        print("\n".join(lines))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"results": results, "native": native_rows, "readers": readers}, f, indent=1)
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
