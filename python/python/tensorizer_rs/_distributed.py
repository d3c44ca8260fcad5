"""Cooperative loading over ``torch.distributed`` (spec §24).

With ``process_group=pg``, the ranks of ``pg`` each read one share of the
tensors' bytes (the share plan, ``NativeReader.plan_shares``: computed
natively from the index, so every rank knows every share without asking),
decrypt and verify it, then agree that every share was read before they
exchange the tensors with the group's broadcasts. The file is read about
once in all, whatever the group's size.

Every load through a group is a collective call: each rank of the group
must make it, for the same file and the same tensors, in the same order.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import _dtypes, _memory

if TYPE_CHECKING:
    from ._deserializer import TensorDeserializer, _Entry


class CooperativeLoadError(RuntimeError):
    """A cooperative load failed; raised on every rank of the group.

    ``rank`` is the rank (in the group) that failed first, ``tensor`` the
    name of the tensor it failed on when known; on the failing rank the
    original exception is the ``__cause__``. ``rank`` is ``None`` when the
    ranks disagree about what to load (different files or selections)."""

    def __init__(self, message: str, rank: int | None = None, tensor: Any = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.tensor = tensor


def check_group(group: Any) -> Any:
    """`group` as a process group to load with, or None; refuses a group
    when ``torch.distributed`` is not initialized."""
    if group is None:
        return None
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("process_group was given but torch.distributed is not initialized (init_process_group)")
    return group


def _selection_digest(d: TensorDeserializer, todo: list[_Entry], device: Any) -> str:
    """What this rank is about to load: the file's size, the tensors and
    their places, and the device type. The ranks must agree on it."""
    h = hashlib.sha256()
    h.update(repr((d._reader.size(), d.total_file_bytes, device.type)).encode())
    for e in todo:
        h.update(repr((e.index, e.header_offset, e.data_offset, e.data_length, e.dtype, e.shape)).encode())
    return h.hexdigest()


def _describe(exc: BaseException) -> tuple[str, Any]:
    """(a one-line description, the tensor's name) of a failure."""
    return f"{type(exc).__name__}: {exc}", getattr(exc, "tensor", None)


def _agree(group: Any, world: int, digest: str | None, failure: BaseException | None) -> None:
    """Every rank learns every rank's digest and failure (one
    ``all_gather_object``, bounded by the group's timeout); raises
    ``CooperativeLoadError`` on every rank when they differ or any failed."""
    import torch.distributed as dist

    mine = (digest, None if failure is None else _describe(failure))
    everyone: list[Any] = [None] * world
    # On NCCL this runs on torch.cuda.current_device(): each rank sets its
    # own device first, as torch.distributed asks of every NCCL program.
    dist.all_gather_object(everyone, mine, group=group)
    for r, (_, failed) in enumerate(everyone):
        if failed is not None:
            what, tensor = failed
            at = f" at tensor {tensor!r}" if tensor is not None else ""
            raise CooperativeLoadError(f"rank {r} of the process group failed{at}: {what}", r, tensor) from failure
    if any(other[0] != digest for other in everyone):
        raise CooperativeLoadError(
            "the ranks of the process group are not loading the same tensors of the same file: every rank "
            "must open the same file and select the same tensors (same filter_func) in the same calls"
        )


@contextlib.contextmanager
def reported(group: Any) -> Iterator[None]:
    """With a `group`: a failure inside (opening the file, reading its
    index, checking arguments) is taken to the agreement the other ranks
    are waiting in, so that every rank raises ``CooperativeLoadError``
    instead of the others waiting for this one."""
    if group is None:
        yield
        return
    try:
        yield
    except CooperativeLoadError:
        raise
    except Exception as exc:
        import torch.distributed as dist

        _agree(group, dist.get_world_size(group), None, exc)
        raise  # _agree raised already: a failure was reported


def load_shared(d: TensorDeserializer, todo: list[_Entry], verify_hash: bool | None, group: Any) -> None:
    """Loads `todo` into `d`'s cache cooperatively with the other ranks of
    `group`: reads this rank's share, agrees, then exchanges (on the CPU:
    one broadcast per arena of small tensors and per large tensor; on a
    device: one broadcast per tensor, straight into its destination)."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    device = d._device
    by_index = {e.index: e for e in todo}
    shares, local = d._reader.plan_shares([e.index for e in todo], world)
    on_cpu = device.type == "cpu"
    # Every rank lays out every share the same way (the load plan), so each
    # broadcast has the same size on every rank.
    plans = [d._reader.plan_load(share, "cpu", False) for share in shares] if on_cpu else []
    mine: Any = None
    failure: BaseException | None = None
    try:
        if on_cpu:
            p = plans[rank]
            small, large = [by_index[i] for i in p.small], [by_index[i] for i in p.large]
            mine = d._read_copies(small, large, p.large_leads, p.arenas, False, verify_hash)
        else:
            d._load_now([by_index[i] for i in shares[rank]], verify_hash)
        if local:
            d._load_now([by_index[i] for i in local], verify_hash)
    except Exception as exc:  # reported to every rank by _agree
        failure = exc
    _agree(group, world, _selection_digest(d, todo, device), failure)
    for r in range(world):
        src = dist.get_global_rank(group, r) if world > 1 else -1  # no broadcasts in a group of one
        if on_cpu:
            p = plans[r]
            small, large = [by_index[i] for i in p.small], [by_index[i] for i in p.large]
            if r == rank:
                copies = mine
            else:
                copies = (
                    [_memory.staging_tensor(e, False, lead) for e, lead in zip(large, p.large_leads)],
                    [(_memory.arena(a.size), small[a.first : a.end], list(a.offsets)) for a in p.arenas],
                )
            if world > 1:
                staged, carved = copies
                for raw, _, _ in carved:
                    if raw.size:
                        dist.broadcast(torch.from_numpy(raw), src=src, group=group)
                for t in staged:
                    if t.numel():
                        dist.broadcast(t.reshape(-1).view(torch.uint8), src=src, group=group)
            d._adopt_copies(large, copies, device, False)
        elif world == 1:
            pass  # this rank's own tensors, loaded above
        elif r != rank:
            for i in shares[r]:
                e = by_index[i]
                stored = _dtypes.torch_dtype(e.dtype)
                cast = d._cast_to(stored)
                t = torch.empty(e.shape, dtype=stored if cast is None else cast, device=device)
                if t.numel():
                    dist.broadcast(t, src=src, group=group)
                d._cache[i] = torch.nn.Parameter(t, requires_grad=_dtypes.is_float_like(stored))
        else:
            for i in shares[r]:
                t = d._cache[i].data
                if t.numel():
                    dist.broadcast(t, src=src, group=group)
