"""Load receipts: what a ``TensorDeserializer`` has loaded, checked and
read, as an immutable :class:`LoadReceipt` (``TensorDeserializer.receipt``).

tensorizer has no such record; it is ours (spec §18.7).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Union

from . import _native

_Entry = _native.Entry

#: A tensor's name as the deserializer's index holds it: a string, or a
#: path of keys for files written with nested names.
TensorName = Union[str, tuple[Union[str, int], ...]]


@dataclass(frozen=True)
class LoadReceipt:
    """What a deserializer has done so far, taken when asked for.

    Every name appears in ``expected``; each is in exactly one of
    ``loaded``, ``skipped_by_filter``, ``failed`` and :attr:`pending`, and
    each loaded one in exactly one of ``verified`` and ``unverified``.
    Names keep file order.
    """

    #: Every tensor the file holds, in file order.
    expected: tuple[TensorName, ...]
    #: Tensors loaded (handed out, or held to hand out) so far.
    loaded: tuple[TensorName, ...]
    #: Tensors the constructor's ``filter_func`` left out.
    skipped_by_filter: tuple[TensorName, ...]
    #: Loaded tensors checked against their stored hashes (or, encrypted,
    #: their MACs). A receipt taken after ``close()`` counts every tensor
    #: loaded with verification here unless an earlier receipt found its
    #: header stores no hashes (spec §18.7).
    verified: tuple[TensorName, ...]
    #: Loaded tensors nothing checked: verification was off, or the file
    #: stores no hash for them.
    unverified: tuple[TensorName, ...]
    #: Tensors a load attempted that raised and are still not loaded (a
    #: failing batch lists all its tensors; a lazy read retries its own
    #: tensor alone, so there the name is exact).
    failed: tuple[TensorName, ...]
    #: Bytes read, by where they came from: ``"file"``, a URI scheme
    #: (``"http"``, ``"https"``, ``"s3"``, ``"redis"``...), ``"stream"``
    #: (a Python file object) -- everything the native reader read: index,
    #: headers, data and re-reads for verification -- and ``"mmap"``, the
    #: data of tensors handed out as views of a memory map.
    bytes_by_source: Mapping[str, int]

    @property
    def pending(self) -> tuple[TensorName, ...]:
        """Tensors selected but not loaded yet (a lazy deserializer's
        unread ones)."""
        done = {*self.loaded, *self.skipped_by_filter, *self.failed}
        return tuple(n for n in self.expected if n not in done)

    @property
    def complete(self) -> bool:
        """Whether every selected tensor is loaded."""
        return len(self.loaded) + len(self.skipped_by_filter) == len(self.expected)

    @property
    def total_bytes(self) -> int:
        """Bytes read from every source together."""
        return sum(self.bytes_by_source.values())

    def to_dict(self) -> dict[str, Any]:
        """The receipt as plain JSON types: names as strings or lists of
        keys, counts as ints."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                out[f.name] = [n if isinstance(n, str) else list(n) for n in value]
            else:
                out[f.name] = dict(value)
        return out

    def __hash__(self) -> int:
        return hash((*(getattr(self, f.name) for f in fields(self) if f.name != "bytes_by_source"),
                     tuple(sorted(self.bytes_by_source.items()))))

    def __repr__(self) -> str:
        counts = ", ".join(
            f"{f.name}={len(getattr(self, f.name))}" for f in fields(self) if f.name != "bytes_by_source"
        )
        return f"LoadReceipt({counts}, bytes_by_source={dict(self.bytes_by_source)!r})"


def make(counts: tuple[Any, ...], entries: list[_Entry], selected: list[_Entry]) -> LoadReceipt:
    """The receipt of a loader's `counts` (``_native.Loader.counts``:
    loaded, verified and failed file indices, bytes by source): `entries`
    every tensor of the file, `selected` those the filter kept."""
    loaded, verified, failed = (set(c) for c in counts[:3])
    chosen = {e.index for e in selected}

    def names(keep: Any) -> tuple[TensorName, ...]:
        return tuple(e.name for e in entries if keep(e.index))

    return LoadReceipt(
        expected=names(lambda i: True),
        loaded=names(loaded.__contains__),
        skipped_by_filter=names(lambda i: i not in chosen),
        verified=names(verified.__contains__),
        unverified=names(lambda i: i in loaded and i not in verified),
        failed=names(failed.__contains__),
        bytes_by_source=types.MappingProxyType(dict(counts[3])),
    )
