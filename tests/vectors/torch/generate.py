#!/usr/bin/env python3
"""Generate the committed torch.save checkpoint vectors for tensorizer-rs.

Good vectors are written by the real ``torch.save`` (torch 2.15.0), except
``big_endian.pt``, which torch cannot write on a little-endian host: it is
crafted from torch's own ``data.pkl`` with a ``byteorder`` record of ``big``
and every storage byte-swapped per element, then checked with ``torch.load``.

Hostile vectors are refused by the Rust reader with the error recorded in
the manifest. Bombs (memo, nesting, billion laughs) and truncations are built
by the Rust tests themselves, so they are not committed here.

``manifest.json`` lists, for each good vector and each state-dict leaf in
pickle order (depth first): its path components, and for tensors the dtype,
shape, stride, storage offset, storage key, requires_grad and the SHA-256 of
``tensor.contiguous()``'s bytes in little-endian order.

Usage (no network needed)::

    /work/main/.venv-test/bin/python tests/vectors/torch/generate.py [--out DIR] [--verify]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import os
import pickle
import sys
import tempfile
import zipfile

import warnings

import torch

warnings.filterwarnings("ignore", message="ComplexHalf support is experimental")

HERE = os.path.dirname(os.path.abspath(__file__))


def le_bytes(t: torch.Tensor) -> bytes:
    """The contiguous element bytes, little-endian (the host order here)."""
    assert sys.byteorder == "little"
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def describe(obj, path=()):
    """Leaves of a state dict in pickle order, as manifest entries."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += describe(v, path + (k,))
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        for i, v in enumerate(obj):
            out += describe(v, path + (i,))
    elif isinstance(obj, torch.Tensor):
        out.append(
            {
                "path": list(path),
                "kind": "tensor",
                "dtype": str(obj.dtype).removeprefix("torch."),
                "shape": list(obj.shape),
                "stride": list(obj.stride()),
                "storage_offset": obj.storage_offset(),
                "requires_grad": bool(obj.requires_grad),
                "sha256": hashlib.sha256(le_bytes(obj)).hexdigest(),
            }
        )
    elif obj is None:
        out.append({"path": list(path), "kind": "none"})
    elif isinstance(obj, bool):
        out.append({"path": list(path), "kind": "bool", "value": obj})
    elif isinstance(obj, int):
        out.append({"path": list(path), "kind": "int", "value": obj})
    elif isinstance(obj, float):
        out.append({"path": list(path), "kind": "float", "value": obj})
    elif isinstance(obj, str):
        out.append({"path": list(path), "kind": "str", "value": obj})
    else:
        raise TypeError(f"unexpected leaf {type(obj)} at {path}")
    return out


def mark_sharing(obj, entries):
    """Adds `shares_storage_with`: the index of the first tensor entry with
    the same storage (itself when it is the first)."""
    ptrs = []

    def tensors(o):
        if isinstance(o, dict):
            for v in o.values():
                yield from tensors(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                yield from tensors(v)
        elif isinstance(o, torch.Tensor):
            yield o
        else:
            yield None

    for entry, t in zip(entries, tensors(obj)):
        if t is None:
            continue
        # Empty storages all have a null pointer but are saved separately.
        ptr = t.untyped_storage().data_ptr() if t.untyped_storage().nbytes() else object()
        first = next((i for i, p in ptrs if p == ptr), None)
        index = entries.index(entry)
        entry["shares_storage_with"] = index if first is None else first
        ptrs.append((index, ptr))
    return entries


def saved(obj, **kw) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf, **kw)
    return buf.getvalue()


def fixed(name: str, compression=zipfile.ZIP_STORED) -> zipfile.ZipInfo:
    """An entry with a fixed timestamp, so crafted files are reproducible."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = compression
    return info


def rezip(src: bytes, compression=zipfile.ZIP_STORED, rename=None, replace=None) -> bytes:
    """Rewrites an archive entry by entry with Python's zipfile (no 64-byte
    alignment, no data descriptors, no ZIP64 end record)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(src)) as zin, zipfile.ZipFile(out, "w", compression) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if replace and info.filename in replace:
                data = replace[info.filename]
                if data is None:
                    continue
            zout.writestr(fixed(info.filename, compression), data)
    return out.getvalue()


