"""The load engine behind ``TensorDeserializer``: one object per open file
that owns the load's state (tensors loaded, tensors loaded unchecked, the
meta-tensor budget, the receipt's counters) and carries out the native
load plan (``NativeReader.plan_load``, read/plan.rs): meta tensors, views
of a memory map, the CUDA staging ring, large tensors loaded alone and
arenas of small ones.

``TensorDeserializer`` is the tensorizer-compatible mapping over it: it
chooses which entries a call wants and the call's ``verify_hash`` (decided
once per public call by ``DeserializerOptions.verify``), and asks
``Loader.load`` for them. Nothing here knows about names, laziness or the
mapping protocol.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np

from . import _cuda, _dtypes, _memory, _native
from ._cooperative import Copies, load_shared
from ._meta import MetaTensors, check_meta_headers
from ._modules import gc_paused
from ._receipt import ReceiptBook

_Entry = _native.Entry


def resolve_device(device: Any) -> Any:
    """The ``torch.device`` a load goes to: `device` as given, or CUDA
    when available, else the CPU."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("CUDA was requested but is not available")
    return device


class MmapFallbackWarning(UserWarning):
    """``mmap=True`` could not map some tensors and copied them instead (the
    message says how many and why). Given once per deserializer;
    ``mmap="auto"`` copies silently."""


def _carve_kind(dtype: str) -> tuple[Any, int, bool]:
    """(torch dtype, item size, requires grad) of a stored dtype string."""
    t = _dtypes.torch_dtype(dtype)
    return t, t.itemsize, _dtypes.is_float_like(t)


