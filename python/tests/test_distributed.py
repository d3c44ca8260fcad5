"""Cooperative loading over torch.distributed (spec §24), on gloo: groups of
1, 2 and 3 ranks, each a process on this machine (distributed_worker.py),
loading from a local file, nginx, moto and redis-server. Every rank must
end with every selected tensor bit-identical to a plain load, the store
must serve the file's tensors once in all, and a failure on one rank must
raise on all. The NCCL path (CUDA tensors) is not tested: no GPU here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any

import pytest
import torch

import remote_servers
import tzhelpers

pytestmark = pytest.mark.skipif(tzhelpers.IS_ORACLE, reason=tzhelpers.ORACLE_SKIP_REASON)

tz = tzhelpers.tz
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import distributed_worker  # noqa: E402  (its Model writes the files)

KEY = bytes(range(32))
WRONG_KEY = bytes(range(1, 33))


def _write(path: str, encrypted: bool = False) -> None:
    torch.manual_seed(0)
    model = distributed_worker.Model()
    enc = tz.EncryptionParams(KEY) if encrypted else None
    with tz.TensorSerializer(path, encryption=enc) as s:
        s.write_module(model)


def _plain(path: str, key: bytes | None = None, prefix: str | None = None, dtype: Any = None) -> dict[str, Any]:
    enc = tz.DecryptionParams.from_key(key) if key else None
    keep = (lambda n: n.startswith(prefix)) if prefix else None
    with tz.TensorDeserializer(path, device="cpu", encryption=enc, filter_func=keep, dtype=dtype) as d:
        return {name: distributed_worker.digest(t) for name, t in d.items()}


def _group(tmp: str, world: int, jobs: list[dict[str, Any]], timeout: float = 20) -> list[list[dict[str, Any]]]:
    """Runs `jobs` in one gloo group of `world` processes; per rank, its
    results (one per job it finished)."""
    spec = os.path.join(tmp, f"spec{world}.json")
    with open(spec, "w") as f:
        json.dump({"world": world, "init": f"file://{tmp}/rendezvous{world}", "timeout": timeout, "jobs": jobs}, f)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen([sys.executable, os.path.join(HERE, "distributed_worker.py"), spec, str(r)], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for r in range(world)
    ]
    try:
        for p in procs:
            p.wait(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for r in range(world):
        try:
            with open(f"{spec}.{r}.json") as f:
                results.append(json.load(f))
        except FileNotFoundError:
            results.append([])
    return results


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("dist")
    plain, secret, corrupt = str(d / "model.tensors"), str(d / "secret.tensors"), str(d / "corrupt.tensors")
    _write(plain)
    _write(secret, encrypted=True)
    # The same file with a byte of its last tensor (the last rank's share)
    # changed: only that rank can notice.
    data = bytearray(open(plain, "rb").read())
    with tz.TensorDeserializer(plain, device="cpu", lazy_load=True) as des:
        last = max(des._selected, key=lambda e: e.data_offset)
    data[last.data_offset + 5] ^= 0xFF
    with open(corrupt, "wb") as f:
        f.write(data)
    return {"dir": str(d), "plain": plain, "secret": secret, "corrupt": corrupt}


def _nginx_bytes(log: str) -> int:
    """Body bytes nginx sent, from its access log (combined format)."""
    with open(log) as f:
        return sum(int(m.group(1)) for m in re.finditer(r'" \d{3} (\d+) "', f.read()))


def _assert_all_equal(results: list[dict[str, Any]], want: dict[str, Any]) -> None:
    for r, got in enumerate(results):
        assert got["ok"], (r, got)
        assert got["tensors"] == want, f"rank {r} differs from a plain load"


def _local_jobs(files: dict[str, str]) -> list[dict[str, Any]]:
    plain, secret = files["plain"], files["secret"]
    return [
        {"src": plain},
        {"src": secret, "key": KEY.hex(), "verify_hash": True},
        {"src": plain, "prefix": "layers.", "verify_hash": True},
        {"src": plain, "module": True},
        {"src": plain, "dtype": "float16"},
    ]


def _failure_jobs(files: dict[str, str]) -> list[dict[str, Any]]:
    plain, secret, corrupt = files["plain"], files["secret"], files["corrupt"]
    return [
        # Rank 1 has the wrong key.
        {"src": secret, "key_by_rank": [KEY.hex(), WRONG_KEY.hex(), KEY.hex()]},
        # The last rank reads a corrupted copy; its hash check fails.
        {"src_by_rank": [plain, plain, corrupt], "verify_hash": True},
        # Rank 0 cannot open the file (a key for a file not encrypted).
        {"src": plain, "key_by_rank": [KEY.hex(), "", ""]},
        # Ranks that select different tensors are told so, not left hanging.
        {"src": plain, "prefix_by_rank": ["", "", "layers."]},
        # The group still works after those.
        {"src": plain},
        # Rank 2 dies: the others raise within the group's timeout.
        {"src": plain, "die": 2},
    ]


@pytest.fixture(scope="module")
def groups(files: dict[str, str]) -> Any:
    """Per world size, the results of one group that runs the local jobs
    (and, with 3 ranks, the failure jobs after them: one group start, which
    is most of a group's time, serves both tests), and its wall time."""
    cache: dict[int, tuple[list[list[dict[str, Any]]], float]] = {}

    def run(world: int) -> tuple[list[list[dict[str, Any]]], float]:
        if world not in cache:
            jobs = _local_jobs(files) + (_failure_jobs(files) if world == 3 else [])
            start = time.monotonic()
            results = _group(files["dir"], world, jobs, timeout=10)
            cache[world] = results, time.monotonic() - start
        return cache[world]

    return run


@pytest.mark.parametrize("world", [1, 2, 3])
def test_local_file_every_rank_gets_every_tensor(files: dict[str, str], groups: Any, world: int) -> None:
    plain, secret = files["plain"], files["secret"]
    results, _ = groups(world)
    by_job = list(zip(*results))
    assert len(by_job) >= len(_local_jobs(files)), results
    whole = _plain(plain)
    _assert_all_equal(list(by_job[0]), whole)
    _assert_all_equal(list(by_job[1]), _plain(secret, KEY))
    _assert_all_equal(list(by_job[2]), _plain(plain, prefix="layers."))
    # A module's state_dict names top-level tensors without the file's "."
    _assert_all_equal(list(by_job[3]), {name.lstrip("."): v for name, v in whole.items()})
    _assert_all_equal(list(by_job[4]), _plain(plain, dtype=torch.float16))
    # Together the ranks read each tensor once, plus each its own header and
    # index: at most the file plus (world - 1) indexes.
    size = os.path.getsize(plain)
    with tz.TensorDeserializer(plain, device="cpu", lazy_load=True) as d:
        index_bytes = d._reader.bytes_read()[0]
    read = sum(r["bytes"] for r in by_job[0])
    assert read <= size + (world - 1) * index_bytes, (read, size, index_bytes)
    if world > 1:
        assert max(r["bytes"] for r in by_job[0]) < size * 0.75


def test_failure_on_one_rank_raises_on_every_rank(files: dict[str, str], groups: Any) -> None:
    plain = files["plain"]
    results, seconds = groups(3)
    # No rank waited out more than the group's timeout (10 s) once.
    assert seconds < 60
    results = [r[len(_local_jobs(files)) :] for r in results]
    wrong_key = [r[0] for r in results]
    for got in wrong_key:
        assert not got["ok"] and got["type"] == "CooperativeLoadError" and got["rank"] == 1, got
        assert "rank 1" in got["message"] and "CryptographyError" in got["message"]
    corrupted = [r[1] for r in results]
    for got in corrupted:
        assert not got["ok"] and got["rank"] == 2 and "HashMismatchError" in got["message"], got
        assert got["tensor"] is not None
    for got in [r[2] for r in results]:
        assert not got["ok"] and got["type"] == "CooperativeLoadError" and got["rank"] == 0, got
        assert "CryptographyError" in got["message"] and "not encrypted" in got["message"]
    for got in [r[3] for r in results]:
        assert not got["ok"] and got["type"] == "CooperativeLoadError" and got["rank"] is None, got
        assert "same tensors" in got["message"]
    whole = _plain(plain)
    _assert_all_equal([r[4] for r in results], whole)
    survivors = [r[5] for r in results[:2]]
    for got in survivors:
        assert not got["ok"] and got["seconds"] < 15, got


def test_http_s3_and_redis_serve_the_file_once(files: dict[str, str]) -> None:
    import redis as redis_py

    plain = files["plain"]
    size = os.path.getsize(plain)
    whole = _plain(plain)
    log = os.path.join(files["dir"], "access.log")
    with (
        remote_servers.nginx(files["dir"], f"access_log {log};") as base,
        remote_servers.s3_bucket() as (endpoint, client),
        remote_servers.redis() as port,
    ):
        client.upload_file(plain, "models", "model.tensors")  # type: ignore[attr-defined]
        with tz.TensorDeserializer(plain, lazy_load=True) as d, redis_py.Redis(host="127.0.0.1", port=port) as r:
            d.to_redis(r, "model")
        s3 = remote_servers.s3_credentials(endpoint)
        jobs = [
            {"src": f"{base}/model.tensors"},
            {"src": "s3://models/model.tensors", "s3": s3},
            {"src": f"redis://127.0.0.1:{port}/model", "verify_hash": True},
        ]
        results = _group(files["dir"], 2, jobs)
        served = _nginx_bytes(log)
    http, s3_job, redis_job = [r[0] for r in results], [r[1] for r in results], [r[2] for r in results]
    for job in (http, s3_job, redis_job):
        _assert_all_equal(job, whole)
    # The readers read about the file once; nginx served that, plus at most
    # each rank's opening request (the first MiB, kept for the header and
    # index: the readers count what they take from it, not what it cost).
    for job in (http, s3_job, redis_job):
        read = sum(r["bytes"] for r in job)
        assert size <= read < size * 1.1, (read, size)
    assert sum(r["bytes"] for r in http) - (1 << 20) <= served <= size + 2 * (1 << 20), served


def test_process_group_needs_an_eager_load_and_torch_distributed(files: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="lazy_load"):
        tz.TensorDeserializer(files["plain"], lazy_load=True, process_group=object())
    if not torch.distributed.is_initialized():
        with pytest.raises(RuntimeError, match="not initialized"):
            tz.TensorDeserializer(files["plain"], device="cpu", process_group=object())


@pytest.mark.parametrize("scheme", ["gs", "az"])
def test_gcs_and_azure_serve_the_file_once(
    files: dict[str, str], scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cloud stores (object_store) go through the same share plan: each
    rank reads its share, about the file once in all."""
    plain = files["plain"]
    size = os.path.getsize(plain)
    whole = _plain(plain)
    server = remote_servers.gcs if scheme == "gs" else remote_servers.azurite
    with server() as env:
        for k, v in env.items():
            monkeypatch.setenv(k, v)  # the workers inherit it
        uri = f"{scheme}://tzr/model.tensors"
        with open(plain, "rb") as src, tz.stream_io.open_stream(uri, "wb") as dst:
            dst.write(src.read())
        results = _group(files["dir"], 2, [{"src": uri, "verify_hash": True}])
    job = [r[0] for r in results]
    _assert_all_equal(job, whole)
    read = sum(r["bytes"] for r in job)
    assert size <= read < size * 1.1, (read, size)