# ---- good vectors ------------------------------------------------------

ALL_DTYPES = [
    "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "complex32",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    "float4_e2m1fn_x2", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2",
]


def dtype_tensor(name: str, gen: torch.Generator) -> torch.Tensor:
    dt = getattr(torch, name)
    n = 6
    raw = torch.randint(0, 256, (n * dt.itemsize,), dtype=torch.uint8, generator=gen)
    if dt == torch.bool:
        return raw[:n] % 2 == 1
    return raw.view(dt).reshape(2, 3)


def dtypes_dict():
    gen = torch.Generator().manual_seed(1)
    return collections.OrderedDict((name, dtype_tensor(name, gen)) for name in ALL_DTYPES)


def nested_dict():
    gen = torch.Generator().manual_seed(2)
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return {
        "model": {"encoder": {"weight": r(3, 2), "bias": r(3)}, "layers": [r(2), {"w": r(1, 2)}]},
        "optimizer": {"step": 12, "lr": 0.125, "name": "adam", "betas": (0.9, 0.999), "flag": True, "none": None},
        7: r(2),
    }


def views_dict():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    shared = torch.arange(10, dtype=torch.int64)
    return collections.OrderedDict(
        [
            ("base", base),
            ("transposed", base.t()),
            ("column", base[:, 2]),
            ("offset", base[2:]),
            ("strided", base[1::2, ::3]),
            ("tied_a", shared),
            ("tied_b", shared),
            ("tied_slice", shared[3:7]),
            ("expanded", torch.tensor([1.5, 2.5]).expand(3, 2)),
            ("scalar", torch.tensor(3.25, dtype=torch.float64)),
            ("empty", torch.zeros(0, 3)),
            ("empty_bf16", torch.zeros(2, 0, dtype=torch.bfloat16)),
        ]
    )


def module_state_dict():
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    sd = m.state_dict()
    assert hasattr(sd, "_metadata")
    return sd


def params_dict():
    torch.manual_seed(4)
    return {
        "weight": torch.nn.Parameter(torch.randn(2, 2)),
        "frozen": torch.nn.Parameter(torch.randn(3), requires_grad=False),
        "plain": torch.randn(2),
    }


def big_endian_dict():
    return collections.OrderedDict(
        [
            ("f32", torch.tensor([1.0, -2.5, 3.75])),
            ("i64", torch.tensor([[1, 2], [3, -4]], dtype=torch.int64).t()),
            ("f16", torch.tensor([0.5, 1.5], dtype=torch.float16)),
            ("c64", torch.tensor([1 + 2j, -3 - 4j], dtype=torch.complex64)),
            ("u8", torch.tensor([1, 2, 3], dtype=torch.uint8)),
        ]
    )


# ---- hostile vectors ---------------------------------------------------


class Reduces:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


class FakeStorage:
    def __init__(self, numel):
        self.numel = numel


class FakeTensor:
    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def __reduce__(self):
        return (
            torch._utils._rebuild_tensor_v2,
            (self.storage, self.offset, self.size, self.stride, False, collections.OrderedDict()),
        )


class FakePickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, FakeStorage):
            return ("storage", torch.FloatStorage, "0", "cpu", obj.numel)
        return None


def crafted(obj, storage: bytes) -> bytes:
    """A zip checkpoint whose data.pkl pickles `obj` with fake storages."""
    pkl = io.BytesIO()
    FakePickler(pkl, protocol=2).dump(obj)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(fixed("archive/data.pkl"), pkl.getvalue())
        z.writestr(fixed("archive/data/0"), storage)
        z.writestr(fixed("archive/version"), b"3\n")
    return out.getvalue()