def _frozen(fd: int) -> str | None:
    """Why the open file `fd` cannot change while mapped, or None (asked of
    the same open file through /proc, so a path replaced since cannot
    mislead it)."""
    try:
        return _native.file_frozen(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _private_map(source: Any, options: Any, encrypted: bool) -> Any:
    """The private, copy-on-write memory map ``mmap=True`` or ``"auto"``
    hands out views of, or None: only a local, unencrypted, non-empty file,
    and with ``"auto"`` only one that provably cannot change (§23.6)."""
    if options.mmap == "off" or encrypted or not isinstance(source, str) or not os.path.isfile(source):
        return None
    import mmap

    with open(source, "rb") as f:
        frozen = options.mmap == "on" or _frozen(f.fileno()) is not None
        if frozen and os.fstat(f.fileno()).st_size > 0:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    return None


class Loader:
    """One open file's loads: its reader, what is loaded (``cache``, by
    file index) and what was loaded without checking its hashes."""

    def __init__(self, source: Any, options: Any, name: str | None, partial: bool) -> None:
        self.options = options
        self.reader: Any = _native.NativeReader(source, options, name=name, partial=partial)
        self.book = ReceiptBook(self.reader.origin)
        self.meta = MetaTensors(options)
        self.cache: dict[int, Any] = {}
        # Indices loaded without checking their hashes (see load).
        self.unverified: set[int] = set()
        self.map: Any = _private_map(source, options, self.reader.encrypted)
        self._mmap_warned = False  # MmapFallbackWarning given (once)
        self._device: Any = None

    @property
    def device(self) -> Any:
        """The ``torch.device`` tensors go to (resolved on first use: a
        numpy-only load never imports torch)."""
        if self._device is None:
            self._device = resolve_device(self.options.device)
        return self._device

    def cast_to(self, stored: Any) -> Any:
        """The dtype a tensor stored as `stored` becomes under ``dtype=``,
        or None to keep it (``_dtypes.cast_target``)."""
        return _dtypes.cast_target(self.options.dtype, stored)

    def check_open(self) -> None:
        if self.reader is None:
            raise RuntimeError("the deserializer is closed")

    def close(self) -> None:
        if self.reader is not None:
            self.book.note_closing(self.reader)
        self.reader = None
        # Tensors already handed out keep the mapping alive through their
        # buffer references; only ours is dropped here.
        self.map = None

    # -- loading --------------------------------------------------------------

    def load(self, entries: list[_Entry], verify: bool, group: Any = None) -> None:
        """Loads every entry not yet cached, in one parallel native call;
        with a process `group`, cooperatively with its other ranks (a
        collective call: ``_distributed``). With `verify`, entries loaded
        earlier without it are checked too (tensorizer checks nothing for
        tensors it already holds)."""
        with gc_paused():
            if verify and self.unverified:
                self._verify_loaded(entries)
            todo = [e for e in entries if e.index not in self.cache]
            try:
                if group is not None:
                    # Collective: every rank takes part, even one with nothing new.
                    self.check_open()
                    load_shared(self, todo, verify, group)
                else:
                    self.load_now(todo, verify)
            except Exception:
                self.book.note_failed(todo)
                raise
            self.book.note_loaded(todo, verify)
            if not verify:
                self.unverified.update(e.index for e in todo)

    def _verify_loaded(self, entries: list[_Entry]) -> None:
        """Checks the stored hashes of `entries` loaded earlier without
        checking, reading their bytes from the file again (one tensor at a
        time); raises ``HashMismatchError`` naming the first that fails."""
        stale = [e for e in entries if e.index in self.unverified]
        if not stale:
            return
        self.check_open()
        metas = [e for e in stale if e.is_meta]
        if metas:
            check_meta_headers(self.reader, metas, True)
        for e in stale:
            if not e.is_meta:
                scratch = np.empty(e.nbytes, dtype=np.uint8)
                self.reader.load_into([e.index], [scratch], True)
            self.unverified.discard(e.index)
        self.book.note_loaded(stale, True)

    def load_now(self, entries: list[_Entry], verify: bool) -> None:
        """Loads the entries of `entries` not cached yet, as the native load
        plan says each goes."""
        import torch

        todo = [e for e in entries if e.index not in self.cache]
        if not todo:
            return
        self.check_open()
        device = self.device
        if device.type == "cpu":
            destination = "cpu"
        elif device.type == "cuda" and _cuda.native_enabled():
            destination = "staged"
        else:
            destination = "other"
        mapped = self.map is not None and not verify
        plan = self.reader.plan_load([e.index for e in todo], destination, mapped)
        by_index = {e.index: e for e in todo}
        if self.options.mmap == "on" and not self._mmap_warned:
            self._warn_copied(todo, plan, device, verify)
        metas = [by_index[i] for i in plan.meta]
        if metas:
            self.meta.claim(metas, self.meta.nbytes_torch)
            check_meta_headers(self.reader, metas, verify)
        if plan.mapped:
            self._load_mapped([by_index[i] for i in plan.mapped])
        if plan.staged:
            self._load_staged([by_index[i] for i in plan.staged], device, verify)
        pin = device.type == "cuda"
        small = [by_index[i] for i in plan.small]
        large = [by_index[i] for i in plan.large]
        copies = self.read_copies(small, large, plan, pin, verify)
        self.adopt_copies(large, copies, device, pin)
        for e in metas:
            self.cache[e.index] = self.meta.tensor(e, device)
        if pin and large:
            torch.cuda.synchronize(device)

    def _load_staged(self, entries: list[_Entry], device: Any, verify: bool) -> None:
        """Native staging ring: pinned buffers, async copies into tensors
        allocated here (one each, or carved from one allocation), on torch's
        current stream; decrypted and verified on the way (spec §19,
        _cuda.py)."""
        import torch

        for e, t in zip(entries, _cuda.load(self.reader, entries, device, verify)):
            grad = _dtypes.is_float_like(t.dtype)
            target = self.cast_to(t.dtype)
            if target is not None:
                t = t.to(target)
            self.cache[e.index] = torch.nn.Parameter(t, requires_grad=grad)

    def _warn_copied(self, todo: list[_Entry], plan: Any, device: Any, verify: bool) -> None:
        """Warns (once per deserializer) that ``mmap=True`` copied tensors
        of `todo` the load `plan` could not map, and why."""
        skipped = set(plan.mapped) | set(plan.meta)
        copied = [e for e in todo if e.index not in skipped and e.data_length > 0]
        if not copied:
            return
        self._mmap_warned = True
        if self.reader.encrypted:
            why = "the file is encrypted (decrypted data cannot be a view of the file)"
        elif self.map is None:
            why = "the file is not a local, non-empty file that can be memory-mapped"
        elif verify:
            why = "verify_hash=True reads every byte from the file to check it"
        elif device.type != "cpu":
            why = f"the tensors go to {device}, and only CPU tensors can be views of the map"
        else:
            why = (
                "their data is not aligned to their element size in the file (files written with "
                'layout="tensorizer" can have such offsets; the default layout aligns them)'
            )
        nbytes = sum(e.data_length for e in copied)
        warnings.warn(
            f"mmap=True: {len(copied)} of {len(todo)} tensors ({nbytes} bytes) were copied, not mapped: {why}",
            MmapFallbackWarning,
            stacklevel=5,
        )

    def read_copies(self, small: list[_Entry], large: list[_Entry], plan: Any, pin: bool, verify: bool) -> Copies:
        """Reads `large` (each into memory of its own, starting
        ``plan.large_leads[k]`` bytes into it) and `small` (into the arenas
        of `plan`, the load plan over them) into host memory of the kind the
        plan chose (``plan.huge_pages``)."""
        import torch

        staged = [_memory.staging_tensor(e, pin, lead, plan.huge_pages) for e, lead in zip(large, plan.large_leads)]
        if large:
            buffers = [t.reshape(-1).view(torch.uint8).numpy() for t in staged]
            self.reader.load_into([e.index for e in large], buffers, verify)
        # Each arena: one buffer and one native call.
        carved: list[tuple[Any, list[_Entry], list[int]]] = []
        if small:
            carved = _memory.fill_arenas(self.reader, small, plan.arenas, verify, plan.huge_pages)
        return staged, carved

    def adopt_copies(self, large: list[_Entry], copies: Copies, device: Any, pin: bool) -> None:
        """Makes the tensors of `copies` (``read_copies`` of `large` and
        some small entries, or the same memory filled by another rank) and
        caches them: moved to `device` and cast to ``dtype=`` as asked."""
        import torch

        staged, carved = copies
        Parameter = torch.nn.Parameter
        for e, t in zip(large, staged):
            grad = _dtypes.is_float_like(t.dtype)  # of the stored dtype, before any cast
            if device.type != "cpu":
                t = t.to(device, non_blocking=pin)
            target = self.cast_to(t.dtype)
            if target is not None:
                t = t.to(target)
            self.cache[e.index] = Parameter(t, requires_grad=grad)
        # Each packed tensor gets a storage of its own over its piece of the
        # arena (torch.frombuffer), as if allocated alone; one native loop
        # per arena makes them (carve.rs), then any cast follows.
        for raw, members, offsets in carved:
            made = _native.carve(
                members, raw, offsets, _carve_kind, torch.frombuffer, torch.empty,
                torch.Tensor._make_subclass, Parameter,
            )
            self._adopt_carved(members, made)

    def _adopt_carved(self, members: list[_Entry], made: list[Any]) -> None:
        """Caches tensors carved on the CPU, cast as ``dtype=`` asks."""
        cache = self.cache
        if self.options.dtype is None:
            cache.update(zip([e.index for e in members], made))
            return
        import torch

        for e, t in zip(members, made):
            target = self.cast_to(t.dtype)
            if target is not None:
                t = torch.nn.Parameter(t.detach().to(target), requires_grad=t.requires_grad)
            cache[e.index] = t

    def _load_mapped(self, mapped: list[_Entry]) -> None:
        """Caches `mapped` as zero-copy views of the private map (those the
        load plan found aligned to their element size)."""
        import torch

        # Parse each header once: the index and the headers must agree.
        self.reader.module_indices([e.index for e in mapped])
        self.book.note_mapped(mapped)
        made = _native.carve(
            mapped, self.map, [e.data_offset for e in mapped], _carve_kind, torch.frombuffer, torch.empty,
            torch.Tensor._make_subclass, torch.nn.Parameter,
        )
        self._adopt_carved(mapped, made)

    def load_arrays(self, entries: list[_Entry], dtypes: list[Any], verify: bool) -> list[np.ndarray[Any, Any]]:
        """`entries` as new numpy arrays of `dtypes` (no torch): meta ones
        as ``meta_tensors`` asks, the rest read in one native call. Not
        cached: each call reads again."""
        self.check_open()
        metas = [e for e in entries if e.is_meta]
        if metas:
            self.meta.claim(metas, lambda e: e.nbytes)
            check_meta_headers(self.reader, metas, verify)
        arrays = [self.meta.array(e, dt) if e.is_meta else np.empty(e.shape, dtype=dt) for e, dt in zip(entries, dtypes)]
        stored = [(e.index, a.reshape(-1).view(np.uint8)) for e, a in zip(entries, arrays) if not e.is_meta]
        try:
            if stored:
                self.reader.load_into([i for i, _ in stored], [b for _, b in stored], verify)
        except Exception:
            self.book.note_failed(entries)
            raise
        self.book.note_loaded(entries, verify)
        return arrays

    def meta_slice(self, e: _Entry, shape: list[int]) -> Any:
        """A slice of meta entry `e` (``get_slice``), of `shape`, in the
        form ``meta_tensors`` names, counted against ``max_meta_bytes``."""
        self.check_open()
        verify = self.options.verify(None)
        return self.meta.slice(self.reader, e, shape, self.device, verify)
