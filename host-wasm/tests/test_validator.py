"""The WASI validator (tensorizer-validate.wasm) run through wasmtime-py.

Every run gets a read-only preopen of one directory at /in, a fuel budget
scaled to the file size, an epoch deadline (wall clock) and a linear-memory
limit, so a guest that looped or over-allocated on a hostile file would fail
the test quickly instead of hanging or swapping.

The module path comes from $TZR_VALIDATOR_WASM (host-wasm/test.sh sets it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import wasmtime

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "vectors"
MANIFEST = json.loads((VECTORS / "manifest.json").read_text())
SECRETS = MANIFEST["secrets"]
WASM = Path(
    os.environ.get("TZR_VALIDATOR_WASM", ROOT / "target" / "wasm32-wasip1" / "release" / "tensorizer-validate.wasm")
)

MIB = 1 << 20
# Fuel: a fixed allowance (start-up, index parsing, Argon2id at the test
# vectors' 8 KiB) plus a generous per-byte budget for decrypting and hashing.
BASE_FUEL = 2_000_000_000
FUEL_PER_BYTE = 2_000
# Wall-clock bound for one run (epoch deadline), and what hostile inputs must beat.
DEADLINE_S = 30.0
HOSTILE_BOUND_S = 5.0
MEMORY_LIMIT = 256 * MIB
HOSTILE_MEMORY_LIMIT = 64 * MIB

META_16_GIB = 16 << 30


@dataclass
class Run:
    code: int | str  # exit status, or "trap: ..." when the guest trapped
    stdout: str
    stderr: str
    seconds: float
    fuel_used: int

    def json(self) -> dict:
        return json.loads(self.stdout)

    def error_line(self) -> str:
        lines = self.stderr.splitlines()
        assert len(lines) == 1, f"expected one stderr line, got {self.stderr!r}"
        return lines[0]


@pytest.fixture(scope="session")
def engine() -> wasmtime.Engine:
    cfg = wasmtime.Config()
    cfg.consume_fuel = True
    cfg.epoch_interruption = True
    cfg.max_wasm_stack = 1 * MIB
    return wasmtime.Engine(cfg)


@pytest.fixture(scope="session")
def module(engine: wasmtime.Engine) -> wasmtime.Module:
    if not WASM.is_file():
        pytest.fail(f"{WASM} is missing: build it with host-wasm/test.sh")
    return wasmtime.Module.from_file(engine, str(WASM))


@pytest.fixture
def validate(engine, module, tmp_path):
    """Runs the validator on `args` with `directory` preopened read-only at /in
    (and `cwd`, when given, at `.`: the current directory, as `wasmtime run
    --dir .` gives it)."""

    def run(
        args: list[str],
        directory: Path = VECTORS,
        env: dict[str, str] | None = None,
        memory: int = MEMORY_LIMIT,
        fuel: int | None = None,
        deadline_s: float = DEADLINE_S,
        stdout_path: Path | None = None,
        cwd: Path | None = None,
    ) -> Run:
        if fuel is None:
            size = sum(p.stat().st_size for p in directory.iterdir() if p.is_file() and f"/in/{p.name}" in args)
            fuel = BASE_FUEL + FUEL_PER_BYTE * size
        store = wasmtime.Store(engine)
        store.set_limits(memory_size=memory)
        store.set_fuel(fuel)
        store.set_epoch_deadline(1)
        out, err = stdout_path or tmp_path / "stdout", tmp_path / "stderr"
        wasi = wasmtime.WasiConfig()
        wasi.argv = ["tensorizer-validate", *args]
        wasi.env = list((env or {}).items())
        wasi.preopen_dir(str(directory), "/in", False)
        if cwd is not None:
            wasi.preopen_dir(str(cwd), ".", False)
        wasi.stdout_file = str(out)
        wasi.stderr_file = str(err)
        store.set_wasi(wasi)
        linker = wasmtime.Linker(engine)
        linker.define_wasi()
        instance = linker.instantiate(store, module)
        start = instance.exports(store)["_start"]
        timer = threading.Timer(deadline_s, engine.increment_epoch)
        timer.start()
        began = time.monotonic()
        try:
            start(store)
            code: int | str = 0
        except wasmtime.ExitTrap as e:
            code = e.code
        except wasmtime.Trap as e:
            code = f"trap: {e.trap_code}: {e.message}"
        except wasmtime.WasmtimeError as e:
            code = f"trap: {e}"
        finally:
            timer.cancel()
        seconds = time.monotonic() - began
        fuel_used = fuel - store.get_fuel()
        stdout = "" if stdout_path else out.read_text(errors="replace")
        return Run(code, stdout, err.read_text(errors="replace"), seconds, fuel_used)

    return run


def key_args(vector: dict, tmp: Path) -> tuple[list[str], dict[str, str], Path]:
    """Arguments, environment and preopen directory for a manifest vector."""
    enc = vector["encryption"]
    if enc is None:
        return [], {}, VECTORS
    if "passphrase" in enc:
        return ["--passphrase-env", "TZR_PASSPHRASE"], {"TZR_PASSPHRASE": enc["passphrase"]}, VECTORS
    # The key file must be reachable by the guest: put it next to a copy.
    shutil.copy(VECTORS / vector["file"], tmp / vector["file"])
    (tmp / "test.key").write_text(enc["key_hex"] + "\n")
    return ["--key-file", "/in/test.key"], {}, tmp


def assert_matches_manifest(report: dict, vector: dict) -> None:
    assert report["report_version"] == 4
    assert report["file"] == f"/in/{vector['file']}"
    assert report["format"] == "tensorizer"
    assert report["findings"] == []
    assert report["file_bytes"] == vector["size"]
    assert report["data_version"] == vector["data_version"]
    assert report["feature_flags"] == vector["feature_flags"]
    assert report["encrypted"] == (vector["encryption"] is not None)
    assert report["tensor_count"] == vector["tensor_count"] == len(vector["tensors"])
    # The embedding contract: `valid`, `format`, `tensors` (a count), `findings`.
    assert report["tensors"] == vector["tensor_count"]
    assert report["valid"] is (report["verification"] is None or report["verification"]["ok"])
    assert report["errors"] == []
    assert report["data_bytes"] == vector["tensor_data_bytes"]
    assert report["metadata_index_bytes"] == vector["metadata_index_length"]
    # Totals by dtype, recomputed from the manifest's tensors.
    totals: dict[str, list[int]] = {}
    for row, want in zip(report["tensor_rows"], vector["tensors"], strict=True):
        assert row["dtype_string"] == want["dtype"]
        assert row["shape"] == want["shape"]
        assert row["data_length"] == want["data_length"]
        assert row["meta"] == want["is_meta"]
        assert row["header_offset"] == want["header_offset"]
        assert row["data_offset"] == want["data_offset"]
        assert row["path"] == want["path"]
        t = totals.setdefault(row["dtype"], [0, 0, 0])
        t[0] += 1
        t[1] += row["bytes"]
        t[2] += want["data_length"]
    got = {d: [v["tensors"], v["bytes"], v["data_bytes"]] for d, v in report["by_dtype"].items()}
    assert got == totals
    assert sum(v["data_bytes"] for v in report["by_dtype"].values()) == vector["tensor_data_bytes"]


def error_offset(line: str) -> int:
    m = re.search(r"byte (\d+)", line)
    assert m, f"no byte offset in {line!r}"
    return int(m.group(1))


# ---- every vector validates and verifies -----------------------------------


@pytest.mark.parametrize("vector", MANIFEST["vectors"], ids=[v["file"] for v in MANIFEST["vectors"]])
def test_vector_inspects(validate, vector):
    """Header + index only: the report matches the manifest (no key needed)."""
    run = validate(["--json", f"/in/{vector['file']}"])
    assert run.code == 0, run.stderr
    report = run.json()
    assert_matches_manifest(report, vector)
    assert report["verification"] is None
    assert all(t["verification"] is None for t in report["tensor_rows"])


@pytest.mark.parametrize("vector", MANIFEST["vectors"], ids=[v["file"] for v in MANIFEST["vectors"]])
def test_vector_verifies(validate, vector, tmp_path):
    """--verify decrypts (key file or passphrase) and checks every hash."""
    extra, env, directory = key_args(vector, tmp_path)
    run = validate(["--verify", "--json", *extra, f"/in/{vector['file']}"], directory, env)
    assert run.code == 0, run.stderr
    assert run.stderr == ""
    report = run.json()
    assert_matches_manifest(report, vector)
    summary = report["verification"]
    assert summary["ok"] is True
    assert summary["failed"] == 0
    assert summary["verified"] + summary["unverified"] == vector["tensor_count"]
    # Every committed vector stores hashes, so nothing is merely unverified.
    assert summary["unverified"] == 0
    assert summary["data_bytes_checked"] == vector["tensor_data_bytes"]
    for row, want in zip(report["tensor_rows"], vector["tensors"], strict=True):
        v = row["verification"]
        assert v["status"] == "verified" and v["error"] is None
        assert ("crc32" in v["checks"]) == (want["stored_crc32"] is not None)
        assert ("sha256" in v["checks"]) == (want["stored_sha256"] is not None)
        assert ("mac" in v["checks"]) == (vector["encryption"] is not None and want["data_length"] > 0)


def test_text_report(validate):
    # `validate` is kept as an alias of the bare command.
    run = validate(["validate", "--verify", "/in/v1_flat.tensors"])
    assert run.code == 0
    assert run.stdout.startswith("/in/v1_flat.tensors\n  tensorizer data version 1, 15 tensors")
    assert "15 verified, 0 unverified, 0 failed" in run.stdout
    assert run.stdout.rstrip().endswith("no findings")


def test_wrong_key_fails_verification(validate, tmp_path):
    shutil.copy(VECTORS / "v3_enc_key.tensors", tmp_path)
    (tmp_path / "bad.key").write_text("11" * 32)
    run = validate(["--verify", "--key-file", "/in/bad.key", "/in/v3_enc_key.tensors"], tmp_path)
    assert run.code == 1
    assert "TZR-008" in run.error_line() and "decryption failed" in run.error_line()


def test_wrong_passphrase_fails_verification(validate):
    run = validate(
        ["validate", "--verify", "--json", "--passphrase-env", "P", "/in/v3_enc_pass.tensors"], env={"P": "nope"}
    )
    assert run.code == 1
    assert run.json()["verification"]["failed"] == 3


# ---- usage errors (exit 2) -------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["validate"],
        ["inspect", "/in/v1_flat.tensors"],
        ["validate", "--frobnicate", "/in/v1_flat.tensors"],
        ["validate", "--key-file"],
        ["validate", "--verify", "/in/v3_enc_key.tensors"],  # encrypted, no key
        ["validate", "--passphrase-env", "UNSET", "/in/v3_enc_pass.tensors"],
        ["--json", "--sarif", "/in/v1_flat.tensors"],
        ["--key-file", "/in/v1_flat.tensors", "/in/v1_flat.tensors"],  # not a key file
    ],
)
def test_usage_errors(validate, args):
    run = validate(args)
    assert run.code == 2, (run.code, run.stderr)
    assert run.error_line().startswith("tensorizer-validate: ")


@pytest.mark.parametrize("path", ["/in/no-such-file.tensors", "/etc/passwd"], ids=["missing", "outside"])
def test_unopenable_path(validate, path):
    """A file that cannot be opened could not be scanned (exit 2); a path
    outside the preopened directory cannot be opened at all."""
    run = validate(["--json", path])
    assert run.code == 2
    assert "cannot open" in run.error_line()
    assert run.json()["error"]["kind"] == "io"


def test_help_and_version(validate):
    run = validate(["--help"])
    assert run.code == 0 and "Exit codes:" in run.stdout
    run = validate(["--version"])
    assert run.code == 0 and run.stdout.startswith("tensorizer-validate ")


# ---- hostile and broken files (exit 1 with findings, fast, one line) -------


@pytest.fixture
def hostile(validate, tmp_path):
    """Writes `data` as /in/h.tensors and validates it under tight bounds."""

    def run(data: bytes, *flags: str) -> Run:
        (tmp_path / "h.tensors").write_bytes(data)
        r = validate(["validate", *flags, "/in/h.tensors"], tmp_path, memory=HOSTILE_MEMORY_LIMIT)
        assert isinstance(r.code, int), f"the guest trapped: {r.code}"
        assert r.seconds < HOSTILE_BOUND_S, f"took {r.seconds:.1f} s"
        return r

    return run


def vector_bytes(name: str) -> bytearray:
    return bytearray((VECTORS / name).read_bytes())


def vector_entry(name: str) -> dict:
    return next(v for v in MANIFEST["vectors"] if v["file"] == name)


FLAT = "v1_flat.tensors"


def flat_cut_points() -> list[int]:
    v = vector_entry(FLAT)
    first, last = v["tensors"][0], v["tensors"][-1]
    return [
        0,  # empty file
        4,  # inside the magic
        40,  # inside the file header
        72,  # one byte short of the file header
        73,  # header only, no index
        73 + 1000,  # inside the index
        first["header_offset"] - 1,  # index complete, no tensors
        first["header_offset"] + 10,  # inside the first tensor header
        last["data_offset"] + last["data_length"] // 2,  # inside the last tensor's data
    ]


@pytest.mark.parametrize("cut", flat_cut_points())
@pytest.mark.parametrize("verify", [False, True], ids=["inspect", "verify"])
def test_truncated(hostile, cut, verify):
    data = vector_bytes(FLAT)[:cut]
    run = hostile(bytes(data), "--json", *(["--verify"] if verify else []))
    assert run.code == 1
    doc = run.json()
    assert doc["valid"] is False
    first = doc["findings"][0]
    if cut < 5:  # not even the magic: no known format
        assert (doc["format"], first["rule"], first["offset"]) == ("unknown", "FMT-001", 0)
        return
    assert doc["format"] == "tensorizer"
    assert {f["rule"] for f in doc["findings"]} == {"TZR-004"}, doc["findings"]
    assert first["offset"] <= max(cut, 73)
    assert error_offset(run.error_line()) == first["offset"]
    assert first["remediation"] and first["severity"] == "error"
    assert doc["errors"][0] == {"tensor": first["tensor"], "offset": first["offset"], "message": first["message"]}


def test_truncated_encrypted(hostile):
    data = vector_bytes("v3_enc_key.tensors")
    run = hostile(bytes(data[: len(data) // 2]))
    assert run.code == 1
    assert "TZR-004" in run.error_line() and "truncated" in run.error_line()


def test_flipped_data_byte(hostile):
    v = vector_entry(FLAT)
    t = v["tensors"][-1]
    data = vector_bytes(FLAT)
    data[t["data_offset"] + 3] ^= 0x40
    assert hostile(bytes(data)).code == 0  # the index is intact: inspection passes
    run = hostile(bytes(data), "--verify", "--json")
    assert run.code == 1
    assert "TZR-007" in run.error_line() and "failed CRC32 verification" in run.error_line()
    report = run.json()
    assert report["verification"] == {
        "ok": False,
        "verified": v["tensor_count"] - 1,
        "unverified": 0,
        "failed": 1,
        "data_bytes_checked": v["tensor_data_bytes"],
    }
    bad = report["tensor_rows"][-1]["verification"]
    assert bad["status"] == "failed"
    assert bad["error"]["kind"] == "verification"
    assert bad["error"]["offset"] == t["header_offset"]
    assert report["valid"] is False and report["tensors"] == v["tensor_count"]
    assert report["errors"] == [
        {"tensor": report["tensor_rows"][-1]["name"], "offset": t["header_offset"], "message": bad["error"]["message"]}
    ]
    assert [(f["rule"], f["offset"]) for f in report["findings"]] == [("TZR-007", t["header_offset"])]


def test_flipped_ciphertext_byte(validate, tmp_path):
    v = vector_entry("v3_enc_key.tensors")
    big = max(v["tensors"], key=lambda t: t["data_length"])
    data = vector_bytes(v["file"])
    at = big["data_offset"] + (2 << 20) + 5  # inside the second 2 MiB chunk
    data[at] ^= 1
    (tmp_path / "h.tensors").write_bytes(bytes(data))
    (tmp_path / "k").write_text(SECRETS["key_hex"])
    run = validate(["--verify", "--json", "--key-file", "/in/k", "/in/h.tensors"], tmp_path)
    assert run.code == 1
    assert [f["rule"] for f in run.json()["findings"]] == ["TZR-008"]
    row = next(r for r in run.json()["tensor_rows"] if r["name"] == big["name"])
    # The error names the chunk that failed to open.
    assert row["verification"]["error"]["offset"] == big["data_offset"] + (2 << 20)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"PK\x03\x04" + bytes(100),
        json.dumps(MANIFEST).encode()[:4096],
        bytes(range(256)) * 4,
        b"|TZR",
    ],
    ids=["empty", "zip", "json", "binary", "magic-prefix"],
)
def test_not_a_model_file(hostile, data):
    run = hostile(data, "--json")
    assert run.code == 1
    doc = run.json()
    rules = {f["rule"] for f in doc["findings"]}
    # The name says .tensors: a ZIP is also an extension mismatch.
    assert rules == ({"ZIP-001", "FMT-002"} if data.startswith(b"PK") else {"FMT-001"})
    assert all(f["offset"] == 0 for f in doc["findings"])
    assert doc["findings"][0]["rule"] in run.error_line()


def test_unsupported_version(hostile):
    data = vector_bytes(FLAT)
    data[5:9] = struct.pack("<I", 99)
    run = hostile(bytes(data))
    assert run.code == 1
    assert "TZR-001" in run.error_line()
    assert error_offset(run.error_line()) == 5


@pytest.mark.parametrize(
    "claimed",
    [1 << 29, (1 << 30) + 1, 1 << 40, (1 << 64) - 1],
    ids=["512MiB", "1GiB+1", "1TiB", "u64max"],
)
def test_huge_metadata_length(hostile, claimed):
    """A claimed index far beyond the file (or the core's limit) is refused
    before anything is allocated."""
    data = vector_bytes(FLAT)
    data[0x41:0x49] = struct.pack("<Q", claimed)
    run = hostile(bytes(data), "--json")
    assert run.code == 1
    line = run.error_line()
    if claimed > 1 << 30:
        assert "TZR-003" in line and "metadata index length" in line and error_offset(line) == 0x41
    else:
        assert "TZR-004" in line and "truncated" in line and error_offset(line) == len(data)


def test_huge_tensor_count(hostile):
    data = vector_bytes(FLAT)
    data[0x39:0x41] = struct.pack("<Q", 1 << 62)
    run = hostile(bytes(data))
    assert run.code == 1
    assert error_offset(run.error_line()) == 0x39


def test_tensor_beyond_end_of_file(hostile):
    """An index entry whose data lies past the end: refused from the index."""
    v = vector_entry(FLAT)
    t = v["tensors"][-1]
    data = vector_bytes(FLAT)
    offsets = struct.pack("<QQQ", t["header_offset"], t["data_offset"], t["data_length"])
    pos = data.index(offsets)
    far = 1 << 40
    data[pos : pos + 16] = struct.pack("<QQ", far, far + (t["data_offset"] - t["header_offset"]))
    run = hostile(bytes(data), "--verify")
    assert run.code == 1
    assert "TZR-004" in run.error_line() and "truncated" in run.error_line()


def patch_meta_to_16_gib(data: bytearray, vector: dict) -> dict:
    """Turns the (2**32,) uint8 meta tensor into a (2**34,) one (16 GiB), in
    the index and in its tensor header, and re-hashes the header so that the
    file stays valid."""
    t = next(t for t in vector["tensors"] if t["is_meta"] and t["shape"] == [2**32])
    old_dim, new_dim = struct.pack("<Q", 2**32), struct.pack("<Q", META_16_GIB)
    # Index entry: the u64 dimension sits right before the three u64 offsets.
    offsets = struct.pack("<QQQ", t["header_offset"], t["data_offset"], t["data_length"])
    pos = data.index(offsets, 73, t["header_offset"])
    assert data[pos - 8 : pos] == old_dim
    data[pos - 8 : pos] = new_dim
    # Tensor header: the dimension, then the hashes over the hashable header.
    start, end = t["header_offset"], t["data_offset"]
    header = data[start:end]
    assert header.count(old_dim) == 1
    header[header.index(old_dim) : header.index(old_dim) + 8] = new_dim
    crc_at = header.index(struct.pack("<I", t["stored_crc32"]))
    sha_at = header.index(bytes.fromhex(t["stored_sha256"]))
    header[crc_at : crc_at + 4] = bytes(4)
    header[sha_at : sha_at + 32] = bytes(32)
    crc, sha = zlib.crc32(bytes(header)), hashlib.sha256(bytes(header)).digest()  # no data: meta
    header[crc_at : crc_at + 4] = struct.pack("<I", crc)
    header[sha_at : sha_at + 32] = sha
    data[start:end] = header
    return t


def test_16_gib_meta_tensor(hostile):
    """A meta tensor claiming 16 GiB validates and verifies under a 64 MiB
    memory limit: nothing is allocated for what the file merely claims."""
    v = vector_entry("v5_long.tensors")
    data = vector_bytes(v["file"])
    t = patch_meta_to_16_gib(data, v)
    run = hostile(bytes(data), "--verify", "--json")
    assert run.code == 0, run.stderr
    report = run.json()
    row = next(r for r in report["tensor_rows"] if r["name"] == t["name"])
    assert (row["shape"], row["bytes"], row["meta"], row["data_length"]) == ([META_16_GIB], META_16_GIB, True, 0)
    assert row["verification"]["status"] == "verified"
    assert report["by_dtype"]["uint8"]["bytes"] >= META_16_GIB
    assert report["data_bytes"] == v["tensor_data_bytes"]


def test_16_gib_meta_tensor_index_only(hostile):
    """The index claims 16 GiB but the tensor header still says 4 GiB:
    the scan reads every tensor header and finds the disagreement, with or
    without --verify."""
    v = vector_entry("v5_long.tensors")
    data = vector_bytes(v["file"])
    original = bytes(data)
    t = patch_meta_to_16_gib(data, v)
    # Put back the original tensor header (dimension and hashes).
    data[t["header_offset"] : t["data_offset"]] = original[t["header_offset"] : t["data_offset"]]
    for flags in [(), ("--verify",)]:
        run = hostile(bytes(data), *flags)
        assert run.code == 1
        line = run.error_line()
        assert "1 finding;" in line and "TZR-005" in line and "disagrees with the metadata index" in line
        assert error_offset(line) == t["header_offset"]


def grow_last_tensor(data: bytearray, vector: dict, columns: int, payload: bytes) -> bytes:
    """v1_flat with its last tensor (f32, 4x4) turned into a 4 x `columns`
    tensor holding `payload`, with the index, file header and hashes fixed."""
    t = vector["tensors"][-1]
    assert t["shape"] == [4, 4] and t["dtype"] == "<f4"
    assert len(payload) == 16 * columns
    old_dims, new_dims = struct.pack("<II", 4, 4), struct.pack("<II", 4, columns)
    offsets = struct.pack("<QQQ", t["header_offset"], t["data_offset"], t["data_length"])
    pos = data.index(offsets, 73, t["header_offset"])
    assert data[pos - 8 : pos] == old_dims
    data[pos - 8 : pos] = new_dims
    data[pos + 16 : pos + 24] = struct.pack("<Q", len(payload))
    total = vector["tensor_data_bytes"] - t["data_length"] + len(payload)
    data[0x29:0x31] = struct.pack("<Q", total)
    header = bytearray(data[t["header_offset"] : t["data_offset"]])
    assert header.count(old_dims) == 1 and header[-8:] == struct.pack("<Q", t["data_length"])
    header[header.index(old_dims) : header.index(old_dims) + 8] = new_dims
    header[-8:] = struct.pack("<Q", len(payload))
    crc_at = header.index(struct.pack("<I", t["stored_crc32"]))
    sha_at = header.index(bytes.fromhex(t["stored_sha256"]))
    header[crc_at : crc_at + 4] = bytes(4)
    header[sha_at : sha_at + 32] = bytes(32)
    crc = zlib.crc32(payload, zlib.crc32(bytes(header)))
    sha = hashlib.sha256(bytes(header) + payload).digest()
    header[crc_at : crc_at + 4] = struct.pack("<I", crc)
    header[sha_at : sha_at + 32] = sha
    return bytes(data[: t["header_offset"]]) + bytes(header) + payload + bytes(8)


def test_memory_is_bounded_by_one_piece(validate, tmp_path):
    """A 64 MiB tensor verifies under a 16 MiB memory limit: data is
    streamed in 8 MiB pieces, never held whole. Flipping its last byte
    still fails verification, so every piece was hashed."""
    v = vector_entry(FLAT)
    columns = 4 << 20  # 4 x 4Mi float32 = 64 MiB
    payload = bytearray(os.urandom(16 * columns))
    big = grow_last_tensor(vector_bytes(FLAT), v, columns, bytes(payload))
    (tmp_path / "big.tensors").write_bytes(big)
    run = validate(["--verify", "--json", "/in/big.tensors"], tmp_path, memory=16 * MIB)
    assert run.code == 0, (run.code, run.stderr)
    report = run.json()
    assert report["tensor_rows"][-1]["bytes"] == 64 * MIB
    assert report["verification"]["data_bytes_checked"] == v["tensor_data_bytes"] - 64 + 64 * MIB
    payload[-1] ^= 1
    t = v["tensors"][-1]
    (tmp_path / "big.tensors").write_bytes(big[: t["data_offset"]] + bytes(payload) + bytes(8))
    run = validate(["--verify", "/in/big.tensors"], tmp_path, memory=16 * MIB)
    assert run.code == 1


def test_memory_limit_below_one_piece_is_an_error_not_a_crash(validate, tmp_path):
    """With too little memory for a 2 MiB data piece, the module reports it
    (exit 2: it could not be scanned) instead of aborting."""
    shutil.copy(VECTORS / "v3_enc_key.tensors", tmp_path)
    (tmp_path / "k").write_text(SECRETS["key_hex"])
    run = validate(
        ["--verify", "--key-file", "/in/k", "/in/v3_enc_key.tensors"], tmp_path, memory=2 * MIB + MIB // 2
    )
    assert run.code == 2, run.code
    assert "cannot allocate" in run.error_line()


def many_tensors_file(n: int) -> bytes:
    """A data version 1 file of `n` float32 scalars t0..t{n-1}, each an 8-byte
    header region and no data, laid end to end after the index."""
    heads = [struct.pack("<H", len(f"t{i}")) + f"t{i}".encode() + b"\x00\x03<f4\x00" for i in range(n)]
    index_len = sum(map(len, heads)) + 24 * n
    end = 73 + index_len
    index = b"".join(h + struct.pack("<QQQ", end + 8 * i, end + 8 * i + 8, 0) for i, h in enumerate(heads))
    header = b"|TZR|" + struct.pack("<I", 1) + bytes(32) + struct.pack("<QQQQ", 0, 0, n, index_len)
    return header + index + bytes(8 * n)


@pytest.mark.parametrize("json_report", [True, False], ids=["json", "text"])
def test_an_index_of_2_20_tensors_is_an_error_not_an_abort(validate, tmp_path, json_report):
    """2^20 tensors (the most the format allows) take more than the default
    256 MiB to parse and report: the module finds the memory missing first
    and exits 2 (could not scan) instead of aborting on an allocation
    failure."""
    (tmp_path / "many.tensors").write_bytes(many_tensors_file(1 << 20))
    run = validate([*(["--json"] if json_report else []), "/in/many.tensors"], tmp_path)
    assert run.code == 2, (run.code, run.stderr[-500:])
    assert "cannot allocate" in run.error_line() and "memory limit" in run.error_line()
    # With enough memory it scans: the index is fine, and each of the 2^20
    # 8-byte tensor headers is a finding (listed up to the cap, then counted).
    # A long scan, not a hostile input: its wall-clock bound is generous, as
    # CI runs it beside other lanes on two cores (fuel still bounds it).
    run = validate(["--json", "/in/many.tensors"], tmp_path, memory=4096 * MIB, deadline_s=180.0)
    assert run.code == 1, (run.code, run.stderr[-500:])
    report = run.json()
    assert report["tensor_count"] == 1 << 20
    assert_capped(report["findings"], "TZR-005", 1 << 20)


def assert_capped(findings: list[dict], rule: str, total: int) -> None:
    """`findings` lists 100 of `total` findings of `rule`, then counts the rest."""
    assert [f["rule"] for f in findings] == [rule] * 100 + ["FMT-003"]
    assert findings[-1]["message"] == f"{total - 100} more {rule} findings were left out"


def test_many_tensors_fit_the_default_memory(validate, tmp_path):
    """The memory check does not refuse what fits: 65,536 tensors."""
    (tmp_path / "m.tensors").write_bytes(many_tensors_file(1 << 16))
    run = validate(["--json", "/in/m.tensors"], tmp_path)
    assert run.code == 1, (run.code, run.stderr)
    report = run.json()
    assert report["tensor_count"] == 1 << 16
    assert_capped(report["findings"], "TZR-005", 1 << 16)


@pytest.mark.parametrize("json_report", [True, False], ids=["json", "text"])
def test_a_report_that_cannot_be_written_is_a_failure(validate, json_report):
    """stdout on a full device: the report is lost, so the exit is 2, not 0."""
    flags = ["--json"] if json_report else []
    run = validate([*flags, "/in/v4_meta.tensors"], stdout_path=Path("/dev/full"))
    assert run.code == 2, (run.code, run.stderr)
    assert "cannot write the report" in run.error_line()


def patch_kdf_memlimit(data: bytearray, memlimit: int) -> None:
    """Sets the Argon2id memlimit in every tensor header of v3_enc_pass."""
    for t in vector_entry("v3_enc_pass.tensors")["tensors"]:
        start, end = t["header_offset"], t["data_offset"]
        old = struct.pack("<Q", SECRETS["argon2id"]["memlimit"])
        at = data.index(old, start, end)
        data[at : at + 8] = struct.pack("<Q", memlimit)


def test_kdf_memory_beyond_the_limit_is_an_error_not_a_crash(validate, tmp_path):
    """A file asking Argon2id for 1 GiB (the core's cap) under a 64 MiB
    memory limit: the module finds the memory missing before deriving."""
    data = vector_bytes("v3_enc_pass.tensors")
    patch_kdf_memlimit(data, 1 << 30)
    (tmp_path / "h.tensors").write_bytes(bytes(data))
    env = {"P": SECRETS["passphrase"]}
    args = ["--verify", "--passphrase-env", "P", "/in/h.tensors"]
    run = validate(args, tmp_path, env, memory=HOSTILE_MEMORY_LIMIT)
    assert run.code == 2, run.code
    line = run.error_line()
    assert "cannot allocate" in line and "key derivation" in line


def test_kdf_cost_above_the_cap_is_refused(validate, tmp_path):
    """Above the core's KdfLimits (1 GiB) nothing is derived: each tensor is a finding."""
    data = vector_bytes("v3_enc_pass.tensors")
    patch_kdf_memlimit(data, 4 << 30)
    (tmp_path / "h.tensors").write_bytes(bytes(data))
    env = {"P": SECRETS["passphrase"]}
    args = ["--verify", "--json", "--passphrase-env", "P", "/in/h.tensors"]
    run = validate(args, tmp_path, env, memory=HOSTILE_MEMORY_LIMIT)
    assert run.code == 1
    assert "above the configured limit" in run.error_line()
    assert run.json()["verification"]["failed"] == 3


def mutations(seed: int, data: bytes, count: int):
    """Deterministic random corruptions of `data`: byte flips in the first
    tensor's neighbourhood and the file header, and truncations."""
    import random

    rng = random.Random(seed)
    hot = [(0, 73), (73, 73 + 512), (len(data) - 4096, len(data))]
    for _ in range(count):
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            lo, hi = rng.choice(hot)
            at = rng.randrange(max(lo, 0), min(hi, len(out)))
            out[at] = rng.randrange(256)
        if rng.random() < 0.3:
            out = out[: rng.randrange(len(out))]
        yield bytes(out)


@pytest.mark.parametrize("name", ["v1_flat.tensors", "v5_long.tensors", "v3_enc_key.tensors"])
def test_random_corruption_never_traps(validate, tmp_path, name):
    """Randomly corrupted files end with 0 or 1 (findings) and a bounded run, never a trap."""
    (tmp_path / "k").write_text(SECRETS["key_hex"])
    keyed = ["--key-file", "/in/k"] if "enc" in name else []
    for i, data in enumerate(mutations(zlib.crc32(name.encode()), bytes(vector_bytes(name)), 25)):
        (tmp_path / "m.tensors").write_bytes(data)
        run = validate(["--verify", "--json", *keyed, "/in/m.tensors"], tmp_path, memory=HOSTILE_MEMORY_LIMIT)
        assert run.code in (0, 1), (i, run.code, run.stderr)
        assert run.seconds < HOSTILE_BOUND_S
        assert len(run.stderr.splitlines()) == (0 if run.code == 0 else 1), run.stderr
        json.loads(run.stdout)  # always a JSON document on stdout


def test_fuel_bounds_a_run(validate):
    """Fuel is a hard stop: a budget too small for the work traps quickly."""
    run = validate(["--verify", "/in/v1_flat.tensors"], fuel=100_000)
    assert isinstance(run.code, str) and "trap" in run.code
    assert run.seconds < HOSTILE_BOUND_S


# ---- other formats: safetensors, torch.save zips, pickles -----------------

TORCH = VECTORS / "torch"


@pytest.mark.parametrize("name", ["dtypes.pt", "nested.pt", "views.pt", "module.pt", "params.pt", "big_endian.pt"])
def test_torch_checkpoints_scan_clean(validate, name):
    run = validate(["--json", f"/in/{name}"], TORCH)
    assert run.code == 0, run.stderr
    report = run.json()
    assert (report["format"], report["valid"], report["findings"]) == ("torch-zip", True, [])
    assert report["tensors"] > 0
    # Rows from the core's checkpoint reader (report version 4): one per
    # state-dict entry, so views of one storage each have theirs.
    assert report["data_version"] is None and len(report["tensor_rows"]) >= report["tensors"]


@pytest.mark.parametrize(
    "name, rule, says",
    [
        ("hostile_os_system.pt", "PKL-001", "posix.system"),
        ("hostile_eval.pt", "PKL-001", "__builtin__.eval"),
        ("hostile_module.pt", "PKL-007", "torch.nn.modules"),
        ("hostile_deflated.pt", "ZIP-006", "compression method 8"),
    ],
)
def test_hostile_checkpoints_are_findings(validate, name, rule, says):
    run = validate(["--json", f"/in/{name}"], TORCH)
    assert run.code == 1, run.stderr
    found = [f for f in run.json()["findings"] if f["rule"] == rule]
    assert found and says in found[0]["message"], run.json()["findings"]
    assert all(isinstance(f["offset"], int) for f in found)


def test_legacy_torch_pickle_is_scanned(validate):
    run = validate(["--json", "/in/hostile_legacy.pt"], TORCH)
    assert run.code == 0, run.stderr
    assert run.json()["format"] == "torch-legacy"


def test_a_pickle_named_safetensors_is_caught(validate, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    run = validate(["--json", "/in/model.safetensors"], tmp_path)
    assert run.code == 1
    report = run.json()
    assert report["format"] == "pickle"
    assert [f["rule"] for f in report["findings"]] == ["FMT-002", "PKL-001", "PKL-002"]
    assert "os.system" in report["findings"][1]["message"]


def _gguf_str(s: str) -> bytes:
    return struct.pack("<Q", len(s.encode())) + s.encode()


def test_a_gguf_header_and_its_chat_template_are_scanned(validate, tmp_path):
    template = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
    head = b"GGUF" + struct.pack("<IQQ", 3, 2, 1)
    head += _gguf_str("tokenizer.chat_template") + struct.pack("<I", 8) + _gguf_str(template)
    for name, offset in (("a", 0), ("b", 16)):
        head += _gguf_str(name) + struct.pack("<IQIQ", 1, 8, 0, offset)
    (tmp_path / "m.gguf").write_bytes(head + bytes(-len(head) % 32) + bytes(64))
    run = validate(["--json", "/in/m.gguf"], tmp_path)
    assert run.code == 1, run.stderr
    report = run.json()
    assert report["format"] == "gguf" and report["tensors"] == 2
    rules = {f["rule"] for f in report["findings"]}
    assert rules == {"GGUF-004", "GGUF-005", "GGUF-006"}, report["findings"]
    assert all(f["executes_code"] == (f["rule"] == "GGUF-006") for f in report["findings"])


def safetensors_file(header: dict, data: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text.encode() + data


def test_safetensors(validate, tmp_path):
    clean = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "__metadata__": {"format": "pt"}}
    (tmp_path / "ok.safetensors").write_bytes(safetensors_file(clean, bytes(8)))
    run = validate(["--json", "/in/ok.safetensors"], tmp_path)
    assert run.code == 0, run.stderr
    assert (run.json()["format"], run.json()["tensors"]) == ("safetensors", 1)
    bad = {
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F8_E8M0", "shape": [4], "data_offsets": [4, 8]},
        "c": {"dtype": "E8M0", "shape": [1], "data_offsets": [8, 9]},
    }
    (tmp_path / "bad.safetensors").write_bytes(safetensors_file(bad, bytes(9) + b"payload"))
    run = validate(["--json", "/in/bad.safetensors"], tmp_path)
    assert run.code == 1
    assert {f["rule"] for f in run.json()["findings"]} == {"ST-004", "ST-007", "ST-010"}


def test_sarif(validate):
    run = validate(["--sarif", "/in/hostile_os_system.pt"], TORCH)
    assert run.code == 1
    log = run.json()
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (sarif_run,) = log["runs"]
    driver = sarif_run["tool"]["driver"]
    # No public page to point at: informationUri is left out rather than invented.
    assert driver["name"] == "tensorizer-validate" and "informationUri" not in driver
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids)) and "PKL-001" in ids
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["help"]["text"]
        assert rule["defaultConfiguration"]["level"] in ("error", "warning", "note")
    results = sarif_run["results"]
    assert results and all(r["ruleId"] == ids[r["ruleIndex"]] for r in results)
    loc = results[0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "/in/hostile_os_system.pt"
    assert isinstance(loc["region"]["byteOffset"], int)
    # A clean file: no results; a missing one: a failed invocation (exit 2).
    run = validate(["--sarif", "/in/v4_meta.tensors"])
    assert run.code == 0 and run.json()["runs"][0]["results"] == []
    run = validate(["--sarif", "/in/missing.pt"])
    assert run.code == 2
    assert run.json()["runs"][0]["invocations"][0]["executionSuccessful"] is False


# ---- portability: the same module under Node's node:wasi -----------------

NODE_RUNNER = r"""
const { readFileSync } = require('node:fs');
const { WASI } = require('node:wasi');
const [wasmPath, dir, ...args] = process.argv.slice(2);
const wasi = new WASI({ version: 'preview1', args: ['tensorizer-validate', ...args],
                        env: {}, preopens: { '/in': dir }, returnOnExit: true });
const mod = new WebAssembly.Module(readFileSync(wasmPath));
const instance = new WebAssembly.Instance(mod, wasi.getImportObject());
process.exitCode = wasi.start(instance);
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_wasi_smoke(tmp_path):
    runner = tmp_path / "run.js"
    runner.write_text(NODE_RUNNER)
    for name, want in [("v4_meta.tensors", 0), ("manifest.json", 1), ("torch/hostile_os_system.pt", 1)]:
        proc = subprocess.run(
            ["node", "--no-warnings", str(runner), str(WASM), str(VECTORS), "--verify", "--json", f"/in/{name}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == want, proc.stderr
        report = json.loads(proc.stdout)
        if want == 0:
            assert report["verification"]["verified"] == 5
        elif name.endswith(".pt"):
            assert report["format"] == "torch-zip"
            assert "PKL-001" in proc.stderr and "posix.system" in proc.stderr
        else:
            assert report["findings"][0]["rule"] == "FMT-001"


# ---- sharded checkpoints: an index and its shards as one model -------------


def test_a_shard_index_is_scanned_with_its_shards_through_the_preopen(validate, tmp_path):
    """The index's shards are opened through the preopened directory, checked
    against its map (IDX-003..006), and each file is reported once, whether the
    index is named alone, beside its shard, or found in a directory."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(VECTORS / "torch" / "params.pt", model / "a.bin")
    shutil.copy(VECTORS / "torch" / "params.pt", model / "stale.bin")
    (model / "pytorch_model.bin.index.json").write_text(
        json.dumps({"weight_map": {"w": "a.bin", "v": "b.bin", "x": "../c.bin"}})
    )
    index = "/in/pytorch_model.bin.index.json"
    for args in ([index], [index, "/in/a.bin"], ["/in"], ["/in", index]):
        run = validate(["--json", *args], model, fuel=BASE_FUEL * 4)
        assert run.code == 1, run.stderr
        files = run.json()["files"]
        names = [f["file"] for f in files]
        assert len(names) == len(set(names)), names
        (idx,) = [f for f in files if f["format"] == "shard-index"]
        assert [f["rule"] for f in idx["findings"]] == ["IDX-003", "IDX-004", "IDX-005", "IDX-006"]
        assert idx["shards"] == ["/in/a.bin"]
        (shard,) = [f for f in files if f["file"] == "/in/a.bin"]
        assert shard["model"] == index and shard["tensor_rows"]
        assert ("/in/stale.bin" in names) == (args[0] == "/in")
    # Without canonical paths under WASI, `.` components still name one file.
    run = validate(["--json", index, "/in/./a.bin"], model, fuel=BASE_FUEL * 4)
    assert [f["file"] for f in run.json()["files"]] == [index, "/in/./a.bin"]
    run = validate(["--sarif", index], model, fuel=BASE_FUEL * 4)
    uris = [a["location"]["uri"] for a in run.json()["runs"][0]["artifacts"]]
    assert run.code == 1 and uris == ["/in/pytorch_model.bin.index.json", "/in/a.bin"]


# ---- suppression files: the same file, parser and matching as tzr scan ------


def test_suppression_files_mark_findings_and_unused_entries_are_notes(validate, tmp_path):
    """`.tzrscan.toml` in the current directory, or `--ignore FILE`: covered
    findings are still listed, marked with the reason, and fail nothing; an
    entry that covered nothing is a SUP-001 note; a bad file fails the run."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(VECTORS / "torch" / "hostile_os_system.pt", models / "evil.pt")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".tzrscan.toml").write_text(
        '[[ignore]]\nrule = "PKL-001"\npath = "*.pt"\nreason = "a test payload"\n'
        '[[ignore]]\nrule = "PKL-002"\npath = "/in/evil.pt"\nreason = "same"\n'
        '[[ignore]]\nrule = "ST-007"\npath = "*.safetensors"\nreason = "stale"\n'
    )
    assert validate(["--json", "/in/evil.pt"], models).code == 1
    run = validate(["--json", "/in/evil.pt"], models, cwd=repo)
    assert run.code == 0, run.stderr
    report = run.json()
    assert report["valid"] and {f["suppressed"] for f in report["findings"]} == {"a test payload", "same"}
    assert report["suppressions"]["file"] == ".tzrscan.toml"
    assert [n["rule"] for n in report["suppressions"]["notes"]] == ["SUP-001"]
    # An explicit file, read through the preopen; SARIF marks the results.
    shutil.copy(repo / ".tzrscan.toml", models / "ignore.toml")
    run = validate(["--sarif", "--ignore", "/in/ignore.toml", "/in/evil.pt", "/in"], models)
    assert run.code == 0, run.stderr
    results = run.json()["runs"][0]["results"]
    assert results and all(r["suppressions"][0]["status"] == "accepted" for r in results)
    (models / "bad.toml").write_text('[[ignore]]\nrule = "PKL-001"\npath = "*"\n')
    run = validate(["--ignore", "/in/bad.toml", "/in/evil.pt"], models)
    assert run.code == 2 and "reason (a string) is required" in run.stderr
