"""No false alarm on what torch loads safely (spec §22.4): a matrix of benign
checkpoints written with ``torch.save``, with ``torch.load(weights_only=True)``
as the oracle. Whatever torch's restricted unpickler loads, the scanner
reports with no warning or error."""

from __future__ import annotations

import collections
import pickle

import pytest
import torch

import tensorizer_rs

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.complex128,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.bool,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def _dtypes() -> dict:
    return {str(t): torch.zeros(3).to(t) for t in DTYPES}


def _sparse() -> dict:
    i = torch.tensor([[0, 1], [1, 0]])
    coo = torch.sparse_coo_tensor(i, torch.tensor([1.0, 2.0]), (2, 2))
    return {"coo": coo, "csr": torch.eye(3).to_sparse_csr()}


def _quantized() -> dict:
    x = torch.randn(4, 3)
    per_tensor = torch.quantize_per_tensor(x, 0.1, 3, torch.qint8)
    scales, points = torch.tensor([0.1, 0.2, 0.3, 0.4]), torch.tensor([0, 1, 2, 3])
    per_channel = torch.quantize_per_channel(x, scales, points, 0, torch.quint8)
    torch.manual_seed(0)
    return {"per_tensor": per_tensor, "per_channel": per_channel}


def _optimizer_and_scheduler() -> dict:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    sched.step()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sgd.step()
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(sgd, 10)
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "sgd": sgd.state_dict(),
        "cosine": cosine.state_dict(),
    }


def _containers() -> dict:
    base = torch.arange(12.0)
    return {
        "bytes": b"\x00\xffraw bytes",
        "bytearray": bytearray(b"abc"),
        "size": torch.Size([2, 3]),
        "nested": {"a": [1, 2.5, (3, "x")], "b": {"c": None, "d": True}, "e": {1, 2}},
        "complex": 1 + 2j,
        "ordered": collections.OrderedDict(w=torch.ones(2)),
        "views": [base, base[2:5], base.view(3, 4)[1], base.view(3, 4).t()],
        "parameter": torch.nn.Parameter(torch.ones(2)),
        "device": torch.device("cpu"),
        "dtype": torch.float16,
    }


def _legacy_dtypes() -> dict:
    # The dtypes torch's legacy stream reloads (it has no storage for the
    # unsigned 16- to 64-bit and float8 types).
    return {k: v for k, v in _dtypes().items() if not k.startswith(("torch.uint", "torch.float8"))} | {
        "uint8": torch.zeros(2, dtype=torch.uint8)
    }


OBJECTS = {
    "dtypes": _dtypes,
    "legacy_dtypes": _legacy_dtypes,
    "sparse": _sparse,
    "quantized": _quantized,
    "optimizer": _optimizer_and_scheduler,
    "containers": _containers,
}

# (pickle protocol, zip archive): torch.save's legacy stream and its zip.
WRITERS = [(p, z) for p in (2, 3, 4, 5) for z in (True, False)]


@pytest.mark.parametrize("protocol,use_zip", WRITERS, ids=[f"p{p}-{'zip' if z else 'legacy'}" for p, z in WRITERS])
@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_what_weights_only_loads_scans_clean(tmp_path, kind, protocol, use_zip):
    # torch's restricted unpickler reads protocol 2 only (protocol 3's
    # SHORT_BINBYTES and 4's FRAME are "unsupported operands"), so the oracle
    # loads the same object saved at protocol 2: the protocol changes how
    # values are encoded, never which globals the pickle imports or calls.
    obj = OBJECTS[kind]()
    oracle, path = tmp_path / "oracle.pt", tmp_path / f"{kind}.pt"
    torch.save(obj, oracle, pickle_protocol=2, _use_new_zipfile_serialization=use_zip)
    try:
        torch.load(oracle, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError) as e:
        pytest.skip(f"torch.load(weights_only=True) refuses it: {str(e)[:200]}")
    torch.save(obj, path, pickle_protocol=protocol, _use_new_zipfile_serialization=use_zip)
    report = tensorizer_rs.scan(path)
    loud = [f for f in report["findings"] if f["severity"] in ("error", "warning")]
    assert loud == [], (report["format"], loud)


def test_the_oracle_refuses_what_the_scanner_flags(tmp_path):
    """The matrix's counterpart: a callable torch refuses is an error."""
    path = tmp_path / "hostile.pt"
    torch.save({"f": print}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    report = tensorizer_rs.scan(path)
    assert any(f["severity"] == "error" and "builtin__.print" in f["message"] for f in report["findings"])


def test_objects_weights_only_refuses_but_that_run_no_code_are_a_named_warning(tmp_path):
    import argparse

    import numpy as np

    objects = {
        "module": torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()),
        "numpy": {"a": np.arange(3.0), "s": np.float64(1.5)},
        "namespace": argparse.Namespace(lr=0.1),
    }
    for name, obj in objects.items():
        for protocol in (2, 4):
            path = tmp_path / f"{name}-{protocol}.pt"
            torch.save(obj, path, pickle_protocol=protocol)
            findings = tensorizer_rs.scan(path)["findings"]
            assert findings and {(f["rule"], f["severity"]) for f in findings} == {("PKL-007", "warning")}, (
                name,
                findings,
            )
