"""One rank of a cooperative-load test or benchmark (test_distributed.py,
bench/bench_distributed.py): ``python distributed_worker.py SPEC RANK``.

SPEC is a JSON file: the group (``world``, ``init``: a file:// or tcp://
rendezvous, ``timeout`` in seconds) and ``jobs``, run in order in one gloo
group. Each job loads one file cooperatively and records, per rank, what it
loaded (dtype, shape and SHA-256 of each tensor's bytes), the bytes this
rank read from the store, the wall time and any error, into
``SPEC.RANK.json``. Job keys:

* ``src``: a path or URI, or ``src_by_rank`` (a list, one per rank);
* ``s3``: open_stream's S3 arguments, given to the URI through the
  environment, or with ``open_stream`` true to ``open_stream``;
* ``key`` / ``key_by_rank``: hex encryption key(s); ``verify_hash``;
* ``prefix`` / ``prefix_by_rank``: load only tensors whose name starts
  with it;
* ``dtype``: a torch dtype's name, for ``dtype=``;
* ``module``: load lazily, then ``load_into_module(process_group=...)``;
* ``group``: false for an independent load (no process group);
* ``die``: the rank that exits abruptly instead of loading;
* ``barrier``: start the clock after a barrier (for timings).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

import tensorizer_rs
from tensorizer_rs.stream_io import open_stream


class Model(torch.nn.Module):
    """The module the tests' files are written from (``module`` jobs load
    into a fresh one)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(512, 256)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(256 * (1 + k % 2), 256 * (2 - k % 2)) for k in range(8))
        self.head = torch.nn.Linear(256, 2048, dtype=torch.bfloat16)
        self.register_buffer("positions", torch.arange(4096, dtype=torch.int64))
        self.register_buffer("mask", torch.rand(300) > 0.5)
        self.register_buffer("scale", torch.tensor(0.5, dtype=torch.float64))


def digest(t: Any) -> list[Any]:
    data = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return [str(t.dtype), list(t.shape), hashlib.sha256(data).hexdigest()]


def run(job: dict[str, Any], rank: int) -> dict[str, Any]:
    if job.get("die") == rank:
        os._exit(3)
    src = job["src_by_rank"][rank] if "src_by_rank" in job else job["src"]
    if "s3" in job:
        s3 = job["s3"]
        if job.get("open_stream"):
            src = open_stream(src, **s3)
        else:  # a URI configured from the environment (opened for a part only)
            os.environ.update(S3_ENDPOINT_URL=s3["s3_endpoint"], AWS_ACCESS_KEY_ID=s3["s3_access_key_id"],
                              AWS_SECRET_ACCESS_KEY=s3["s3_secret_access_key"])
    key = job["key_by_rank"][rank] if "key_by_rank" in job else job.get("key")
    enc = tensorizer_rs.DecryptionParams.from_key(bytes.fromhex(key)) if key else None
    prefix = job["prefix_by_rank"][rank] if "prefix_by_rank" in job else job.get("prefix")
    keep = (lambda name: name.startswith(prefix)) if prefix else None
    group = dist.group.WORLD if job.get("group", True) else None
    out: dict[str, Any] = {"ok": True}
    if job.get("barrier"):
        dist.barrier()
    start = time.perf_counter()
    try:
        if job.get("module"):
            d = tensorizer_rs.TensorDeserializer(src, device="cpu", lazy_load=True, encryption=enc)
            m = tensorizer_rs.utils.no_init_or_tensor(Model)
            d.load_into_module(m, filter_func=keep, verify_hash=job.get("verify_hash"), process_group=group)
            tensors = {name: digest(t) for name, t in m.state_dict().items() if keep is None or keep(name)}
        else:
            d = tensorizer_rs.TensorDeserializer(
                src, device="cpu", filter_func=keep, encryption=enc, dtype=getattr(torch, job.get("dtype", ""), None),
                verify_hash=job.get("verify_hash", False), process_group=group,
            )
            tensors = {name: digest(t) for name, t in d.items()}
        out["seconds"] = time.perf_counter() - start
        out["tensors"] = tensors
        out["bytes"] = d._reader.bytes_read()[0]
        d.close()
    except Exception as exc:
        out = {
            "ok": False, "seconds": time.perf_counter() - start, "type": type(exc).__name__, "message": str(exc),
            "rank": getattr(exc, "rank", None), "tensor": getattr(exc, "tensor", None),
        }
    return out


def main() -> None:
    spec_path, rank = sys.argv[1], int(sys.argv[2])
    with open(spec_path) as f:
        spec = json.load(f)
    dist.init_process_group(
        "gloo", init_method=spec["init"], rank=rank, world_size=spec["world"],
        timeout=datetime.timedelta(seconds=spec.get("timeout", 30)),
    )
    results = []
    for job in spec["jobs"]:
        results.append(run(job, rank))
        with open(f"{spec_path}.{rank}.json", "w") as f:
            json.dump(results, f)  # what there is so far, should a later job kill the group
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
