"""Writing a model for vLLM: :func:`serialize_for_tp` and its command line,
``python -m tensorizer_rs.vllm``.

A Hugging Face model folder (``*.safetensors`` shards, or ``*.bin``/``*.pt``
torch shards when there are none), a state dict or an ``nn.Module`` becomes
one file per tensor-parallel rank, each holding every tensor under its
Hugging Face name::

    tensorizer_rs.vllm.serialize_for_tp("Qwen2-0.5B/", "s3://bucket/qwen-%02d.tensors", 2)

    python -m tensorizer_rs.vllm Qwen2-0.5B/ s3://bucket/qwen-%02d.tensors --tp-size 2

Both ``--load-format tensorizer_rs`` (``{"uri": OUT_URI}``) and vLLM's
built-in ``--load-format tensorizer`` (``{"tensorizer_uri": OUT_URI}``)
read them. vLLM's built-in format needs, at a tensor-parallel size above 1,
a URI with a ``%0Nd`` directive (one digit N), which it formats with the
rank, and it hands a file that vLLM did not write itself (Hugging Face
names) to the model's ``load_weights`` whole: each rank's model cuts its
own share. So every rank's file holds the full set.

:func:`load_tp_share` is the other way round, for the plugin's
``tp_slices``: one file at full size, named as the model's own parameters,
from which each rank reads only its share.

This module does not import vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import _native
from ._convert import convert
from ._crypt import EncryptionParams
from ._deserializer import TensorDeserializer
from ._serializer import TensorSerializer
from ._shards import load_shards
from ._slices import shard_range

__all__ = [
    "RANK_DIRECTIVE", "fused_ranges", "load_tp_share", "rank_uris", "serialize_for_tp", "tp_slice_plan",
    "weight_files",
]  # fmt: skip

#: The rank directive vLLM 0.33's tensorizer format recognises in a URI
#: (``TensorizerConfig._is_sharded``): ``%0`` and one digit, then ``d``.
RANK_DIRECTIVE = re.compile(r"%0\dd")
#: Files of a model folder that hold training state, not weights (vLLM
#: skips them too).
_NOT_WEIGHTS = frozenset({"training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt"})
#: tensorizer's own index reservation, the least an output reserves.
_MIN_INDEX = 256 * 1024
#: Index entry bytes besides the name, the dtype and the shape (spec §4.3),
#: with the 4-byte tag of a versioned index.
_ENTRY_FIXED = 33
#: The longest dtype string (spec §6.3: ``|V1\0torch.float4_e2m1fn_x2`` is
#: 27 bytes), rounded up.
_MAX_DTYPE_LEN = 32
#: The largest safetensors header read to size the index (the safetensors
#: format's own limit).
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


def rank_uris(out_uri: str, tp_size: int) -> list[str]:
    """The file each rank reads: ``out_uri`` itself at size 1, else
    ``out_uri`` with its ``%0Nd`` formatted with each rank.

    Raises ``ValueError`` for a size below 1, a size above 1 without a
    ``%0Nd`` directive (vLLM could not find the ranks' files), and a
    directive at size 1 (vLLM reads the URI as written there, directive
    and all)."""
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise ValueError(f"tp_size must be a whole number ≥ 1, not {tp_size!r}")
    found = RANK_DIRECTIVE.findall(out_uri)
    if tp_size == 1:
        if found:
            raise ValueError(
                f"{out_uri!r}: at tensor-parallel size 1 vLLM reads the URI as written; give one without {found[0]}"
            )
        return [out_uri]
    if len(found) != 1:
        raise ValueError(
            f"{out_uri!r}: at tensor-parallel size {tp_size} the URI needs one rank directive such as %02d "
            "(vLLM's tensorizer format formats it with each rank)"
        )
    return [RANK_DIRECTIVE.sub(lambda m: m.group(0) % rank, out_uri) for rank in range(tp_size)]


def weight_files(folder: str | os.PathLike[str]) -> list[Path]:
    """A Hugging Face model folder's weight files, as vLLM picks them: its
    ``*.safetensors`` files, else ``*.bin``, else ``*.pt`` (not training
    state such as ``optimizer.pt``); where the folder has the matching
    ``*.index.json``, only the files its ``weight_map`` names."""
    root = Path(folder)
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a model folder")
    for pattern in ("*.safetensors", "*.bin", "*.pt"):
        found = sorted(p for p in root.glob(pattern) if p.is_file() and p.name not in _NOT_WEIGHTS)
        if not found:
            continue
        indexes = sorted(root.glob(pattern + ".index.json"))
        if indexes:
            named = set(json.loads(indexes[0].read_text())["weight_map"].values())
            found = [p for p in found if p.name in named]
        return found
    raise FileNotFoundError(f"{root}: no *.safetensors, *.bin or *.pt weight files")


def _stored_tensors(path: Path) -> list[tuple[str, int]]:
    """(name, number of dimensions) of each tensor in a weight file, from
    its header alone: a safetensors file's JSON header, a torch
    checkpoint's pickle."""
    if path.suffix == ".safetensors":
        with path.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if size > _MAX_SAFETENSORS_HEADER:
                raise ValueError(f"{path}: a safetensors header of {size} bytes (the format allows 100 MiB)")
            header = json.loads(f.read(size))
        return [(k, len(v["shape"])) for k, v in header.items() if k != "__metadata__"]
    entries = _native.NativeCheckpoint(str(path)).entries()
    return [(".".join(map(str, e.path)), len(e.shape)) for e in entries if e.kind == "tensor"]


def _index_len(files: Sequence[Path]) -> int:
    """Index bytes the files' tensors can need (spec §4.3: tagged entries,
    8-byte dimensions, the longest dtype), at least tensorizer's 256 KiB."""
    needed = sum(
        _ENTRY_FIXED + len(name.encode()) + _MAX_DTYPE_LEN + 8 * ndim
        for f in files
        for name, ndim in _stored_tensors(f)
    )
    return max(_MIN_INDEX, needed)


def _shards(files: Sequence[Path], scratch: str) -> Iterator[dict[str, Any]]:
    """Each weight file's tensors on the CPU, one file at a time: converted
    into `scratch`, read, then deleted."""
    for f in files:
        converted = os.path.join(scratch, "shard.tensors")
        convert(f, converted)
        with TensorDeserializer(converted, device="cpu", lazy_load=True) as d:
            yield {str(name): tensor for name, tensor in d.items()}
        os.remove(converted)


def _state_dict_of(source: Any) -> Mapping[str, Any]:
    state = source.state_dict() if hasattr(source, "state_dict") else source
    if not isinstance(state, Mapping):
        raise TypeError(
            f"source must be a model folder, a state dict or a torch.nn.Module, not {type(source).__name__}"
        )
    return state


def serialize_for_tp(
    source: Any,
    out_uri: str,
    tp_size: int,
    *,
    encryption: EncryptionParams | None = None,
) -> list[str]:
    """Writes `source`'s tensors, under their Hugging Face names, to one
    file per tensor-parallel rank (:func:`rank_uris`), for vLLM.

    Args:
        source: A Hugging Face model folder (see :func:`weight_files`), a
            state dict, or an ``nn.Module`` (its ``state_dict()``).
        out_uri: A local path or any URI ``TensorSerializer`` writes
            (``s3://``, ``gs://``, ``az://``, ...), with a ``%0Nd``
            directive such as ``%02d`` when `tp_size` is above 1.
        tp_size: vLLM's ``--tensor-parallel-size``.
        encryption: Encrypts every file with these parameters (the plugin's
            ``key_*``/``passphrase_*`` keys, or vLLM's
            ``encryption_keyfile``, decrypt them).

    Returns the URIs written, rank 0 first. Each file is written whole or
    not at all. A folder's weight files are converted one at a time into a
    scratch folder beside the first output (the system's temporary folder
    for a remote one), which holds one of them at a time; memory holds one
    file's tensors.

    Raises:
        ValueError: a bad `tp_size` or `out_uri` (:func:`rank_uris`), or
            two shards holding a tensor of the same name.
        FileNotFoundError: a folder without weight files.
    """
    uris = rank_uris(os.fspath(out_uri), tp_size)
    if isinstance(source, (str, os.PathLike)):
        files = weight_files(source)
        local = "://" not in uris[0]
        scratch_dir = os.path.dirname(os.path.abspath(uris[0])) if local else None
        if scratch_dir is not None:
            os.makedirs(scratch_dir, exist_ok=True)
        capacity = _index_len(files)
        with tempfile.TemporaryDirectory(prefix=".tensorizer-rs-", dir=scratch_dir) as scratch:
            _write(uris, _shards(files, scratch), capacity, encryption)
    else:
        _write(uris, iter([dict(_state_dict_of(source))]), None, encryption)
    return uris


def _write(
    uris: Sequence[str], shards: Iterator[dict[str, Any]], capacity: int | None, encryption: EncryptionParams | None
) -> None:
    """Every shard to every URI (all are aborted if one fails)."""
    with contextlib.ExitStack() as stack:
        outs = [
            stack.enter_context(TensorSerializer(u, encryption=encryption, metadata_capacity=capacity)) for u in uris
        ]
        seen: set[str] = set()
        for shard in shards:
            again = seen.intersection(shard)
            if again:
                raise ValueError(f"more than one weight file holds {sorted(again)[:3]}")
            seen.update(shard)
            for s in outs:
                s.write_state_dict(shard)


# -- one file, each rank's share ---------------------------------------------


def tp_slice_plan(
    stored: Mapping[str, Sequence[int]],
    targets: Mapping[str, Sequence[int]],
    rank: int,
    world_size: int,
    *,
    fused: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, int | None]:
    """Each stored tensor's name to the dimension rank `rank`'s share is
    cut along, or ``None`` to load it whole.

    `stored` gives the file's full shapes, `targets` this rank's parameter
    shapes, by the same names. A tensor whose target shape is its stored
    shape loads whole; one whose shapes differ in exactly one dimension,
    where the target is ``shard_range(stored, rank, world_size)``'s length,
    is cut along it. `fused` names the tensors of fused layers (vLLM's
    ``QKVParallelLinear``, ``MergedColumnParallelLinear``) with their
    layer's ``output_sizes``: blocks side by side along the cut dimension,
    each cut on its own (:func:`fused_ranges`). Anything else raises
    ``ValueError`` naming the tensor (a name the model lacks, a padded or
    reshaped parameter, a fused layer whose blocks are not cut evenly).
    """
    plan: dict[str, int | None] = {}
    for name, full in stored.items():
        target = targets.get(name)
        if target is None:
            raise ValueError(f"the file holds {name!r}, which the model has no parameter or buffer for")
        full, target = tuple(full), tuple(target)
        if full == target:
            plan[name] = None
            continue
        differ = [d for d, (a, b) in enumerate(zip(full, target)) if a != b]
        cut = differ[0] if len(full) == len(target) and len(differ) == 1 else None
        share = None if cut is None else shard_range(full[cut], rank, world_size)
        if share is None or cut is None or share.stop - share.start != target[cut]:
            raise ValueError(
                f"{name!r}: the file's shape {list(full)} is not rank {rank} of {world_size}'s "
                f"parameter shape {list(target)} cut along one dimension"
            )
        if fused and name in fused:
            fused_ranges(name, full[cut], fused[name], rank, world_size)
        plan[name] = cut
    return plan


def fused_ranges(name: str, size: int, blocks: Sequence[int], rank: int, world_size: int) -> list[slice]:
    """Rank `rank`'s positions of a fused tensor of `size` along its cut
    dimension: its share of each block of `blocks` (the layer's full
    ``output_sizes``), in order. Raises ``ValueError`` when the blocks do
    not add up to `size` (vLLM replicates key/value heads when there are
    fewer than ranks) or one does not divide evenly."""
    if sum(blocks) != size or any(b % world_size for b in blocks):
        raise ValueError(
            f"{name!r}: a fused layer whose blocks {list(blocks)} are not {size} positions cut evenly "
            f"{world_size} ways (replicated key/value heads?); write one file per rank (serialize_for_tp) instead"
        )
    out, start = [], 0
    for b in blocks:
        part = shard_range(b, rank, world_size, even=True)
        out.append(slice(start + part.start, start + part.stop))
        start += b
    return out


def _fused_blocks(model: Any) -> dict[str, list[int]]:
    """The tensors of `model`'s fused layers (modules with several
    ``output_sizes``, as vLLM's merged linear layers have), with those
    sizes."""
    found = {}
    for prefix, module in model.named_modules():
        sizes = [int(n) for n in getattr(module, "output_sizes", None) or ()]
        if len(sizes) > 1:
            for name, _ in module.named_parameters(prefix=prefix):
                found[name] = sizes
    return found


def load_tp_share(model: Any, uri: str, rank: int, world_size: int, **options: Any) -> Iterator[tuple[str, Any]]:
    """Rank `rank`'s share of one file at full size, as (parameter name,
    tensor) pairs named and shaped as `model`'s parameters and buffers.

    The file's tensor names are the model's own (a leading dot, as
    ``write_module`` names the top module's tensors, is dropped). The plan
    is :func:`tp_slice_plan` from the file's index and the model's shapes;
    ``load_shards`` then reads only each cut tensor's share, and each cut
    tensor of a fused layer is its blocks' shares (``get_slice``, one read
    per block) side by side. `options` are ``load_shards``' (``device``,
    ``encryption``, ``verify_hash``, ``num_readers``, ...).
    """
    import torch

    with TensorDeserializer(uri, device="cpu", lazy_load=True, encryption=options.get("encryption")) as d:
        stored = {e.name: e.shape for e in d._selected}
    if any(not isinstance(name, str) for name in stored):
        raise ValueError(f"{uri}: tp_slices needs flat tensor names, as the model's parameters are named")
    targets = dict(model.named_parameters()) | dict(model.named_buffers())
    bare = {name: str(name).removeprefix(".") for name in stored}
    fused = _fused_blocks(model)
    plan = tp_slice_plan(
        {bare[n]: s for n, s in stored.items()},
        {n: t.shape for n, t in targets.items()},
        rank,
        world_size,
        fused=fused,
    )
    blockwise = {n for n in stored if plan[bare[n]] is not None and bare[n] in fused}
    simple = {n: plan[bare[n]] for n in stored if n not in blockwise}
    loaded = load_shards(uri, simple, rank, world_size, filter_func=lambda n: n not in blockwise, **options)
    for name, tensor in loaded.items():
        yield bare[name], tensor
    if not blockwise:
        return
    reader = {k: v for k, v in options.items() if k in ("device", "encryption", "verify_hash", "num_readers")}
    with TensorDeserializer(uri, lazy_load=True, **reader) as d:
        for name in blockwise:
            dim = plan[bare[name]]
            assert dim is not None
            ranges = fused_ranges(bare[name], stored[name][dim], fused[bare[name]], rank, world_size)
            whole = d.get_slice(name)
            yield bare[name], torch.cat([whole[(slice(None),) * dim + (r,)] for r in ranges], dim)


def _encryption_from(args: argparse.Namespace) -> EncryptionParams | None:
    if args.key_file:
        return EncryptionParams(Path(args.key_file).read_bytes())
    if args.passphrase_env:
        value = os.environ.get(args.passphrase_env)
        if not value:
            raise SystemExit(f"tensorizer_rs.vllm: the environment variable {args.passphrase_env} is not set")
        return EncryptionParams.from_string(value)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tensorizer_rs.vllm MODEL_DIR OUT_URI --tp-size N``."""
    parser = argparse.ArgumentParser(
        prog="python -m tensorizer_rs.vllm",
        description="Write a Hugging Face model folder as one tensorizer file per tensor-parallel rank, "
        "for vLLM's --load-format tensorizer_rs or tensorizer.",
    )
    parser.add_argument("model_dir", help="a Hugging Face model folder (*.safetensors, or *.bin / *.pt shards)")
    parser.add_argument("out_uri", help="where to write: a path or URI, with %%02d (or %%0Nd) when --tp-size > 1")
    parser.add_argument("--tp-size", type=int, default=1, help="vLLM's --tensor-parallel-size (default 1)")
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--key-file", help="encrypt with the 32-byte key in this file")
    secret.add_argument("--passphrase-env", help="encrypt with the passphrase in this environment variable")
    args = parser.parse_args(argv)
    try:
        encryption = _encryption_from(args)
        written = serialize_for_tp(args.model_dir, args.out_uri, args.tp_size, encryption=encryption)
    except (ValueError, OSError) as e:
        print(f"tensorizer_rs.vllm: {e}", file=sys.stderr)
        return 1
    for uri in written:
        print(uri)
    return 0


if __name__ == "__main__":
    sys.exit(main())
