#!/usr/bin/env python3
"""Per-tensor cost of each way into a loaded file: 20,000 tensors of 16
float32, best of 7, microseconds per tensor, no page-touch pass (the data
is 1.25 MiB; what is measured is the per-tensor work).

Ways: ``dict(d.items())``, iterating keys and indexing, ``read_tensors``
on a lazy deserializer, a lazy deserializer indexed in file order, and
``load_into_module`` of a module with 20,000 parameters.

Usage::

    OPENBLAS_NUM_THREADS=1 .venv-test/bin/python python/bench/bench_paths.py
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from typing import Callable

import torch

import tensorizer_rs as rs

N = 20_000


class Wide(torch.nn.Module):
    """One module with N small parameters."""

    def __init__(self) -> None:
        super().__init__()
        for i in range(N):
            self.register_parameter(f"p{i}", torch.nn.Parameter(torch.empty(16)))


def best(f: Callable[[], object], reps: int = 7) -> float:
    """Best time of `f` over `reps` runs, in microseconds per tensor."""
    out = float("inf")
    for _ in range(reps):
        gc.collect()
        t = time.perf_counter()
        f()
        out = min(out, time.perf_counter() - t)
    return out / N * 1e6


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        flat = os.path.join(tmp, "flat.tensors")
        s = rs.TensorSerializer(flat)
        s.write_state_dict({f"layer.{i}.w": torch.randn(16) for i in range(N)})
        s.close()
        wide_path = os.path.join(tmp, "wide.tensors")
        s = rs.TensorSerializer(wide_path)
        s.write_module(Wide())
        s.close()
        target = Wide()

        def items() -> None:
            with rs.TensorDeserializer(flat) as d:
                dict(d.items())

        def keys_index() -> None:
            with rs.TensorDeserializer(flat) as d:
                [d[k] for k in d.keys()]

        def read_tensors() -> None:
            with rs.TensorDeserializer(flat, lazy_load=True) as d:
                list(d.read_tensors())

        def lazy_in_order() -> None:
            with rs.TensorDeserializer(flat, lazy_load=True) as d:
                [d[k] for k in d]

        def into_module() -> None:
            with rs.TensorDeserializer(wide_path) as d:
                d.load_into_module(target)

        print("| way in | µs per tensor (best of 7) |")
        print("|---|---|")
        for name, f in (
            ("`dict(d.items())`", items),
            ("keys, then `d[k]`", keys_index),
            ("`read_tensors()`, lazy", read_tensors),
            ("lazy, `d[k]` in file order", lazy_in_order),
            ("`load_into_module`", into_module),
        ):
            print(f"| {name} | {best(f):.2f} |")


if __name__ == "__main__":
    main()
