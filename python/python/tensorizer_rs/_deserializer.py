"""TensorDeserializer: tensorizer's reader API over the Rust reader."""

from __future__ import annotations

import contextlib
import io
import os
import types
import warnings
import operator
from collections.abc import Callable, ItemsView, Iterator, Mapping, ValuesView
from typing import Any, Literal

import numpy as np

from . import _args, _cuda, _distributed, _dtypes, _memory, _native
from ._cooperative import _Copies, _CooperativeLoading
from ._crypt import CryptographyError, DecryptionParams
from ._meta import _MetaTensors
from ._modules import _gc_paused, _ModuleLoading
from ._receipt import _Receipts
from ._redis_export import _RedisExport
from ._types import FilterFuncType, TensorType, _FileFeatureFlags, _FileHeader
from .stream_io import RemoteStream


#: A lazy deserializer read in file order loads ahead in windows of at most
#: this many bytes and tensors (one native call each, not one per tensor).
LAZY_READ_AHEAD_BYTES = 16 << 20
LAZY_READ_AHEAD_TENSORS = 4096


_TENSOR_TYPES = tuple(TensorType)


#: One tensor of the file's index (typed, read-only, built natively).
_Entry = _native.Entry


def _carve_kind(dtype: str) -> tuple[Any, int, bool]:
    """(torch dtype, item size, requires grad) of a stored dtype string."""
    t = _dtypes.torch_dtype(dtype)
    return t, t.itemsize, _dtypes.is_float_like(t)


def _resolve_device(device: Any) -> Any:
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


def _frozen(fd: int) -> str | None:
    """Why the open file `fd` cannot change while mapped, or None (asked of
    the same open file through /proc, so a path replaced since cannot
    mislead it)."""
    try:
        return _native.file_frozen(f"/proc/self/fd/{fd}")
    except OSError:
        return None

