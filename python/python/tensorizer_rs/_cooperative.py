"""``TensorDeserializer``'s cooperative loads (spec §24): each rank of a
process group reads its share, the ranks agree (``_distributed.agree``),
then exchange the tensors with the group's broadcasts."""

from __future__ import annotations

from typing import Any

from . import _distributed, _dtypes, _native

_Entry = _native.Entry


def _as_bytes(raw: Any) -> Any:
    """An arena's memory as a flat uint8 tensor over it."""
    import torch

    return torch.frombuffer(raw, dtype=torch.uint8) if len(raw) else torch.empty(0, dtype=torch.uint8)


def load_shared(loader: Any, todo: list[_Entry], verify: bool, group: Any) -> None:
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
    shares = [[by_index[i] for i in share] for share in shares]
    on_cpu = device.type == "cpu"
    mine: Any = None
    failure: BaseException | None = None
    try:
        if on_cpu:
            # Every rank lays out every share the same way (the load plan), so
            # each broadcast has the same size on every rank.
            mine = loader.copies(shares[rank], True, verify)
        else:
            loader.load_now(shares[rank], verify)
        if local:
            loader.load_now([by_index[i] for i in local], verify)
    except Exception as exc:  # reported to every rank by agree()
        failure = exc
    digest = loader.reader.selection_digest([e.index for e in todo], device.type)
    _distributed.agree(group, world, digest, failure)
    for r in range(world):
        src = dist.get_global_rank(group, r) if world > 1 else -1  # no broadcasts in a group of one
        if on_cpu:
            copies = mine if r == rank else loader.copies(shares[r], False, verify)
            for raw in copies.buffers() if world > 1 else ():
                t = raw.reshape(-1).view(torch.uint8) if isinstance(raw, torch.Tensor) else _as_bytes(raw)
                if t.numel():
                    dist.broadcast(t, src=src, group=group)
            loader.adopt(copies)
        elif world == 1:
            pass  # this rank's own tensors, loaded above
        elif r != rank:
            for e in shares[r]:
                stored = _dtypes.torch_dtype(e.dtype)
                cast = loader.cast_to(stored)
                t = torch.empty(e.shape, dtype=stored if cast is None else cast, device=device)
                if t.numel():
                    dist.broadcast(t, src=src, group=group)
                loader.cache[e.index] = torch.nn.Parameter(t, requires_grad=_dtypes.is_float_like(stored))
        else:
            for e in shares[r]:
                t = loader.cache[e.index].data
                if t.numel():
                    dist.broadcast(t, src=src, group=group)
