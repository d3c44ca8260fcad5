"""A whole state dict in one call, from one file or from a model stored as
shards (a Hugging Face folder, or its ``*.index.json``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import _native
from ._deserializer import TensorDeserializer


def load_state_dict(location: str | os.PathLike[str], **options: Any) -> dict[str, Any]:
    """Every tensor of the model at ``location``, by name.

    ``location`` is a tensorizer or safetensors file (a path or any URI the
    reader takes), a local folder, a store prefix (``s3://bucket/model/``,
    ``gs://``, ``az://``: the objects directly under it), or a
    ``*.index.json`` (local or a URI).
    A folder or prefix loads what its ``*.safetensors.index.json`` (or
    ``*.bin.index.json``) names, else every ``*.safetensors`` file in it;
    an index loads the shards it names beside it. Each shard is loaded by
    ``TensorDeserializer(shard, **options)`` (every eager option applies:
    ``device``, ``dtype``, ``filter_func``, ``num_readers``,
    ``verify_hash``, ``encryption``, ``mmap``...), up to
    ``_native.MAX_SHARDS_AT_ONCE`` at once (one at a time with a
    ``process_group``), the reader threads split among them
    (``num_readers`` each is its share, at least one) and their cold reads
    sharing one queue, oldest shard first. The result is the
    same as loading the shards one after another: tensors in shard order,
    then file order. The shards are checked against the index: a shard it
    names that is missing, a tensor it maps to a shard that does not hold
    it, a shard path leaving the folder, and a tensor held by two shards
    raise ``ValueError`` (spec §26.5).
    """
    if options.get("lazy_load"):
        raise ValueError("load_state_dict loads eagerly; for lazy loads open each file with TensorDeserializer")
    path = os.fspath(location)
    if not _native.is_sharded(path):
        return dict(iter_state_dict(path, **options))
    model = _native.open_sharded(path)
    at_once, readers = model.parallel_loads(options.get("num_readers") or None, options.get("process_group") is not None)
    each = {**options, "num_readers": readers}

    def load(shard: str) -> tuple[set[str], list[tuple[str, Any]]]:
        with TensorDeserializer(shard, **each) as d:
            return {str(e.name) for e in d._all}, list(d.items())

    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="tzr-shard") as pool:
        loaded = list(pool.map(load, model.shards))
    model.check({shard: names for shard, (names, _) in zip(model.shards, loaded)})
    return {name: tensor for _, items in loaded for name, tensor in items}


def iter_state_dict(location: str | os.PathLike[str], **options: Any) -> Iterator[tuple[str, Any]]:
    """``load_state_dict``'s tensors one at a time, shard after shard, each
    shard loaded by ``TensorDeserializer(shard, **options)`` (with
    ``lazy_load=True``, a window at a time, so that a consumer copying each
    tensor away never holds a whole shard twice). The shards are checked
    against the index once all are read."""
    path = os.fspath(location)
    if not _native.is_sharded(path):
        with TensorDeserializer(path, **options) as d:
            yield from d.items()
        return
    model = _native.open_sharded(path)
    held: dict[str, set[str]] = {}
    for shard in model.shards:
        with TensorDeserializer(shard, **options) as d:
            held[shard] = {str(e.name) for e in d._all}
            yield from d.items()
    model.check(held)