class TensorDeserializer(
    _MetaTensors,
    _ModuleLoading,
    _Receipts,
    _RedisExport,
    _CooperativeLoading,
    Mapping[Any, Any],
    contextlib.AbstractContextManager["TensorDeserializer"],
):
    """Reads a ``.tensors`` file: a read-only mapping from top-level keys to
    tensors (``torch.nn.Parameter``) or nested read-only mappings.

    A drop-in for ``tensorizer.TensorDeserializer`` (same arguments and
    behaviour), with ``mmap``, ``meta_tensors``, ``max_meta_bytes`` and
    ``process_group`` added. By default every tensor is a private copy,
    filled straight from the file in parallel with the GIL released
    (decrypted and checked on the way); tensors handed out never change
    afterwards, whatever happens to the file. CUDA targets are filled
    through pinned host buffers copied asynchronously to the device
    (``TENSORIZER_RS_NATIVE_CUDA=0`` uses plain torch copies instead).

    Args:
        file_obj: What to read: a local path (``str`` or ``os.PathLike``),
            an ``http(s)://``, ``s3://``, ``gs://``, ``az://`` or
            ``redis://`` URI, a stream from ``stream_io.open_stream``, or a
            readable binary file object (read from its current position).
        device: Where tensors go (``"cpu"``, ``"cuda:0"``, a
            ``torch.device``). ``None``: CUDA when available, else the CPU.
        filter_func: Called with each tensor's name; only tensors for which
            it returns true are loaded. ``None``: all of them.
        dtype: A ``torch.dtype`` that floating-point tensors are cast to
            (complex ones for a complex dtype), as ``Module.to(dtype)``
            does; integer and bool tensors keep theirs. ``None``: no cast.
        lazy_load: Load each tensor when it is first asked for instead of
            all in the constructor. Reads in file order (iterating) load
            ahead up to ``LAZY_READ_AHEAD_BYTES`` (16 MiB) and
            ``LAZY_READ_AHEAD_TENSORS`` at a time; a bad tensor fails only
            when it is itself asked for.
        plaid_mode: Accepted for compatibility; it has no effect (loads are
            always parallel), as in tensorizer 2.12.
        plaid_mode_buffers: Accepted for compatibility; no effect.
        num_readers: How many threads read in parallel (at least 1).
            ``None``: chosen from the number of CPU cores.
        verify_hash: Check every tensor's stored CRC32/SHA256 as it loads
            and raise ``HashMismatchError`` naming the first that differs.
            Every byte is then read from the file (no memory map).
        encryption: A ``DecryptionParams`` (a key or a passphrase) for an
            encrypted file. A wrong key raises one ``CryptographyError``
            ("no tensor decrypts: wrong key or passphrase").
        mmap: ``False`` (default): private copies. ``True``: tensors are
            zero-copy views of a private, copy-on-write memory map wherever
            that is possible (a local, unencrypted file, loaded to the CPU
            without ``verify_hash``, data aligned to the element size, as
            tensorizer_rs always writes it); otherwise tensors are copied
            and an ``MmapFallbackWarning`` says why, once. Writing to a
            mapped tensor never touches the file, but **it is unsafe
            against in-place rewrites**: another program rewriting the
            file (``cp`` over it, ``open(..., "r+b")``) changes tensors
            already handed out, and truncating it kills the process with
            SIGBUS on the next access. An atomic rename, as
            ``TensorSerializer`` does, is safe. ``"auto"``: map only a file
            that provably cannot change while mapped (immutable attribute
            ``chattr +i``, fs-verity, or a read-only local file system such
            as squashfs, erofs or a disk mounted ``ro``; a read-only bind
            mount is not enough), silently copying anything else.
        meta_tensors: What a meta tensor (a shape and dtype with no stored
            data) becomes: ``"zeros"`` (default, as tensorizer: a
            zero-filled tensor, its CPU memory zeroed lazily),
            ``"expand"`` (a zero scalar expanded to the shape: no memory,
            read-only) or ``"meta"`` (a tensor on torch's ``meta``
            device). ``read_numpy_arrays`` and ``get_slice`` follow it
            (numpy has no meta device: ``"meta"`` gives a read-only
            broadcast zero there).
        max_meta_bytes: The most bytes of zero-filled meta tensors handed
            out in all (default 4 GiB), checked before anything is
            allocated, since the size is whatever the file claims;
            ``ValueError`` beyond it. ``None``: no bound.
        process_group: A ``torch.distributed`` process group whose ranks
            load the file together (eager loads only): each reads,
            decrypts and verifies a share of the bytes and receives the
            rest through the group's broadcasts (gloo for CPU tensors, NCCL
            for CUDA ones), so the store serves the file about once in
            all. Every rank passes the same file and ``filter_func``; a
            failure on any rank raises ``CooperativeLoadError`` on all.

    Raises:
        FormatError: The file is not a valid tensorizer file (a safetensors
            or ``torch.save`` file is named as such, with the call that
            loads it). ``e.location``, ``e.offset`` and ``e.tensor`` say
            where.
        HashMismatchError: With ``verify_hash``, a tensor's data differs
            from its stored hash.
        CryptographyError: The file is encrypted and no or the wrong key
            was given.
        FileNotFoundError: The file does not exist.
    """

    #: Open a URI for a part of the object only (``load_shards``).
    _partial_open = False

    def __init__(
        self,
        file_obj: Any,
        device: Any = None,
        filter_func: FilterFuncType | None = None,
        dtype: Any = None,
        *,
        lazy_load: bool = False,
        plaid_mode: bool | None = None,
        plaid_mode_buffers: int | None = None,
        num_readers: int | None = None,
        verify_hash: bool = False,
        encryption: DecryptionParams | None = None,
        mmap: bool | Literal["auto"] | None = False,
        meta_tensors: str = "zeros",
        max_meta_bytes: int | None = 4 << 30,
        process_group: Any = None,
    ) -> None:
        # Refused before the group's agreement: every rank raises it alone.
        _native.DeserializerOptions.check_cooperative(lazy_load, process_group is not None)
        group = _distributed.check_group(process_group)
        # With a group, a failure here reaches the other ranks, which wait
        # for this one in the load's agreement (spec §24.3).
        with _distributed.reported(group):
            # Every reader option, decided once (spec §18.8).
            self._options = options = _native.DeserializerOptions(
                device=device, filter_func=filter_func, dtype=dtype, lazy_load=lazy_load, plaid_mode=plaid_mode,
                plaid_mode_buffers=plaid_mode_buffers, num_readers=num_readers, verify_hash=verify_hash,
                encryption=encryption, mmap=mmap, meta_tensors=meta_tensors, max_meta_bytes=max_meta_bytes,
                cooperative=group is not None,
            )
            self._meta_bytes = 0  # zero-filled meta bytes handed out so far
            self._mmap_warned = False  # MmapFallbackWarning given (once)
            self._closed = False
            source, name = _source_of(file_obj)
            # A rank of a cooperative load reads its share only, and a sharded
            # load its shards: a URI is opened without asking for all of it.
            self._reader: Any = _native.NativeReader(
                source, options, name=name, partial=group is not None or self._partial_open
            )
            self._init_receipts()
            reader = self._reader
            version, flags, tensor_size, encrypted = reader.version, reader.flags, reader.tensor_size, reader.encrypted
            if encrypted and not options.decrypts:
                raise CryptographyError("Tensor is encrypted, but decryption was not requested")
            self._version = version
            self.total_file_bytes = tensor_size
            with _gc_paused():
                entries = self._index()
            self._file_header = _FileHeader(version, _FileFeatureFlags(flags), tensor_size, len(entries))
            self.total_tensor_bytes = sum(e.nbytes for e in self._selected)
            self.read_bytes = 0
            self.total_compressed_tensor_bytes = 0
            # Opt-in zero-copy loads from a private, copy-on-write memory map of
            # a local, unencrypted file (unsafe against in-place rewrites).
            # mmap="auto" maps only a file that provably cannot change (§23.6).
            self._map: Any = None
            if options.mmap != "off" and not encrypted and isinstance(source, str) and os.path.isfile(source):
                import mmap as _mmap

                with open(source, "rb") as f:
                    frozen = options.mmap == "on" or _frozen(f.fileno()) is not None
                    if frozen and os.fstat(f.fileno()).st_size > 0:
                        self._map = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_COPY)
        # Every tensor of an eagerly loaded file with flat names, by name: the
        # mapping's reads go straight to it (BENCHMARKS.md, case b).
        self._flat: dict[Any, Any] | None = None
        if not options.lazy_load:
            self._load(self._selected, options.verify_hash, group)
            self._last_yielded = len(self._selected) - 1
            if self._plain_names:
                cache = self._cache
                self._flat = dict(zip(self._structure, [cache[e.index] for e in self._selected]))
            self.total_tensor_bytes = sum(e.data_length for e in self._selected)

    def _index(self) -> list[_Entry]:
        """Reads the index into typed entries, selects those the options'
        ``filter_func`` keeps and builds the nested structure of their names."""
        filter_func = self._options.filter_func
        entries: list[_Entry] = self._reader.entries(_TENSOR_TYPES)
        self._all = entries
        self._selected = entries if filter_func is None else [e for e in entries if filter_func(e.name)]
        self._structure: dict[Any, Any] = {}
        names = [e.name for e in self._selected]
        if all(type(n) is str for n in names):
            # Plain names are one level deep, and the core's path registry
            # has already refused duplicates.
            self._structure = dict(zip(names, self._selected))
            self._plain_names = True
            names = []
        else:
            self._plain_names = False
        for e in self._selected if names else ():
            layer = self._structure
            path = e.path
            for part in path[:-1]:
                layer = layer.setdefault(part, {})
                if isinstance(layer, _Entry):
                    raise ValueError(f"Conflicting tensor paths at {e.name!r}")
            layer[path[-1]] = e
        self._cache: dict[int, Any] = {}
        # Indices loaded without checking their hashes (see _load).
        self._unverified: set[int] = set()
        self._positions: dict[int, int] | None = None
        self._last_yielded = -1
        return entries

    def _position(self, index: int) -> int:
        """Where the tensor at file index `index` is among the selected ones
        (the table is built on first use: eager loads of plain names never
        need it)."""
        if self._positions is None:
            self._positions = {e.index: k for k, e in enumerate(self._selected)}
        return self._positions[index]

    # -- loading --------------------------------------------------------------

    @property
    def _file_flags(self) -> _FileFeatureFlags:
        """The header's feature flags (tensorizer's private name)."""
        return self._file_header.feature_flags

    @property
    def _device(self) -> Any:
        return _resolve_device(self._options.device)

    def _cast_to(self, stored: Any) -> Any:
        """The dtype a tensor stored as `stored` becomes, or None to keep
        it. ``dtype=`` applies as ``Module.to(dtype)`` applies it: to
        floating-point tensors for a floating-point dtype, to complex ones
        for a complex dtype; integer and bool tensors keep theirs
        (tensorizer casts every non-bool tensor, so complex values lose
        their imaginary part and int64 positions are rounded: spec §11.1)."""
        target = self._options.dtype
        if target is None or stored == target:
            return None
        if (stored.is_floating_point and target.is_floating_point) or (stored.is_complex and target.is_complex):
            return target
        return None

    def _verify(self, verify_hash: object) -> bool:
        """A call's ``verify_hash``: the constructor's when None, else its
        truth value (as tensorizer tests it)."""
        return bool(self._options.verify(verify_hash))

    def _check_open(self) -> None:
        if self._reader is None:
            raise RuntimeError("the deserializer is closed")

    def _load(self, entries: list[_Entry], verify_hash: bool | None, group: Any = None) -> None:
        """Loads every entry not yet cached, in one parallel native call;
        with a process `group`, cooperatively with its other ranks (a
        collective call: ``_distributed``). With `verify_hash`, entries
        loaded earlier without it are checked too (tensorizer checks
        nothing for tensors it already holds)."""
        with _gc_paused():
            if verify_hash and self._unverified:
                self._verify_loaded(entries)
            todo = [e for e in entries if e.index not in self._cache]
            try:
                self._load_now(entries, verify_hash, group)
            except Exception:
                self._note_failed(todo)
                raise
            self._note_loaded(todo, bool(verify_hash))
            if not verify_hash:
                self._unverified.update(e.index for e in todo)

    def _verify_loaded(self, entries: list[_Entry]) -> None:
        """Checks the stored hashes of `entries` loaded earlier without
        checking, reading their bytes from the file again (one tensor at a
        time); raises ``HashMismatchError`` naming the first that fails."""
        stale = [e for e in entries if e.index in self._unverified]
        if not stale:
            return
        self._check_open()
        metas = [e for e in stale if e.is_meta]
        if metas:
            self._check_meta_headers(metas, True)
        for e in stale:
            if not e.is_meta:
                scratch = np.empty(e.nbytes, dtype=np.uint8)
                self._reader.load_into([e.index], [scratch], True)
            self._unverified.discard(e.index)
        self._note_loaded(stale, True)

    def _load_now(self, entries: list[_Entry], verify_hash: bool | None, group: Any = None) -> None:
        import torch

        todo = [e for e in entries if e.index not in self._cache]
        if group is not None:
            # Collective: every rank takes part, even one with nothing new.
            self._check_open()
            self._load_shared(todo, verify_hash, group)
            return
        if not todo:
            return
        self._check_open()
        device = self._device
        # Which way each tensor goes is planned natively (read/plan.rs);
        # this method carries the plan out.
        if device.type == "cpu":
            destination = "cpu"
        elif device.type == "cuda" and _cuda.native_enabled():
            destination = "staged"
        else:
            destination = "other"
        mapped = self._map is not None and not verify_hash
        plan = self._reader.plan_load([e.index for e in todo], destination, mapped)
        by_index = {e.index: e for e in todo}
        if self._options.mmap == "on" and not self._mmap_warned:
            self._warn_copied(todo, plan, device, verify_hash)
        metas = [by_index[i] for i in plan.meta]
        if metas:
            self._claim_meta_bytes(metas, self._meta_nbytes_torch)
            self._check_meta_headers(metas, bool(verify_hash))
        if plan.mapped:
            self._load_mapped([by_index[i] for i in plan.mapped])
        staged_on_device = [by_index[i] for i in plan.staged]
        if staged_on_device:
            # Native staging ring: pinned buffers, async copies into tensors
            # allocated here (one each, or carved from one allocation), on
            # torch's current stream; decrypted and verified on the way
            # (spec §19, _cuda.py).
            dev = _cuda.load(self._reader, staged_on_device, device, verify_hash)
            for e, t in zip(staged_on_device, dev):
                grad = _dtypes.is_float_like(t.dtype)
                target = self._cast_to(t.dtype)
                if target is not None:
                    t = t.to(target)
                self._cache[e.index] = torch.nn.Parameter(t, requires_grad=grad)
        pin = device.type == "cuda"
        small = [by_index[i] for i in plan.small]
        large = [by_index[i] for i in plan.large]
        copies = self._read_copies(small, large, plan, pin, verify_hash)
        self._adopt_copies(large, copies, device, pin)
        for e in metas:
            self._cache[e.index] = self._meta_tensor(e, device)
        if pin and large:
            torch.cuda.synchronize(device)

    def _warn_copied(self, todo: list[_Entry], plan: Any, device: Any, verify_hash: bool | None) -> None:
        """Warns (once per deserializer) that ``mmap=True`` copied tensors
        of `todo` the load `plan` could not map, and why."""
        skipped = set(plan.mapped) | set(plan.meta)
        copied = [e for e in todo if e.index not in skipped and e.data_length > 0]
        if not copied:
            return
        self._mmap_warned = True
        if self._reader.encrypted:
            why = "the file is encrypted (decrypted data cannot be a view of the file)"
        elif self._map is None:
            why = "the file is not a local, non-empty file that can be memory-mapped"
        elif verify_hash:
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

    def _read_copies(self, small: list[_Entry], large: list[_Entry], plan: Any, pin: bool, verify_hash: bool | None) -> _Copies:
        """Reads `large` (each into memory of its own, starting
        ``plan.large_leads[k]`` bytes into it) and `small` (into the arenas
        of `plan`, the load plan over them) into host memory of the kind the
        plan chose (``plan.huge_pages``)."""
        import torch

        staged = [_memory.staging_tensor(e, pin, lead, plan.huge_pages) for e, lead in zip(large, plan.large_leads)]
        if large:
            buffers = [t.reshape(-1).view(torch.uint8).numpy() for t in staged]
            self._reader.load_into([e.index for e in large], buffers, verify_hash)
        # Each arena: one buffer and one native call.
        carved: list[tuple[Any, list[_Entry], list[int]]] = []
        if small:
            carved = _memory.fill_arenas(self._reader, small, plan.arenas, verify_hash, plan.huge_pages)
        return staged, carved

    def _adopt_copies(self, large: list[_Entry], copies: _Copies, device: Any, pin: bool) -> None:
        """Makes the tensors of `copies` (``_read_copies`` of `large` and
        some small entries, or the same memory filled by another rank) and
        caches them: moved to `device` and cast to ``dtype=`` as asked."""
        import torch

        staged, carved = copies
        Parameter = torch.nn.Parameter
        for e, t in zip(large, staged):
            grad = _dtypes.is_float_like(t.dtype)  # of the stored dtype, before any cast
            if device.type != "cpu":
                t = t.to(device, non_blocking=pin)
            target = self._cast_to(t.dtype)
            if target is not None:
                t = t.to(target)
            self._cache[e.index] = Parameter(t, requires_grad=grad)
        # Each packed tensor gets a storage of its own over its piece of the
        # arena (torch.frombuffer), as if allocated alone; one native loop
        # per arena makes them (carve.rs), unless a dtype cast follows.
        cache = self._cache
        cast = self._options.dtype
        if cast is None:
            for raw, members, offsets in carved:
                made = _native.carve(
                    members, raw, offsets, _carve_kind, torch.frombuffer, torch.empty,
                    torch.Tensor._make_subclass, Parameter,
                )
                cache.update(zip([e.index for e in members], made))
        else:
            for raw, members, offsets in carved:
                for e, offset in zip(members, offsets):
                    dtype, itemsize, grad = _carve_kind(e.dtype)
                    n = e.data_length
                    if n:
                        t = torch.frombuffer(raw, dtype=dtype, count=n // itemsize, offset=offset).view(e.shape)
                    else:
                        t = torch.empty(e.shape, dtype=dtype)
                    target = self._cast_to(dtype)
                    if target is not None:
                        t = t.to(target)
                    cache[e.index] = Parameter(t, requires_grad=grad)

    def _load_mapped(self, mapped: list[_Entry]) -> None:
        """Views straight into the memory map for `mapped` (entries the
        load plan found aligned to their element size)."""
        import torch

        # Parse each header once: the index and the headers must agree.
        self._reader.module_indices([e.index for e in mapped])
        self._note_mapped(mapped)
        made = _native.carve(
            mapped, self._map, [e.data_offset for e in mapped], _carve_kind, torch.frombuffer, torch.empty,
            torch.Tensor._make_subclass, torch.nn.Parameter,
        )
        cache = self._cache
        if self._options.dtype is None:
            cache.update(zip([e.index for e in mapped], made))
        else:
            for e, t in zip(mapped, made):
                target = self._cast_to(t.dtype)
                if target is not None:
                    t = torch.nn.Parameter(t.detach().to(target), requires_grad=t.requires_grad)
                cache[e.index] = t

    def _tensor(self, e: _Entry) -> Any:
        if e.index not in self._cache:
            batch = self._read_ahead(e)
            try:
                self._load(batch, self._options.verify_hash)
            except Exception:
                # A bad tensor further on is not this read's business: it
                # fails when it is itself asked for.
                if len(batch) == 1:
                    raise
                self._forget_failed(batch)
                self._load([e], self._options.verify_hash)
        return self._cache[e.index]

    def _read_ahead(self, e: _Entry) -> list[_Entry]:
        """What to load for a lazy read of `e`: `e` alone, or, when reads
        go in file order (the tensor after the last one handed out), `e` and
        the next ones up to ``LAZY_READ_AHEAD_BYTES`` and
        ``LAZY_READ_AHEAD_TENSORS``, in one native call. Iterating a lazy
        deserializer costs about what an eager load does, while it still
        holds at most a window of tensors nobody asked for."""
        if not self._options.lazy_load:
            return [e]
        pos = self._position(e.index)
        if pos != self._last_yielded + 1:
            return [e]
        cache = self._cache
        out = [e]
        size = e.nbytes
        for nxt in self._selected[pos + 1 : pos + LAZY_READ_AHEAD_TENSORS]:
            size += nxt.nbytes
            if size > LAZY_READ_AHEAD_BYTES:
                break
            if nxt.index not in cache:
                out.append(nxt)
        return out

    @staticmethod
    def _leaves(node: Any) -> Iterator[_Entry]:
        """The entries under ``node`` in insertion order (explicit stack:
        paths may be up to 1024 components deep)."""
        if isinstance(node, _Entry):
            yield node
            return
        stack = [iter(node.values())]
        while stack:
            for child in stack[-1]:
                if isinstance(child, _Entry):
                    yield child
                else:
                    stack.append(iter(child.values()))
                    break
            else:
                stack.pop()

    def _view(self, node: Any) -> Any:
        if isinstance(node, _Entry):
            return self._tensor(node)
        self._load(list(self._leaves(node)), self._options.verify_hash)
        return _fold(node, lambda e: self._cache[e.index], types.MappingProxyType)

    # -- Mapping ----------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        flat = self._flat
        if flat is not None:
            try:
                return flat[key]
            except KeyError:
                raise KeyError(f"Tensor {key} not found") from None
        if key not in self._structure:
            raise KeyError(f"Tensor {key} not found")
        node = self._structure[key]
        value = self._view(node)
        if isinstance(node, _Entry):
            self._last_yielded = max(self._last_yielded, self._position(node.index))
        return value

    def __iter__(self) -> Iterator[Any]:
        return iter(self._structure)

    def __len__(self) -> int:
        return len(self._structure)

    def __contains__(self, key: object) -> bool:
        return key in self._structure

    def keys(self) -> Any:
        return self._structure.keys()

    def items(self) -> Any:
        return self._flat.items() if self._flat is not None else ItemsView(self)

    def values(self) -> Any:
        return self._flat.values() if self._flat is not None else ValuesView(self)

    def get_slice(self, key: Any) -> Any:
        """The tensor at ``key`` (a name, or a path tuple) read a slice at a
        time: ``get_slice(k)[a:b]`` reads only those bytes (for encrypted
        files, only the chunks holding them). No hash is checked on slices
        unless ``verify_hash=True``, which checks the whole tensor once
        first. See ``tensorizer_rs._slices``."""
        from ._slices import deserializer_slice

        return deserializer_slice(self, key)

    def tree(
        self,
        prefix: Any = None,
        *,
        default: Any = None,
        filter_func: FilterFuncType | None = None,
    ) -> Any:
        """The subtree at ``prefix`` as real dicts and lists (int-keyed
        layers become lists), or the leaf tensor, or ``default``."""
        if prefix is None:
            prefix = ()
        if isinstance(prefix, (str, int)):
            raise TypeError("prefix must be a sequence of keys, e.g. ('model',)")
        node: Any = self._structure
        for part in prefix:
            if isinstance(node, _Entry) or part not in node:
                return default
            node = node[part]
        if isinstance(node, _Entry):
            return self._tensor(node)

        def leaf(e: _Entry) -> Any:
            return self._cache[e.index] if filter_func is None or filter_func(e.name) else _SKIP

        def branch(out: dict[Any, Any]) -> Any:
            if not out and filter_func is not None:
                return _SKIP
            if out and all(isinstance(k, int) for k in out):
                return [out[k] for k in sorted(out)]
            return out

        wanted = [e for e in self._leaves(node) if filter_func is None or filter_func(e.name)]
        self._load(wanted, self._options.verify_hash)
        result = _fold(node, leaf, branch)
        if result is _SKIP:
            result = {}
        return result if (result or not wanted) else default

    # -- bulk reads -----------------------------------------------------------

    def _pending(self, filter_func: FilterFuncType | None, num_tensors: int) -> tuple[list[int], list[_Entry]]:
        """The entries not yet handed out that `filter_func` keeps (at most
        `num_tensors` of them unless -1), with their positions."""
        if num_tensors < -1:
            raise ValueError("num_tensors must be -1 (all) or non-negative")
        if num_tensors == 0:
            return [], []
        if num_tensors != -1:
            # As tensorizer's itertools.islice takes it: an int (or None).
            try:
                num_tensors = operator.index(num_tensors)
            except TypeError:
                raise ValueError("num_tensors must be -1 (all) or a non-negative int") from None
        start = self._last_yielded + 1
        rest = self._selected[start:]
        if filter_func is None:
            if num_tensors != -1:
                rest = rest[:num_tensors]
            return list(range(start, start + len(rest))), rest
        positions: list[int] = []
        out: list[_Entry] = []
        for k, e in enumerate(rest, start):
            if num_tensors != -1 and len(out) >= num_tensors:
                break
            if filter_func(e.name):
                positions.append(k)
                out.append(e)
        return positions, out

    def read_tensors(
        self,
        filter_func: FilterFuncType | None = None,
        num_tensors: int = -1,
        verify_hash: bool | None = None,
    ) -> Iterator[tuple[int, TensorType, Any, Any]]:
        """Yields ``(module_index, tensor_type, name, tensor)`` in file order,
        continuing after the last tensor already handed out."""
        positions, entries = self._pending(filter_func, num_tensors)
        if not entries:
            return
        self._load(entries, self._verify(verify_hash))
        indices = self._reader.module_indices([e.index for e in entries]) if self._reader else [0] * len(entries)
        cache = self._cache
        for pos, e, idx in zip(positions, entries, indices):
            self._last_yielded = pos
            yield idx, e.tensor_type, e.name, cache[e.index]

    def read_numpy_arrays(
        self,
        filter_func: FilterFuncType | None = None,
        num_tensors: int = -1,
        allow_raw_data: bool = False,
        verify_hash: bool | None = None,
    ) -> Iterator[tuple[int, TensorType, Any, np.ndarray[Any, Any], bool, str | None]]:
        """Yields ``(module_index, tensor_type, name, array, is_opaque,
        torch_dtype)``; opaque dtypes (e.g. bfloat16) come as same-sized
        integers only with ``allow_raw_data=True``. Needs no torch."""
        if self._options.device is not None and str(self._options.device) != "cpu":
            raise RuntimeError("read_numpy_arrays requires device='cpu'")
        positions, entries = self._pending(filter_func, num_tensors)
        if not entries:
            return
        self._check_open()
        # As tensorizer: the arrays before the first opaque tensor are
        # yielded, then the opaque one raises (unless allow_raw_data).
        kinds = []
        refusal: ValueError | None = None
        for e in entries:
            np_dtype, torch_name = _dtypes.numpy_dtype(e.dtype)
            if torch_name is not None and not allow_raw_data:
                refusal = ValueError(
                    f"{e.name} has an opaque datatype: (Torch: {torch_name}, Numpy: {np_dtype.str}). "
                    f"Set `allow_raw_data=True` to return as a numpy array with a datatype of {np_dtype.str}"
                )
                break
            kinds.append((np_dtype, torch_name))
        entries = entries[: len(kinds)]
        if not entries:
            assert refusal is not None
            raise refusal
        verify = self._verify(verify_hash)
        metas = [e for e in entries if e.is_meta]
        if metas:
            self._claim_meta_bytes(metas, lambda e: e.nbytes)
            self._check_meta_headers(metas, verify)
        arrays: list[np.ndarray[Any, Any]] = []
        for e, (np_dtype, _) in zip(entries, kinds):
            if not e.is_meta:
                arrays.append(np.empty(e.shape, dtype=np_dtype))
            elif self._options.meta_tensors == "zeros":
                arrays.append(np.zeros(e.shape, dtype=np_dtype))  # calloc: lazily zeroed pages
            else:
                arrays.append(np.broadcast_to(np.zeros((), dtype=np_dtype), e.shape))
        stored = [(e.index, a.reshape(-1).view(np.uint8)) for e, a in zip(entries, arrays) if not e.is_meta]
        if stored:
            try:
                self._reader.load_into([i for i, _ in stored], [b for _, b in stored], verify)
            except Exception:
                self._note_failed(entries)
                raise
        self._note_loaded(entries, verify)
        indices = self._reader.module_indices([e.index for e in entries])
        for pos, e, idx, arr, (_, torch_name) in zip(positions, entries, indices, arrays, kinds):
            self._last_yielded = pos
            yield idx, e.tensor_type, e.name, arr, torch_name is not None, torch_name
        if refusal is not None:
            raise refusal

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        self._note_closing()
        self._closed = True
        self._reader = None
        # Tensors already handed out keep the mapping alive through their
        # buffer references; only ours is dropped here.
        self._map = None

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    @property
    def total_bytes_read(self) -> int:
        return sum(e.data_length for e in self._selected if e.index in self._cache)

    cache_status = None


_SKIP = object()


def _fold(root: dict[Any, Any], leaf: Callable[[_Entry], Any], branch: Callable[[dict[Any, Any]], Any]) -> Any:
    """Bottom-up rebuild of a nested layer dict without recursion: each
    entry becomes ``leaf(entry)``, each layer ``branch({key: child})``;
    children that come out as ``_SKIP`` are left out."""
    # Per open layer: (its key in the parent, its items iterator, results so far).
    stack: list[tuple[Any, Iterator[tuple[Any, Any]], dict[Any, Any]]] = [(None, iter(root.items()), {})]
    while True:
        _, items, out = stack[-1]
        for key, child in items:
            if isinstance(child, _Entry):
                value = leaf(child)
                if value is not _SKIP:
                    out[key] = value
            else:
                stack.append((key, iter(child.items()), {}))
                break
        else:
            key, _, out = stack.pop()
            value = branch(out)
            if not stack:
                return value
            if value is not _SKIP:
                stack[-1][2][key] = value


def _source_of(file_obj: Any) -> tuple[Any, str | None]:
    """A path, URI, opened source or bytes for the native reader, and a
    display name."""
    if isinstance(file_obj, (str, os.PathLike)):
        if _args.no_such_path(os.fspath(file_obj)):
            raise _args.file_not_found(os.fspath(file_obj))
        # Local paths and http(s)://, s3:// (configured from the environment
        # and ~/.s3cfg) and redis:// URIs; open_stream takes S3 arguments.
        return os.fspath(file_obj), None
    if isinstance(file_obj, RemoteStream):
        # As tensorizer reads from the stream's position: a file stored at
        # `begin` (or wherever the stream was seeked to), up to its `end`.
        begin, end = file_obj.tell(), file_obj.end
        if begin == 0 and end is None:
            return file_obj.native_source, None
        return file_obj.native_source.window(begin, end), None
    if isinstance(file_obj, (bytes, int)):
        raise TypeError("file_obj must be a path or a binary file object")
    if not hasattr(file_obj, "read"):
        raise _args.not_a_file(file_obj)
    if isinstance(file_obj, io.TextIOBase):
        raise ValueError('file_obj must be readable and in binary mode (mode="rb")')
    if hasattr(file_obj, "readable") and not file_obj.readable():
        raise ValueError('file_obj must be readable and in binary mode (mode="rb")')
    name = getattr(file_obj, "name", None)
    if isinstance(name, str) and os.path.isfile(name) and (not hasattr(file_obj, "tell") or file_obj.tell() == 0):
        return name, None
    return bytes(file_obj.read()), str(name) if name is not None else "<stream>"
