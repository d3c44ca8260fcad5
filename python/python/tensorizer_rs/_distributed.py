"""Cooperative loading over ``torch.distributed`` (spec §24): the group
checks and the agreement every rank reaches before the exchange (the
exchange itself is native: python/src/loader/share.rs).

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
from collections.abc import Iterator
from typing import Any

from . import _native


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


def agree(group: Any, digest: str | None, failure: BaseException | None) -> None:
    """Every rank learns every rank's digest and failure (one
    ``all_gather_object``, bounded by the group's timeout); raises
    ``CooperativeLoadError`` on every rank when they differ or any failed."""
    import torch.distributed as dist

    failed = None if failure is None else (f"{type(failure).__name__}: {failure}", getattr(failure, "tensor", None))
    everyone: list[Any] = [None] * dist.get_world_size(group)
    # On NCCL this runs on torch.cuda.current_device(): each rank sets its
    # own device first, as torch.distributed asks of every NCCL program.
    dist.all_gather_object(everyone, (digest, failed), group=group)
    verdict = _native.cooperative_verdict(everyone, digest)  # the first failure, or a disagreement
    if verdict is not None:
        raise CooperativeLoadError(*verdict) from failure


@contextlib.contextmanager
def reported(group: Any) -> Iterator[Any]:
    """Gives `group` back, refused when ``torch.distributed`` is not
    initialized; with a group, a failure inside (opening the file, reading
    its index, checking arguments) is taken to the agreement the other
    ranks are waiting in, so that every rank raises ``CooperativeLoadError``
    instead of the others waiting for this one."""
    if group is not None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("process_group was given but torch.distributed is not initialized (init_process_group)")
    try:
        yield group
    except Exception as exc:
        if group is None or isinstance(exc, CooperativeLoadError):
            raise
        agree(group, None, exc)
        raise  # agree() raised already: a failure was reported
