#!/usr/bin/env python3
"""Generate the committed tensorizer test vectors for tensorizer-rs.

Every ``*.tensors`` file in this directory is written by the real Python
``tensorizer`` package (pinned to 2.12.1, with torch 2.15.0) through its
public API only: ``TensorSerializer.write_state_dict`` / ``write_module`` /
``write_tensor`` / ``close`` and ``EncryptionParams``.

For every vector the script then:

1. parses the file with the small independent reader in this script (it
   follows the byte layout in ``spec/`` and imports nothing from tensorizer;
   it decrypts with libsodium through ``libnacl``), checks every offset,
   CRC32, SHA-256 and MAC, and compares names, dtypes, shapes and data bytes
   with the tensors that were written;
2. loads the file back with tensorizer's own ``TensorDeserializer``
   (``verify_hash=True``, with the right ``DecryptionParams``) and compares
   the result again, except for the quirk vectors that tensorizer itself
   cannot read (for those, the read error is checked and recorded);
3. records everything in ``manifest.json``.

All output is produced in a temporary directory first and moved into place
only when every check passed, so a failed run never leaves half a set.

Usage: ``python generate.py [--out DIR]`` (``regenerate.sh`` does this), or
``python generate.py --verify`` to check the existing files against the manifest.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import shutil
import struct
import sys
import tempfile
import warnings
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

import tensorizer
from tensorizer import (
    DecryptionParams,
    EncryptionParams,
    TensorDeserializer,
    TensorSerializer,
    TensorType,
)

# libnacl is a dependency of tensorizer (it loads libsodium); the independent
# parser below uses it only for crypto_secretbox_open_easy.
import libnacl

# torch warns when complex32 and quantized tensors are created; expected here.
warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")
warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor")

PINNED_TENSORIZER = "2.12.1"
PINNED_TORCH = "2.15.0"

# ---------------------------------------------------------------------------
# Test-only secrets. They protect nothing; they are published on purpose.
# ---------------------------------------------------------------------------
TEST_KEY = bytes(range(32))  # 00 01 02 ... 1f
TEST_PASSPHRASE = "test-passphrase-not-secret"
TEST_SALT = bytes(range(0x20, 0x30))  # 16 fixed bytes: 20 21 ... 2f
ARGON2_OPSLIMIT = 1  # libsodium OPSLIMIT_MIN
ARGON2_MEMLIMIT = 8192  # libsodium MEMLIMIT_MIN (bytes)

MAGIC = b"|TZR|"
LONG_DIM = 2**32  # smallest dimension that needs data version 5


# ---------------------------------------------------------------------------
# Helpers on torch tensors
# ---------------------------------------------------------------------------
def raw_bytes(t: torch.Tensor) -> bytes:
    """The bytes tensorizer stores for ``t``: C-contiguous elements in host
    order (b"" for meta tensors)."""
    if t.is_meta:
        return b""
    flat = t.detach().cpu().contiguous().reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return flat.numpy().tobytes()


def empty_of(dtype: torch.dtype) -> torch.Tensor:
    """A 0-element CPU tensor of ``dtype`` (works for sub-byte dtypes too)."""
    try:
        return torch.empty(0, dtype=dtype)
    except Exception:  # some bit/sub-byte dtypes cannot be allocated directly
        return torch.empty(0, dtype=torch.uint8).view(dtype)


def expected_dtype_string(dtype: torch.dtype) -> str:
    """Mirror of how tensorizer labels a dtype (format doc §6).

    Plain dtypes use numpy's ``dtype.str``. Dtypes numpy cannot represent are
    "opaque": the signed int of the same size with ``i`` replaced by ``V``,
    then a NUL, then ``str(torch_dtype)``.
    """
    t = empty_of(dtype)
    try:
        return t.numpy().dtype.str
    except TypeError:
        pass
    signed = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[t.element_size()]
    return np.dtype(signed).str.replace("i", "V") + "\0" + str(dtype)


def element_size_of_dtype_string(dtype: str) -> int:
    """Element size from a stored dtype string (the part before any NUL)."""
    return np.dtype(dtype.split("\0", 1)[0]).itemsize


# ---------------------------------------------------------------------------
# Vector descriptions
# ---------------------------------------------------------------------------
@dataclasses.dataclass
class Expected:
    """One tensor as it is expected to appear in the file, in file order."""

    path: Tuple[Any, ...]  # tensor path components (str or int)
    tensor_type: int
    module_index: int
    tensor: torch.Tensor  # original tensor (may be meta)
    data: bytes = b""  # snapshot of raw_bytes(tensor) taken before writing

    def __post_init__(self):
        self.data = raw_bytes(self.tensor)


@dataclasses.dataclass
class Vector:
    file: str
    description: str
    writer: str  # which API call(s) produced the file
    write: Callable[[TensorSerializer], None]
    expected: List[Expected]
    data_version: int
    feature_flags: int = 0
    encryption: Optional[str] = None  # None, "key" or "passphrase"
    tensorizer_can_read: bool = True
    notes: List[str] = dataclasses.field(default_factory=list)
    # Filled in while generating:
    read_error: Optional[str] = None


def state_dict_expected(obj: Any) -> List[Expected]:
    """Depth-first flattening of a state dict, in the order write_state_dict
    uses (mappings in insertion order, sequences by index)."""
    out: List[Expected] = []

    def walk(prefix: Tuple[Any, ...], node: Any) -> None:
        if isinstance(node, torch.Tensor):
            out.append(Expected(prefix, int(TensorType.STATE_DICT), 0, node))
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(prefix + (k,), v)
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(prefix + (i,), v)
        else:
            raise TypeError(f"unexpected node {type(node)!r}")

    walk((), obj)
    return out


def module_expected(m: torch.nn.Module) -> List[Expected]:
    """The order write_module uses: for each module (index = position in
    named_modules()), its own parameters, then its own buffers."""
    out: List[Expected] = []
    for idx, (mname, mod) in enumerate(m.named_modules()):
        for n, p in mod.named_parameters(recurse=False):
            out.append(Expected((f"{mname}.{n}",), int(TensorType.PARAM), idx, p))
        for n, b in mod.named_buffers(recurse=False):
            out.append(Expected((f"{mname}.{n}",), int(TensorType.BUFFER), idx, b))
    return out


def serialize_path(path: Sequence[Any]) -> bytes:
    """Name bytes for a tensor path (format doc §5.1)."""
    if len(path) == 1 and isinstance(path[0], str):
        return path[0].encode("utf-8")
    return b"\x1e" + json.dumps(
        list(path), indent=None, ensure_ascii=True, separators=(",", ":")
    ).encode("ascii")


# ---------------------------------------------------------------------------
# Independent parser (format doc §14). Imports nothing from tensorizer.
# ---------------------------------------------------------------------------
class ParseError(Exception):
    pass


class Reader:
    """Little-endian cursor over a bytes object with bounds checks."""

    def __init__(self, buf: bytes, pos: int = 0, end: Optional[int] = None):
        self.buf, self.pos = buf, pos
        self.end = len(buf) if end is None else end

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.end:
            raise ParseError(f"read of {n} bytes at {self.pos} past {self.end}")
        b = self.buf[self.pos : self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str) -> Tuple[Any, ...]:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def u8(self) -> int:
        return self.unpack("B")[0]

    def u16(self) -> int:
        return self.unpack("H")[0]

    def u32(self) -> int:
        return self.unpack("I")[0]

    def u64(self) -> int:
        return self.unpack("Q")[0]


def nonce_add(nonce: bytes, i: int) -> bytes:
    """24-byte little-endian counter addition (libsodium sodium_increment)."""
    return ((int.from_bytes(nonce, "little") + i) % (1 << 192)).to_bytes(24, "little")


def parse_crypt_info(buf: bytes) -> Dict[str, Any]:
    r = Reader(buf)
    info: Dict[str, Any] = {"kdf": None, "xsalsa20": None, "chunk_types": []}
    for _ in range(r.u16()):
        clen = r.u64()
        chunk = Reader(r.take(clen))
        ctype = chunk.u16()
        info["chunk_types"].append(ctype)
        if ctype == 1:  # key derivation
            method = chunk.u16()
            if method != 1:
                raise ParseError(f"unknown key derivation method {method}")
            ops, mem = chunk.unpack("QQ")
            (alg,) = chunk.unpack("i")
            salt = chunk.take(chunk.u16())
            info["kdf"] = {"opslimit": ops, "memlimit": mem, "alg": alg, "salt": salt}
        elif ctype == 2:  # XSalsa20 parallel
            chunk_size = chunk.u64()
            nonce = chunk.take(24)
            macs = [chunk.take(16) for _ in range(chunk.u64())]
            info["xsalsa20"] = {"chunk_size": chunk_size, "nonce": nonce, "macs": macs}
        else:
            raise ParseError(f"unexpected CryptInfo chunk type {ctype}")
        if chunk.pos != chunk.end:
            raise ParseError("trailing bytes in CryptInfo chunk")
    if r.pos != r.end:
        raise ParseError("trailing bytes in CryptInfo")
    return info


def parse_file(path: str, key: Optional[bytes], strict: bool = True) -> Dict[str, Any]:
    """Parse and fully verify a .tensors file. Returns header fields and a
    list of per-tensor dicts, each with the decrypted plaintext data.
    ``strict=False`` skips the CRC32/SHA-256 comparisons and the check of the
    file header's tensor_size total (for the meta-scalar writer bug)."""
    buf = open(path, "rb").read()
    r = Reader(buf)
    if r.take(5) != MAGIC:
        raise ParseError("bad magic")
    version = r.u32()
    if not 1 <= version <= 5:
        raise ParseError(f"unsupported version {version}")
    flags = int.from_bytes(r.take(32), "little")
    tensor_size, _pad, count = r.unpack("Q8sQ")
    if flags >= 4:
        raise ParseError(f"unknown feature flags {flags}")
    has_crypt = version == 3 or (version >= 4 and bool(flags & 1))
    versioned = bool(flags & 2)
    if versioned and version < 5:
        raise ParseError("versioned_headers flag below version 5")
    meta_len = r.u64()
    meta_start = r.pos
    meta = Reader(buf, meta_start, meta_start + meta_len)
    r.take(meta_len)

    entries = []
    for _ in range(count):
        tag = meta.u32() if versioned else None
        if tag not in (None, 1, 5):
            raise ParseError(f"bad metadata version tag {tag}")
        dim_fmt = "Q" if tag == 5 else "I"
        name = meta.take(meta.u16())
        ttype = meta.u8()
        dtype = meta.take(meta.u8()).decode("utf-8")
        ndim = meta.u8()
        shape = list(meta.unpack(dim_fmt * ndim))
        hoff, doff, dlen = meta.unpack("QQQ")
        entries.append(dict(tag=tag, dim_fmt=dim_fmt, name=name, tensor_type=ttype,
                            dtype=dtype, shape=shape, header_offset=hoff,
                            data_offset=doff, data_length=dlen))
    if any(buf[meta.pos : meta_start + meta_len]):
        raise ParseError("non-zero bytes in unused metadata tail")

    expected_pos = meta_start + meta_len  # entries must be contiguous
    for e in entries:
        if e["header_offset"] != expected_pos:
            raise ParseError(f"{e['name']!r}: header not at {expected_pos}")
        h = Reader(buf, e["header_offset"])
        hsize = h.u64()
        hbuf = bytearray(buf[e["header_offset"] : e["header_offset"] + hsize])
        h = Reader(bytes(hbuf), 8)
        module_index = h.u16()
        ttype = h.u8()
        name = h.take(h.u16())
        dtype = h.take(h.u8()).decode("utf-8")
        ndim = h.u8()
        shape = list(h.unpack(e["dim_fmt"] * ndim))
        if (name, ttype, dtype, shape) != (e["name"], e["tensor_type"], e["dtype"], e["shape"]):
            raise ParseError(f"{name!r}: header disagrees with metadata")
        # Hash block: remember each value's position so it can be zeroed.
        block_len = h.u16()
        block = Reader(h.buf, h.pos, h.pos + block_len)
        hashes: Dict[int, Tuple[int, bytes]] = {}
        for _ in range(block.u8()):
            htype, hlen = block.u8(), block.u8()
            hashes[htype] = (block.pos, block.take(hlen))
        h.take(block_len)
        crypt = None
        crypt_region = (0, 0)
        if has_crypt:
            c = h.pos
            crypt = parse_crypt_info(h.take(h.u64()))
            crypt_region = (c, h.pos)
        if h.pos != hsize - 8:
            raise ParseError(f"{name!r}: {hsize - 8 - h.pos} unparsed header bytes")
        (data_length,) = struct.unpack_from("<q", hbuf, hsize - 8)
        if e["data_offset"] != e["header_offset"] + hsize:
            raise ParseError(f"{name!r}: data offset mismatch")
        if data_length != e["data_length"]:
            raise ParseError(f"{name!r}: data length mismatch")
        stored = buf[e["data_offset"] : e["data_offset"] + data_length]
        if len(stored) != data_length:
            raise ParseError(f"{name!r}: truncated data")
        expected_pos = e["data_offset"] + data_length

        # Decrypt (each 2 MiB chunk has its own MAC and nonce = initial + i).
        plain = stored
        xs = crypt["xsalsa20"] if crypt else None
        if xs is not None and data_length > 0:
            if key is None:
                raise ParseError("encrypted tensor but no key")
            cs = xs["chunk_size"]
            n = -(-data_length // cs)
            if n != len(xs["macs"]):
                raise ParseError(f"{name!r}: {len(xs['macs'])} MACs for {n} chunks")
            plain = b"".join(
                libnacl.crypto_secretbox_open_easy(
                    mac + stored[i * cs : (i + 1) * cs], nonce_add(xs["nonce"], i), key
                )
                for i, mac in enumerate(xs["macs"])
            )

        # Hashes cover the header with hash values zeroed, minus the crypt
        # region, followed by the plaintext data.
        for pos, value in hashes.values():
            hbuf[pos : pos + len(value)] = bytes(len(value))
        hashable = bytes(hbuf[: crypt_region[0]] + hbuf[crypt_region[1] :]) if has_crypt else bytes(hbuf)
        if 0 in hashes and strict:
            (crc,) = struct.unpack("<I", hashes[0][1])
            if zlib.crc32(plain, zlib.crc32(hashable)) != crc:
                raise ParseError(f"{name!r}: CRC32 mismatch")
        if 1 in hashes and strict:
            if hashlib.sha256(hashable + plain).digest() != hashes[1][1]:
                raise ParseError(f"{name!r}: SHA-256 mismatch")
        e.update(module_index=module_index, header_size=hsize, plaintext=plain,
                 crc32=struct.unpack("<I", hashes[0][1])[0] if 0 in hashes else None,
                 header_sha256=hashes[1][1].hex() if 1 in hashes else None,
                 crypt=crypt)
    if strict and sum(e["data_length"] for e in entries) != tensor_size:
        raise ParseError("file header tensor_size mismatch")
    if buf[expected_pos:] != bytes(8):
        raise ParseError("file does not end with exactly the 8-byte end marker")
    return dict(version=version, flags=flags, count=count, tensor_size=tensor_size,
                metadata_length=meta_len, entries=entries, size=len(buf),
                sha256=hashlib.sha256(buf).hexdigest())


def path_of_name(name: bytes) -> List[Any]:
    if name.startswith(b"\x1e"):
        return json.loads(name[1:].decode("ascii"))
    return [name.decode("utf-8")]


# ---------------------------------------------------------------------------
# Encryption parameters
# ---------------------------------------------------------------------------
def encryption_params(kind: Optional[str]) -> Optional[EncryptionParams]:
    if kind is None:
        return None
    if kind == "key":
        return EncryptionParams(TEST_KEY)
    return EncryptionParams.from_string(
        TEST_PASSPHRASE, opslimit=ARGON2_OPSLIMIT, memlimit=ARGON2_MEMLIMIT, salt=TEST_SALT
    )


def decryption_params(kind: Optional[str]) -> Optional[DecryptionParams]:
    if kind is None:
        return None
    if kind == "key":
        return DecryptionParams.from_key(TEST_KEY)
    return DecryptionParams.from_string(TEST_PASSPHRASE)


def derived_passphrase_key() -> bytes:
    """The Argon2id key libsodium derives from the test passphrase."""
    return bytes(encryption_params("passphrase").key)


def key_for(kind: Optional[str]) -> Optional[bytes]:
    return {None: None, "key": TEST_KEY, "passphrase": derived_passphrase_key()}[kind]


def encryption_manifest(kind: Optional[str]) -> Optional[Dict[str, Any]]:
    if kind is None:
        return None
    if kind == "key":
        return {"key_hex": TEST_KEY.hex()}
    return {
        "passphrase": TEST_PASSPHRASE,
        "opslimit": ARGON2_OPSLIMIT,
        "memlimit": ARGON2_MEMLIMIT,
        "salt_hex": TEST_SALT.hex(),
        "derived_key_hex": derived_passphrase_key().hex(),
    }


# ---------------------------------------------------------------------------
# Writing and checking one vector
# ---------------------------------------------------------------------------
def write_vector(path: str, write: Callable[[TensorSerializer], None],
                 encryption: Optional[str]) -> None:
    s = TensorSerializer(path, encryption=encryption_params(encryption))
    write(s)
    s.close()


def same_tensor(got: torch.Tensor, exp: Expected) -> bool:
    """dtype, shape and raw bytes equal; meta tensors must load as zeros."""
    got = got.detach()
    if got.dtype != exp.tensor.dtype or tuple(got.shape) != tuple(exp.tensor.shape):
        return False
    if exp.tensor.is_meta:
        return not bool(got.contiguous().reshape(-1).view(torch.uint8).any())
    return raw_bytes(got) == exp.data


def tensorizer_read_back(path: str, vec: Vector) -> None:
    """Load with tensorizer itself and compare, in file order."""
    with TensorDeserializer(path, device="cpu", lazy_load=True, verify_hash=True,
                            encryption=decryption_params(vec.encryption)) as d:
        got = list(d.read_tensors(verify_hash=True))
    if len(got) != len(vec.expected):
        raise AssertionError(f"{vec.file}: tensorizer read {len(got)} tensors")
    for (idx, ttype, name, tensor), exp in zip(got, vec.expected):
        want_name = exp.path[0] if len(exp.path) == 1 and isinstance(exp.path[0], str) else exp.path
        if (idx, int(ttype), name) != (exp.module_index, exp.tensor_type, want_name):
            raise AssertionError(f"{vec.file}: got {(idx, ttype, name)!r}, want {exp.path!r}")
        if not same_tensor(tensor, exp):
            raise AssertionError(f"{vec.file}: tensor {name!r} differs after tensorizer load")


def describe_entry(e: Dict[str, Any]) -> Dict[str, Any]:
    """Manifest entry for one tensor parsed by parse_file()."""
    needed = element_size_of_dtype_string(e["dtype"]) * int(np.prod(e["shape"], dtype=object))
    xs = e["crypt"]["xsalsa20"] if e["crypt"] else None
    return {
        "name": e["name"].decode("utf-8"),
        "path": path_of_name(e["name"]),
        "tensor_type": e["tensor_type"],
        "module_index": e["module_index"],
        "dtype": e["dtype"],
        "shape": e["shape"],
        "long_shape": e["tag"] == 5,
        "is_meta": e["data_length"] == 0 and needed > 0,
        "data_length": e["data_length"],
        "deserialized_length": needed,
        "sha256": hashlib.sha256(e["plaintext"]).hexdigest(),
        "header_offset": e["header_offset"],
        "header_size": e["header_size"],
        "data_offset": e["data_offset"],
        "stored_crc32": e["crc32"],
        "stored_sha256": e["header_sha256"],
        "crypt_chunk_types": e["crypt"]["chunk_types"] if e["crypt"] else None,
        "num_macs": len(xs["macs"]) if xs else None,
    }


def check_and_describe(path: str, vec: Vector) -> Dict[str, Any]:
    """Verify a written vector both ways and build its manifest entry."""
    parsed = parse_file(path, key_for(vec.encryption))
    if parsed["version"] != vec.data_version:
        raise AssertionError(f"{vec.file}: version {parsed['version']}, want {vec.data_version}")
    if parsed["flags"] != vec.feature_flags:
        raise AssertionError(f"{vec.file}: flags {parsed['flags']}, want {vec.feature_flags}")
    if len(parsed["entries"]) != len(vec.expected):
        raise AssertionError(f"{vec.file}: {len(parsed['entries'])} entries parsed")

    tensors = []
    for e, exp in zip(parsed["entries"], vec.expected):
        t = exp.tensor
        checks = {
            "name": e["name"] == serialize_path(exp.path),
            "path": path_of_name(e["name"]) == list(exp.path),
            "type": e["tensor_type"] == exp.tensor_type,
            "module index": e["module_index"] == exp.module_index,
            "dtype": e["dtype"] == expected_dtype_string(t.dtype),
            "shape": e["shape"] == list(t.shape),
            "data": e["plaintext"] == exp.data,
            "data length": e["data_length"] == len(exp.data),
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise AssertionError(f"{vec.file}: {exp.path!r}: mismatch in {', '.join(bad)}")
        entry = describe_entry(e)
        if entry["is_meta"] != t.is_meta:
            raise AssertionError(f"{vec.file}: {exp.path!r}: meta flag mismatch")
        tensors.append(entry)

    if vec.encryption == "passphrase":
        # Every tensor with data must carry the Argon2id (alg 2) KDF chunk.
        want_kdf = {"opslimit": ARGON2_OPSLIMIT, "memlimit": ARGON2_MEMLIMIT, "alg": 2,
                    "salt": TEST_SALT}
        for e in parsed["entries"]:
            if e["data_length"] and e["crypt"]["kdf"] != want_kdf:
                raise AssertionError(f"{vec.file}: unexpected KDF chunk {e['crypt']['kdf']}")

    if vec.tensorizer_can_read:
        tensorizer_read_back(path, vec)
    else:
        try:
            tensorizer_read_back(path, vec)
        except Exception as exc:  # expected: this is a quirk vector
            vec.read_error = f"{type(exc).__name__}: {exc}"
        else:
            raise AssertionError(f"{vec.file}: expected tensorizer to fail reading it")

    return {
        "file": vec.file,
        "description": vec.description,
        "writer": vec.writer,
        "data_version": parsed["version"],
        "feature_flags": parsed["flags"],
        "encryption": encryption_manifest(vec.encryption),
        "tensorizer_can_read": vec.tensorizer_can_read,
        "tensorizer_read_error": vec.read_error,
        "byte_stable": vec.encryption is None,
        "size": parsed["size"],
        "sha256": parsed["sha256"],
        "tensor_count": parsed["count"],
        "tensor_data_bytes": parsed["tensor_size"],
        "metadata_index_length": parsed["metadata_length"],
        "notes": vec.notes,
        "tensors": tensors,
    }


# ---------------------------------------------------------------------------
# Trials: cases tensorizer may refuse. Each is written and read back alone.
# ---------------------------------------------------------------------------
def trial(tmpdir: str, state_dict: Dict[str, Any], encryption: Optional[str] = None) -> Optional[str]:
    """Return None if ``state_dict`` round-trips through tensorizer, else the
    error text (prefixed with the stage that failed)."""
    path = os.path.join(tmpdir, "trial.tensors")
    expected = state_dict_expected(state_dict)
    try:
        write_vector(path, lambda s: s.write_state_dict(state_dict), encryption)
    except Exception as exc:
        return f"write: {type(exc).__name__}: {exc}"
    try:
        vec = Vector("trial", "", "", lambda s: None, expected, 0, encryption=encryption)
        tensorizer_read_back(path, vec)
    except Exception as exc:
        return f"read: {type(exc).__name__}: {exc}"
    finally:
        os.remove(path)
    return None


# ---------------------------------------------------------------------------
# The vectors
# ---------------------------------------------------------------------------
def meta(shape, dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def sd_vector(file, description, sd, version, **kw) -> Vector:
    return Vector(file, description, "write_state_dict", lambda s: s.write_state_dict(sd),
                  state_dict_expected(sd), version, **kw)


def v1_flat() -> Vector:
    torch.manual_seed(1)
    sd = {
        "f32_2x3": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "i64": torch.tensor([-(2**63), -1, 0, 1, 2**63 - 1], dtype=torch.int64),
        "f64": torch.tensor([0.0, -0.0, 1.0 / 3.0, float("inf"), float("nan")], dtype=torch.float64),
        "f16": torch.tensor([1.0, -2.5, 65504.0, 6.1e-5], dtype=torch.float16),
        "u8": torch.tensor([0, 1, 127, 128, 255], dtype=torch.uint8),
        "i8": torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8),
        "i16": torch.tensor([-32768, -1, 0, 32767], dtype=torch.int16),
        "i32": torch.tensor([[-(2**31), 0], [1, 2**31 - 1]], dtype=torch.int32),
        "bool": torch.tensor([True, False, True, True, False]),
        "scalar_f32": torch.tensor(3.5, dtype=torch.float32),
        "empty_f32": torch.empty(0, dtype=torch.float32),
        "empty_i64_2x0": torch.empty((2, 0), dtype=torch.int64),
        # Non-contiguous views are stored in C order of the view.
        "transposed_3x2": torch.arange(6, dtype=torch.float32).reshape(2, 3).t(),
        "strided_every_2nd": torch.arange(10, dtype=torch.int32)[::2],
        "randn_4x4": torch.randn(4, 4),
    }
    return sd_vector("v1_flat.tensors", "Flat state dict: plain names, common numpy dtypes, "
                     "a scalar, 0-element tensors and non-contiguous views.", sd, 1)


def v1_nested() -> Vector:
    torch.manual_seed(2)
    sd = {
        "model": {
            "layers": [
                {"w": torch.randn(3, 2), "b": torch.zeros(3)},
                {"w": torch.randn(2, 3), "b": torch.ones(2)},
            ],
            "emb": torch.arange(8, dtype=torch.int64).reshape(4, 2),
        },
        "extra": [torch.tensor([1, 2], dtype=torch.int16), torch.tensor(7.0)],
    }
    return sd_vector("v1_nested.tensors", "Nested dict + list state dict: structured "
                     "(\\x1e + JSON) tensor paths.", sd, 1)


def v1_list() -> Vector:
    # 11 entries so that index 10 sorts after 9 only if indices are compared
    # as integers.
    sd = [torch.full((i % 3 + 1,), float(i), dtype=torch.float32) for i in range(11)]
    return sd_vector("v1_list.tensors", "Top-level list of 11 tensors: names \\x1e[0] .. "
                     "\\x1e[10].", sd, 1)


def v1_module() -> Vector:
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    m.train()
    with torch.no_grad():
        m(torch.randn(8, 4))  # gives BatchNorm non-trivial running stats
    # Non-persistent buffers are written by write_module by default.
    m.register_buffer("root_scale", torch.tensor([0.5, 2.0]), persistent=False)
    m[1].register_buffer("bn_extra", torch.tensor([1, 2, 3], dtype=torch.int32), persistent=False)
    return Vector("v1_module.tensors", "write_module of Sequential(Linear(4,3), "
                  "BatchNorm1d(3), Linear(3,2)) with non-persistent buffers on the root "
                  "and on the BatchNorm: PARAM/BUFFER types and module indices.",
                  "write_module", lambda s: s.write_module(m), module_expected(m), 1,
                  notes=["Root-level tensors are named with a leading dot ('.root_scale')."])


def v1_module_root() -> Vector:
    torch.manual_seed(4)
    m = torch.nn.Linear(3, 2)
    return Vector("v1_module_root.tensors", "write_module of a bare Linear(3,2): root-level "
                  "names '.weight' and '.bias', module index 0.", "write_module",
                  lambda s: s.write_module(m), module_expected(m), 1)


def v1_write_tensor() -> Vector:
    torch.manual_seed(5)
    calls = [
        (7, "w", TensorType.PARAM, torch.randn(2, 2)),
        (7, "running", TensorType.BUFFER, torch.tensor([1, 2, 3], dtype=torch.int64)),
        (0, "sd_entry", TensorType.STATE_DICT, torch.tensor([True, False])),
        (65535, "max_module_index", TensorType.PARAM, torch.tensor([1.5], dtype=torch.float64)),
        (3, "from_numpy", TensorType.BUFFER, np.arange(5, dtype=np.int32)),
    ]

    def write(s: TensorSerializer) -> None:
        for idx, name, ttype, t in calls:
            s.write_tensor(idx, name, ttype, t)

    expected = [
        Expected((name,), int(ttype), idx, torch.from_numpy(t) if isinstance(t, np.ndarray) else t)
        for idx, name, ttype, t in calls
    ]
    return Vector("v1_write_tensor.tensors", "Separate write_tensor calls with explicit module "
                  "indices (7, 0, 65535, 3) and tensor types, including a numpy array input.",
                  "write_tensor", write, expected, 1)


UNICODE_CANDIDATES: List[Tuple[str, Dict[str, Any]]] = [
    # (label, state dict fragment merged into the vector if it round-trips)
    ("plain latin-1", {"naïve_café": torch.tensor([1.0])}),
    ("plain CJK", {"日本語/重み": torch.tensor([2.0])}),
    ("plain non-BMP emoji", {"emoji_😀": torch.tensor([3.0])}),
    ("plain tab", {"tab\there": torch.tensor([4.0])}),
    ("plain quote and backslash", {'quote"and\\backslash': torch.tensor([5.0])}),
    ("plain newline", {"new\nline": torch.tensor([6.0])}),
    ("nested quote", {"nested": {'quote"d': torch.tensor([7.0])}}),
    ("nested backslash", {"nested": {"back\\slash": torch.tensor([8.0])}}),
    ("nested tab", {"nested": {"tab\tkey": torch.tensor([9.0])}}),
    ("nested non-ASCII", {"nested": {"ünïcödé": torch.tensor([10.0])}}),
    ("nested non-BMP emoji in list", {"nested": {"😀": [torch.tensor([11.0])]}}),
    ("nested control char U+0001", {"nested": {"ctl\x01": torch.tensor([12.0])}}),
    ("nested newline", {"nested": {"new\nline": torch.tensor([13.0])}}),
    ("nested carriage return", {"nested": {"cr\rkey": torch.tensor([14.0])}}),
]


def merge(dst: Dict[str, Any], src: Dict[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = v


def v1_unicode(tmpdir: str, refused: List[Dict[str, str]]) -> Vector:
    sd: Dict[str, Any] = {}
    for label, frag in UNICODE_CANDIDATES:
        err = trial(tmpdir, frag)
        if err is None:
            merge(sd, frag)
        else:
            refused.append({"vector": "v1_unicode.tensors", "case": label, "error": err})
    return sd_vector("v1_unicode.tensors", "Non-ASCII plain names (raw UTF-8) and structured "
                     "paths whose JSON needs escaping (quote, backslash, tab, control "
                     "characters, \\uXXXX and surrogate pairs).", sd, 1)


# dtypes that must work, in vector order, with a value generator each.
def _ints(dt):
    info = torch.iinfo(dt)
    np_dt = {torch.uint16: np.uint16, torch.uint32: np.uint32, torch.uint64: np.uint64}.get(dt)
    vals = [info.min, 0, 1, info.max] if info.min < 0 else [0, 1, 2, info.max]
    if np_dt is not None:  # torch.tensor() cannot build the largest unsigned values
        return torch.from_numpy(np.array(vals, dtype=np_dt))
    return torch.tensor(vals, dtype=dt)


_FLOATS = [0.0, -0.0, 1.5, -2.25, 0.1, float("inf"), float("-inf"), float("nan")]
_FP8 = [0.0, 0.5, -1.0, 2.0, -3.5, 16.0]

REQUIRED_DTYPES: List[Tuple[str, Callable[[], torch.Tensor]]] = [
    ("bool", lambda: torch.tensor([True, False, False, True])),
    ("uint8", lambda: _ints(torch.uint8)),
    ("int8", lambda: _ints(torch.int8)),
    ("int16", lambda: _ints(torch.int16)),
    ("int32", lambda: _ints(torch.int32)),
    ("int64", lambda: _ints(torch.int64)),
    ("uint16", lambda: _ints(torch.uint16)),
    ("uint32", lambda: _ints(torch.uint32)),
    ("uint64", lambda: _ints(torch.uint64)),
    ("float16", lambda: torch.tensor(_FLOATS, dtype=torch.float16)),
    ("float32", lambda: torch.tensor(_FLOATS, dtype=torch.float32)),
    ("float64", lambda: torch.tensor(_FLOATS, dtype=torch.float64)),
    ("bfloat16", lambda: torch.tensor(_FLOATS, dtype=torch.float32).to(torch.bfloat16).reshape(2, 4)),
    ("complex32", lambda: torch.tensor([1 + 2j, -0.5 + 0.25j, 0j], dtype=torch.complex64).to(torch.complex32)),
    ("complex64", lambda: torch.tensor([1 + 2j, -0.5 + 0.25j, 0j], dtype=torch.complex64)),
    ("complex128", lambda: torch.tensor([1 + 2j, -0.5 + 0.25j, 0j], dtype=torch.complex128)),
    ("float8_e5m2", lambda: torch.tensor(_FP8).to(torch.float8_e5m2)),
    ("float8_e4m3fn", lambda: torch.tensor(_FP8).to(torch.float8_e4m3fn)),
    ("float8_e5m2fnuz", lambda: torch.tensor(_FP8).to(torch.float8_e5m2fnuz)),
    ("float8_e4m3fnuz", lambda: torch.tensor(_FP8).to(torch.float8_e4m3fnuz)),
    ("float8_e8m0fnu", lambda: torch.tensor([0.5, 1.0, 2.0, 1024.0]).to(torch.float8_e8m0fnu)),
    ("bfloat16_scalar", lambda: torch.tensor(-1.25, dtype=torch.bfloat16)),
    ("bfloat16_transposed", lambda: torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t()),
]

# Further dtypes: included when tensorizer round-trips them. Values are raw
# bytes viewed as the dtype (sub-byte dtypes occupy one byte per element).
OPTIONAL_DTYPES = [
    "float4_e2m1fn_x2", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2",
    "uint1", "uint2", "uint3", "uint4", "uint5", "uint6", "uint7",
    "int1", "int2", "int3", "int4", "int5", "int6", "int7",
]
# Expected to be refused (quantized); tried only to record the error text.
QUANTIZED_DTYPES = ["qint8", "quint8", "qint32", "quint4x2", "quint2x4"]


def _raw_as(dt: torch.dtype) -> torch.Tensor:
    size = torch.empty(0, dtype=torch.uint8).view(dt).element_size()
    base = {1: torch.uint8, 2: torch.int16}[size]
    return torch.tensor([0x00, 0x12, 0x34, 0x7F, 0xFF], dtype=torch.uint8).to(base).view(dt) \
        if size == 1 else torch.tensor([0, 0x1234, -1], dtype=base).view(dt)


def _quantized(name: str) -> torch.Tensor:
    return torch.quantize_per_tensor(torch.tensor([0.0, 0.5, 1.0, 1.5]), 0.5, 0, getattr(torch, name))


def v2_dtypes(tmpdir: str, refused: List[Dict[str, str]], survey: Dict[str, Any]) -> Vector:
    sd: Dict[str, torch.Tensor] = {}
    for name, make in REQUIRED_DTYPES:
        sd[name] = make()
        survey.setdefault(str(sd[name].dtype), "included")
    for name in OPTIONAL_DTYPES:
        dt = getattr(torch, name, None)
        if dt is None:
            survey[f"torch.{name}"] = "not present in this torch"
            continue
        try:
            t = _raw_as(dt)
        except Exception as exc:
            survey[str(dt)] = f"refused: construct: {type(exc).__name__}: {exc}"
            continue
        err = trial(tmpdir, {name: t})
        if err is None:
            sd[name] = t
            survey[str(dt)] = "included"
        else:
            survey[str(dt)] = "refused: " + err
            refused.append({"vector": "v2_dtypes.tensors", "case": str(dt), "error": err})
    for name in QUANTIZED_DTYPES:
        try:
            t = _quantized(name)
        except Exception as exc:
            survey[f"torch.{name}"] = f"refused: construct: {type(exc).__name__}: {exc}"
            continue
        err = trial(tmpdir, {name: t})
        survey[f"torch.{name}"] = "refused: " + err if err else "unexpectedly round-trips (not included)"
        if err:
            refused.append({"vector": "v2_dtypes.tensors", "case": f"torch.{name}", "error": err})
    return sd_vector("v2_dtypes.tensors", "Every dtype torch 2.15 can store through tensorizer: "
                     "numpy dtypes plus opaque ones ('<V2\\0torch.bfloat16' style), incl. "
                     "a bf16 scalar and a transposed bf16 view. (The 0-element bf16 is in "
                     "v2_empty_opaque.tensors: tensorizer cannot read it back.)", sd, 2)


def v2_empty_opaque() -> Vector:
    sd = {"real_bf16": torch.tensor([1.0, 2.0], dtype=torch.bfloat16),
          "empty_bf16": torch.empty(0, dtype=torch.bfloat16),
          "empty_bf16_2x0": torch.empty((2, 0), dtype=torch.bfloat16)}
    return sd_vector("v2_empty_opaque.tensors", "QUIRK: 0-element bf16 (opaque dtype) tensors. "
                     "tensorizer writes them but its own reader cannot open the file.", sd, 2,
                     tensorizer_can_read=False,
                     notes=["Same cause as v4_meta_opaque: TensorEntry.deserialized_length "
                            "calls numpy.dtype() on the full opaque dtype string whenever "
                            "data_length is 0, which includes 0-element tensors, not only "
                            "meta tensors. The correct deserialized_length is 0."])


def v4_meta() -> Vector:
    sd = {
        "real_f32": torch.arange(4, dtype=torch.float32),
        "meta_f32": meta((3, 4), torch.float32),
        "real_i64": torch.tensor([10, 20], dtype=torch.int64),
        "meta_i64": meta((5,), torch.int64),
        "after": torch.ones(2, dtype=torch.float32),
    }
    return sd_vector("v4_meta.tensors", "Unencrypted, regular tensors plus meta tensors "
                     "(data_length 0, load as zeros).", sd, 4,
                     notes=["Meta tensors have data_length 0; readers return zeros of "
                            "deserialized_length bytes."])


def v4_meta_opaque() -> Vector:
    sd = {"real": torch.ones(2, dtype=torch.float32), "meta_bf16": meta((2, 3), torch.bfloat16)}
    return sd_vector("v4_meta_opaque.tensors", "QUIRK: a bf16 (opaque dtype) meta tensor. "
                     "tensorizer writes it but its own reader cannot open the file.", sd, 4,
                     tensorizer_can_read=False,
                     notes=["TensorEntry.deserialized_length calls numpy.dtype() on the full "
                            "opaque dtype string; a reader should strip the NUL suffix and "
                            "use the V<size> element size (6 elements x 2 bytes = 12)."])


def v5_long() -> Vector:
    sd = {"small": torch.ones(2), "long": meta((LONG_DIM,), torch.uint8), "after": torch.ones(1)}
    return sd_vector("v5_long.tensors", "A meta uint8 tensor of shape (2**32,): u64 shape, "
                     "versioned metadata entries, flags = versioned_headers.", sd, 5,
                     feature_flags=2,
                     notes=["Loading 'long' materializes 4 GiB of zeros."])


def v3_enc_key() -> Vector:
    sd = {
        "a": torch.arange(6, dtype=torch.float32),
        "bf16": torch.tensor([1.0, -2.0, 0.5], dtype=torch.bfloat16),
        "i64_2x2": torch.tensor([[1, -1], [2**40, 0]], dtype=torch.int64),
        "bool": torch.tensor([True, False, True]),
        # 524,800 x 4 = 2,099,200 bytes > 2 MiB: two encryption chunks, two MACs.
        "big_2_chunks": torch.arange(524_800, dtype=torch.float32),
    }
    return sd_vector("v3_enc_key.tensors", "Encrypted with the exact test key; includes bf16 "
                     "(stays v3) and one tensor just over 2 MiB (2 MACs, nonces n and n+1).",
                     sd, 3, encryption="key",
                     notes=["v3 files have all-zero flag bytes; encryption is implied by "
                            "the version.",
                            "Nonces are random: file bytes differ on each regeneration."])


def v3_enc_pass() -> Vector:
    sd = {
        "x": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "y": torch.tensor([1, 2, 3], dtype=torch.int32),
        "z": torch.tensor([0.25, -4.0], dtype=torch.bfloat16),
    }
    return sd_vector("v3_enc_pass.tensors", "Encrypted with an Argon2id key derived from the "
                     "test passphrase (opslimit 1, memlimit 8192, fixed salt): a key-"
                     "derivation CryptInfo chunk before the XSalsa20 chunk.", sd, 3,
                     encryption="passphrase")


def v4_enc_meta() -> Vector:
    sd = {"real": torch.arange(3, dtype=torch.float32), "meta": meta((3,), torch.float32),
          "after": torch.tensor([7], dtype=torch.int64)}
    return sd_vector("v4_enc_meta.tensors", "Encrypted (exact key) with a meta tensor: v4, "
                     "flags = encrypted; the meta tensor has CRC32+SHA-256 and an empty "
                     "CryptInfo.", sd, 4, feature_flags=1, encryption="key")


def v5_enc_long() -> Vector:
    sd = {"small": torch.ones(2), "long": meta((LONG_DIM,), torch.uint8), "after": torch.ones(1)}
    return sd_vector("v5_enc_long.tensors", "Encrypted (exact key) with a (2**32,) meta uint8 "
                     "tensor: v5, flags = encrypted | versioned_headers.", sd, 5,
                     feature_flags=3, encryption="key",
                     notes=["Loading 'long' materializes 4 GiB of zeros."])


def refusal_trials(tmpdir: str, refused: List[Dict[str, str]]) -> None:
    """Other cases tensorizer is known to refuse; recorded, not written."""
    err = trial(tmpdir, {"empty": torch.empty(0, dtype=torch.float32)}, encryption="key")
    refused.append({"vector": "(none)", "case": "encrypted 0-element tensor",
                    "error": err or "unexpectedly round-trips"})
    # A 0-dim meta tensor: the writer hashes torch.empty(()) -- one element of
    # uninitialized memory -- and records data_length = itemsize, but writes no
    # data (the gap reads as zeros). The stored hashes are therefore random and
    # verify_hash fails unless that memory happened to be zero. Not written as
    # a vector because it is not reproducible; only its layout is checked here.
    path = os.path.join(tmpdir, "meta_scalar.tensors")
    write_vector(path, lambda s: s.write_state_dict({"m": meta((), torch.float32)}), None)
    parsed = parse_file(path, None, strict=False)
    (e,) = parsed["entries"]
    assert (parsed["version"], parsed["tensor_size"]) == (4, 0), parsed
    assert (e["shape"], e["data_length"], e["plaintext"]) == ([], 4, bytes(4)), e
    os.remove(path)
    refused.append({"vector": "(none)", "case": "meta scalar (shape ())",
                    "error": "writer bug, not refused: data version 4, data_length 4 with "
                             "4 zero bytes on disk (file header tensor_size stays 0), but CRC32/SHA-256 computed over 4 bytes "
                             "of uninitialized memory (torch.empty(())); tensorizer's "
                             "verify_hash then usually raises HashMismatchError. Output is "
                             "not reproducible, so no vector is committed."})


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------
def check_versions(allow_other: bool) -> None:
    have = (tensorizer.__version__, torch.__version__.split("+")[0])
    if have != (PINNED_TENSORIZER, PINNED_TORCH):
        msg = f"need tensorizer {PINNED_TENSORIZER} and torch {PINNED_TORCH}, have {have}"
        if not allow_other:
            sys.exit(msg)
        print("warning: " + msg, file=sys.stderr)


def verify_existing(out: str) -> None:
    """--verify: check the committed vectors against manifest.json without
    rewriting anything (independent parser, then tensorizer itself)."""
    manifest = json.load(open(os.path.join(out, "manifest.json"), encoding="ascii"))
    for v in manifest["vectors"]:
        path = os.path.join(out, v["file"])
        enc = v["encryption"]
        key = None if enc is None else bytes.fromhex(enc.get("key_hex") or enc["derived_key_hex"])
        parsed = parse_file(path, key)
        got = {"data_version": parsed["version"], "feature_flags": parsed["flags"],
               "size": parsed["size"], "sha256": parsed["sha256"],
               "tensors": [describe_entry(e) for e in parsed["entries"]]}
        for field, value in got.items():
            if value != v[field]:
                raise AssertionError(f"{v['file']}: {field} differs from manifest.json")
        if enc is None:
            dec = None
        elif "key_hex" in enc:
            dec = DecryptionParams.from_key(key)
        else:
            dec = DecryptionParams.from_string(enc["passphrase"])
        try:
            with TensorDeserializer(path, device="cpu", lazy_load=True, verify_hash=True,
                                    encryption=dec) as d:
                loaded = list(d.read_tensors(verify_hash=True))
        except Exception as exc:
            if v["tensorizer_can_read"]:
                raise
            if f"{type(exc).__name__}: {exc}" != v["tensorizer_read_error"]:
                raise AssertionError(f"{v['file']}: tensorizer failed differently: {exc}")
        else:
            if not v["tensorizer_can_read"]:
                raise AssertionError(f"{v['file']}: tensorizer unexpectedly read it")
            for (_, _, _, t), want in zip(loaded, v["tensors"], strict=True):
                flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
                if want["is_meta"]:  # zeros, without copying 4 GiB into bytes
                    ok = flat.numel() == want["deserialized_length"] and not bool(flat.any())
                else:
                    ok = hashlib.sha256(flat.numpy().tobytes()).hexdigest() == want["sha256"]
                if not ok:
                    raise AssertionError(f"{v['file']}: {want['name']!r} differs on load")
        print(f"{v['file']}: ok")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                    help="directory to write the vectors, manifest.json and secrets.json into")
    ap.add_argument("--allow-other-versions", action="store_true",
                    help="run even if tensorizer/torch are not the pinned versions")
    ap.add_argument("--verify", action="store_true",
                    help="only check the existing vectors in --out against manifest.json")
    args = ap.parse_args()
    check_versions(args.allow_other_versions)
    if args.verify:
        verify_existing(args.out)
        return

    refused: List[Dict[str, str]] = []
    survey: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tensorizer-vectors-") as tmp:
        trials_dir = os.path.join(tmp, "trials")
        os.mkdir(trials_dir)
        vectors = [
            v1_flat(), v1_nested(), v1_list(), v1_module(), v1_module_root(),
            v1_unicode(trials_dir, refused), v1_write_tensor(),
            v2_dtypes(trials_dir, refused, survey), v2_empty_opaque(),
            v3_enc_key(), v3_enc_pass(),
            v4_meta(), v4_meta_opaque(), v4_enc_meta(),
            v5_long(), v5_enc_long(),
        ]
        refusal_trials(trials_dir, refused)

        entries = []
        for vec in vectors:
            path = os.path.join(tmp, vec.file)
            write_vector(path, vec.write, vec.encryption)
            entries.append(check_and_describe(path, vec))
            print(f"{vec.file}: v{entries[-1]['data_version']}, "
                  f"{entries[-1]['tensor_count']} tensors, {entries[-1]['size']} bytes")

        secrets = {
            "note": "TEST-ONLY secrets for the committed vectors. They protect nothing.",
            "key_hex": TEST_KEY.hex(),
            "passphrase": TEST_PASSPHRASE,
            "argon2id": {"opslimit": ARGON2_OPSLIMIT, "memlimit": ARGON2_MEMLIMIT,
                         "salt_hex": TEST_SALT.hex(),
                         "derived_key_hex": derived_passphrase_key().hex()},
        }
        manifest = {
            "manifest_version": 1,
            "generator": {
                "script": "tests/vectors/generate.py",
                "tensorizer": tensorizer.__version__,
                "torch": torch.__version__,
                "numpy": np.__version__,
                "python": platform.python_version(),
            },
            "conventions": {
                "name": "tensor name exactly as stored (UTF-8 decoded); structured paths "
                        "start with U+001E",
                "sha256": "hex SHA-256 of the plaintext data bytes as stored (raw C-contiguous "
                          "elements); SHA-256 of b'' for meta and 0-element tensors",
                "stored_crc32/stored_sha256": "hash values stored in the tensor header "
                                              "(over hashable header + plaintext data)",
                "deserialized_length": "bytes a reader yields (zeros for meta tensors)",
                "byte_stable": "false for encrypted files: random nonces change the bytes "
                               "(and size/sha256 here) on every regeneration",
            },
            "secrets": secrets,
            "refused_cases": refused,
            "dtype_survey": survey,
            "vectors": entries,
        }
        os.makedirs(args.out, exist_ok=True)
        for vec in vectors:
            shutil.move(os.path.join(tmp, vec.file), os.path.join(args.out, vec.file))
        for fname, obj in (("manifest.json", manifest), ("secrets.json", secrets)):
            with open(os.path.join(args.out, fname), "w", encoding="ascii") as f:
                json.dump(obj, f, indent=2, ensure_ascii=True)
                f.write("\n")
    total = sum(e["size"] for e in entries)
    print(f"wrote {len(entries)} vectors, {total} bytes in total, to {args.out}")
    for r in refused:
        print(f"refused: {r['case']}: {r['error']}")


if __name__ == "__main__":
    main()
