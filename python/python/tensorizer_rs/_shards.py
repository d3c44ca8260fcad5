"""Sharded loading in one call: a tensor-parallel rank's tensors, reading
only its shards' bytes (spec §17.6)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._deserializer import TensorDeserializer
from ._slices import tp_shard


class _PartialDeserializer(TensorDeserializer):
    """A lazy deserializer that opens a URI for a part of the object only
    (no opening request for all of it)."""

    _partial_open = True


def load_shards(
    file_obj: Any,
    plan: Mapping[Any, int | None],
    rank: int,
    world_size: int,
    *,
    even: bool = False,
    **options: Any,
) -> dict[Any, Any]:
    """A tensor-parallel rank's tensors of a file, in one call.

    ``plan`` maps tensor names (or path tuples) to the dimension each is
    sharded along; a tensor the plan does not name, or maps to ``None``, is
    loaded whole (replicated on every rank). Each sharded tensor is
    ``tp_shard(get_slice(name), dim, rank, world_size, even=even)``: only the
    share's bytes are read (for an encrypted file, only the encryption
    chunks holding them). ``options`` are ``TensorDeserializer``'s keyword
    arguments (``device``, ``dtype``, ``filter_func``, ``encryption``,
    ``verify_hash``, ``num_readers``, ...), except ``lazy_load`` and
    ``process_group``. With ``verify_hash=True`` each sharded tensor is
    streamed whole once to check its hashes (spec §17.5).

    Returns ``{name: tensor}`` in file order, for the tensors
    ``filter_func`` keeps; a name in ``plan`` that is not among them raises
    ``KeyError``.
    """
    for refused in ("lazy_load", "process_group"):
        if refused in options:
            raise TypeError(f"load_shards() does not take {refused!r}: it loads lazily, one rank at a time")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size), not {rank} of {world_size}")
    with _PartialDeserializer(file_obj, lazy_load=True, **options) as d:
        selected = d._selected
        names = {e.name for e in selected}
        missing = [name for name in plan if name not in names]
        if missing:
            raise KeyError(f"the plan names tensors the file does not hold (or filter_func leaves out): {missing[:5]}")
        whole = [e for e in selected if plan.get(e.name) is None]
        d._loader.load(whole, d._options.verify(None))
        out: dict[Any, Any] = {}
        for e in selected:
            dim = plan.get(e.name)
            if dim is None:
                out[e.name] = d._cache[e.index]
            else:
                key = e.name if isinstance(e.name, str) else tuple(e.path)
                out[e.name] = tp_shard(d.get_slice(key), dim, rank, world_size, even=even)
        return out