def hostile():
    small = saved({"w": torch.ones(2)})
    return [
        ("hostile_os_system.pt", saved({"x": Reduces(os.system, ("echo pwned",))}),
         # Protocol 2 names Python 3's builtins `__builtin__`; os.system is posix.system.
         {"error": "ForbiddenGlobal", "module": os.system.__module__, "name": "system"}),
        ("hostile_eval.pt", saved({"x": Reduces(eval, ("1+1",))}),
         {"error": "ForbiddenGlobal", "module": "__builtin__", "name": "eval"}),
        ("hostile_short_view.pt", crafted({"w": FakeTensor(FakeStorage(2), 1, (4,), (1,))}, b"\0" * 8),
         {"error": "CorruptCheckpoint"}),
        ("hostile_short_storage.pt", crafted({"w": FakeTensor(FakeStorage(4), 0, (4,), (1,))}, b"\0" * 12),
         {"error": "CorruptCheckpoint"}),
        ("hostile_deflated.pt", rezip(small, zipfile.ZIP_DEFLATED), {"error": "CompressedEntry"}),
        ("hostile_legacy.pt", saved({"w": torch.ones(2)}, _use_new_zipfile_serialization=False),
         {"error": "LegacyTorchCheckpoint"}),
        ("hostile_bcomplex32.pt", saved({"w": torch.zeros(4, dtype=torch.int16).view(torch.bcomplex32)}),
         {"error": "UnsupportedDtype"}),
        ("hostile_module.pt", saved(torch.nn.Linear(1, 1)), {"error": "ForbiddenGlobal"}),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--verify", action="store_true", help="compare with the committed files instead of writing")
    args = ap.parse_args()
    torch.manual_seed(0)

    good = []
    for name, make, to_path in [
        ("dtypes.pt", dtypes_dict, False),
        ("nested.pt", nested_dict, False),
        ("views.pt", views_dict, False),
        ("module.pt", module_state_dict, True),
        ("params.pt", params_dict, False),
    ]:
        obj = make()
        if to_path:
            # Saved to a path, so the top-level folder is the file stem.
            with tempfile.TemporaryDirectory() as d:
                p = os.path.join(d, name)
                torch.save(obj, p)
                data = open(p, "rb").read()
        else:
            data = saved(obj)
        back = torch.load(io.BytesIO(data), weights_only=True)
        assert describe(back) == describe(obj), name
        good.append((name, data, obj, "little"))

    be_obj = big_endian_dict()
    little = saved(be_obj)
    sd = torch.load(io.BytesIO(little), weights_only=True)
    replace = {"archive/byteorder": b"big"}
    with zipfile.ZipFile(io.BytesIO(little)) as z:
        for key, t in enumerate(sd.values()):  # one storage per tensor, keys in order
            w = t.dtype.itemsize // (2 if t.dtype.is_complex else 1)
            data = z.read(f"archive/data/{key}")
            assert len(data) == t.untyped_storage().nbytes()
            replace[f"archive/data/{key}"] = b"".join(data[i : i + w][::-1] for i in range(0, len(data), w))
    be = rezip(little, replace=replace)
    back = torch.load(io.BytesIO(be), weights_only=True)
    for k, v in be_obj.items():
        assert torch.equal(back[k], v), k
    good.append(("big_endian.pt", be, be_obj, "big"))

    manifest = {
        "generator": "tests/vectors/torch/generate.py",
        "torch_version": torch.__version__,
        "vectors": [],
        "hostile": [],
    }
    files = {}
    for name, data, obj, order in good:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            prefix = z.namelist()[0].split("/", 1)[0]
        manifest["vectors"].append(
            {"file": name, "prefix": prefix, "byteorder": order, "size": len(data), "entries": mark_sharing(obj, describe(obj))}
        )
        files[name] = data
    for name, data, expect in hostile():
        manifest["hostile"].append({"file": name, **expect})
        files[name] = data
    files["manifest.json"] = (json.dumps(manifest, indent=1) + "\n").encode()
    total = sum(len(d) for d in files.values())
    assert total < 512 * 1024, total

    if args.verify:
        # hostile_legacy.pt embeds object ids, so its bytes change every run.
        bad = [
            name
            for name, data in files.items()
            if name != "hostile_legacy.pt" and open(os.path.join(args.out, name), "rb").read() != data
        ]
        if bad:
            sys.exit(f"differ from a fresh run: {bad}")
        print(f"all {len(files)} files match a fresh run")
        return
    for name, data in files.items():
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files, {total} bytes")


if __name__ == "__main__":
    main()
