"""Slice reads vs whole-tensor reads on a page-cached 256 MiB float32
tensor (8192 x 8192), in a torch.save checkpoint and a tensorizer file
(plain and encrypted): time and bytes read for the whole tensor, a row
shard and a column shard (tensor-parallel world size 8).

    .venv-test/bin/python python/tests/bench_slices.py [DIR]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import torch

from tensorizer_rs import DecryptionParams, EncryptionParams, TensorDeserializer, TensorSerializer, zipslicer


def _best(f, n=5):
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(d: str) -> None:
    w = torch.randn(8192, 8192)
    key = os.urandom(32)
    torch.save({"w": w}, f"{d}/m.pt")
    for name, enc in [("plain", None), ("enc", EncryptionParams(key))]:
        s = TensorSerializer(f"{d}/{name}.tensors", encryption=enc)
        s.write_state_dict({"w": w})
        s.close()
    for path in ("m.pt", "plain.tensors", "enc.tensors"):
        with open(f"{d}/{path}", "rb") as f:
            while f.read(64 << 20):
                pass
    sd = zipslicer.load(f"{d}/m.pt")
    cases = [("checkpoint", sd.get_slice("w"), lambda: sd["w"], sd.bytes_read)]
    for name, dec in [("tensorizer", None), ("encrypted", DecryptionParams.from_key(key))]:
        des = TensorDeserializer(f"{d}/{'enc' if dec else 'plain'}.tensors", device="cpu", lazy_load=True, encryption=dec)
        sl = des.get_slice("w")
        cases.append((name, sl, sl.read, des._reader.bytes_read))
    print(f"{'file':<12} {'read':<16} {'ms':>8} {'MiB read':>9} {'MiB out':>8}")
    for name, sl, whole, counter in cases:
        for what, f in [
            ("whole", whole),
            ("rows 1/8", lambda: sl.shard(0, 3, 8)),
            ("columns 1/8", lambda: sl.shard(1, 3, 8)),
            ("one row", lambda: sl[4000]),
            ("one column", lambda: sl[:, 4000]),
        ]:
            before = counter()[0]
            out = f()
            read = counter()[0] - before
            ms = _best(f) * 1e3
            print(f"{name:<12} {what:<16} {ms:8.2f} {read / 2**20:9.2f} {out.numel() * 4 / 2**20:8.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as d:
            main(d)
