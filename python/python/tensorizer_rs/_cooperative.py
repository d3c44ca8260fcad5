"""``TensorDeserializer``'s cooperative loads (spec §24): each rank of a
process group reads its share, the ranks agree (``_distributed.agree``),
then exchange the tensors with the group's broadcasts."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from . import _distributed, _dtypes, _memory, _native

if TYPE_CHECKING:
    from ._loader import Loader

_Entry = _native.Entry
#: Tensors read into host memory: those loaded alone (one tensor each),
#: then (arena, its entries, their offsets) per arena of small ones.
Copies = tuple[list[Any], list[tuple[Any, list[_Entry], list[int]]]]


def _selection_digest(reader: Any, todo: list[_Entry], device: Any) -> str:
    """What this rank is about to load: the file's size, the tensors and
    their places, and the device type. The ranks must agree on it."""
    h = hashlib.sha256()
    h.update(repr((reader.size(), reader.tensor_size, device.type)).encode())
    for e in todo:
        h.update(repr((e.index, e.header_offset, e.data_offset, e.data_length, e.dtype, e.shape)).encode())
    return h.hexdigest()


def load_shared(loader: Loader, todo: list[_Entry], verify: bool, group: Any) -> None:
    """Loads `todo` into the loader's cache cooperatively with the other
    ranks of `group`: reads this rank's share, agrees, then exchanges (on
    the CPU: one broadcast per arena of small tensors and per large tensor;
    on a device: one broadcast per tensor, straight into its
    destination)."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device = loader.device
    by_index = {e.index: e for e in todo}
    shares, local = loader.reader.plan_shares([e.index for e in todo], world)
    on_cpu = device.type == "cpu"
    # Every rank lays out every share the same way (the load plan), so each
    # broadcast has the same size on every rank.
    plans = [loader.reader.plan_load(share, "cpu", False) for share in shares] if on_cpu else []
    mine: Any = None
    failure: BaseException | None = None
    try:
        if on_cpu:
            p = plans[rank]
            small, large = [by_index[i] for i in p.small], [by_index[i] for i in p.large]
            mine = loader.read_copies(small, large, p, False, verify)
        else:
            loader.load_now([by_index[i] for i in shares[rank]], verify)
        if local:
            loader.load_now([by_index[i] for i in local], verify)
    except Exception as exc:  # reported to every rank by agree()
        failure = exc
    _distributed.agree(group, world, _selection_digest(loader.reader, todo, device), failure)
    for r in range(world):
        src = dist.get_global_rank(group, r) if world > 1 else -1  # no broadcasts in a group of one
        if on_cpu:
            p = plans[r]
            small, large = [by_index[i] for i in p.small], [by_index[i] for i in p.large]
            if r == rank:
                copies = mine
            else:
                copies = (
                    [_memory.staging_tensor(e, False, lead, p.huge_pages) for e, lead in zip(large, p.large_leads)],
                    [(_memory.arena(a.size, p.huge_pages), small[a.first : a.end], list(a.offsets)) for a in p.arenas],
                )
            if world > 1:
                staged, carved = copies
                for raw, _, _ in carved:
                    if raw.size:
                        dist.broadcast(torch.from_numpy(raw), src=src, group=group)
                for t in staged:
                    if t.numel():
                        dist.broadcast(t.reshape(-1).view(torch.uint8), src=src, group=group)
            loader.adopt_copies(large, copies, device, False)
        elif world == 1:
            pass  # this rank's own tensors, loaded above
        elif r != rank:
            for i in shares[r]:
                e = by_index[i]
                stored = _dtypes.torch_dtype(e.dtype)
                cast = loader.cast_to(stored)
                t = torch.empty(e.shape, dtype=stored if cast is None else cast, device=device)
                if t.numel():
                    dist.broadcast(t, src=src, group=group)
                loader.cache[i] = torch.nn.Parameter(t, requires_grad=_dtypes.is_float_like(stored))
        else:
            for i in shares[r]:
                t = loader.cache[i].data
                if t.numel():
                    dist.broadcast(t, src=src, group=group)
