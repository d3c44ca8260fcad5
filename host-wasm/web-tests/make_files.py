"""Writes the large inputs of the browser tests into OUT_DIR, once.

* big_1gib.tensors: 1 GiB in two float32 tensors, written by the real
  tensorizer (2.12.1), for the bytes-fetched bound and verify throughput;
* many_20k.tensors: 20,000 small tensors, written by tensorizer_rs (the
  real tensorizer's 256 KiB index cannot hold that many names), for the
  index-open time;
* model.safetensors: a few tensors of several dtypes, by safetensors.

Files that exist are kept; each is written to a temporary name first.
usage: python make_files.py OUT_DIR
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
TZR = [TARGET / "release" / "tzr", TARGET / "debug" / "tzr"]


def atomic(path: Path, write) -> None:  # type: ignore[no-untyped-def]
    if path.exists():
        return
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)
    print(f"wrote {path} ({path.stat().st_size} bytes)")


def big(path: Path) -> None:
    from tensorizer import TensorSerializer

    half = 1 << 27  # float32 elements: 512 MiB each
    g = torch.Generator().manual_seed(0)
    state = {
        "embed.weight": torch.zeros(half, dtype=torch.float32),
        "layers.0.weight": torch.rand(half, generator=g, dtype=torch.float32),
    }
    s = TensorSerializer(str(path))
    s.write_state_dict(state)
    s.close()


def many(path: Path) -> None:
    state = {f"model.layers.{i // 20}.block.w{i % 20}": torch.full((4,), float(i)) for i in range(20_000)}
    try:
        from tensorizer_rs import TensorSerializer
    except ImportError as e:
        # tensorizer_rs not built (or mid-rebuild): the same file through
        # safetensors and `tzr convert`.
        tzr = next((p for p in TZR if p.is_file()), None)
        if tzr is None:
            raise SystemExit(f"make_files.py: neither tensorizer_rs ({e}) nor a built tzr is available") from e
        from safetensors.torch import save_file

        st = path.with_name(path.name + ".safetensors")
        save_file(state, str(st))
        subprocess.run([str(tzr), "convert", "--to", "tensorizer", str(st), str(path)], check=True)
        st.unlink()
        return
    s = TensorSerializer(str(path))
    s.write_state_dict(state)
    s.close()


def safetensors_file(path: Path) -> None:
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(1)
    state = {
        "model.embed_tokens.weight": torch.rand((16, 8), generator=g, dtype=torch.float32),
        "model.layers.0.attn.q.weight": torch.rand((8, 8), generator=g).to(torch.bfloat16),
        "model.layers.0.attn.q.bias": torch.zeros(8, dtype=torch.float16),
        "model.layers.0.mask": torch.ones(5, dtype=torch.bool),
        "lm_head.ids": torch.arange(12, dtype=torch.int64).reshape(3, 4),
    }
    save_file(state, str(path), metadata={"format": "pt", "note": "browser test"})


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    atomic(out / "model.safetensors", safetensors_file)
    atomic(out / "many_20k.tensors", many)
    atomic(out / "big_1gib.tensors", big)


if __name__ == "__main__":
    main()
