"""TensorDeserializer: tensorizer's reader API over the Rust reader."""

from __future__ import annotations

import contextlib
from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from typing import Any, Literal

import numpy as np

from . import _distributed, _modules, _native
from ._crypt import DecryptionParams
from ._loader import TorchAllocator
from ._types import FilterFuncType, TensorType, _FileFeatureFlags, _FileHeader

__all__ = ["TensorDeserializer"]


#: A lazy deserializer read in file order loads ahead in windows of at most
#: this many bytes and tensors (python/src/names.rs).
LAZY_READ_AHEAD_BYTES = _native.LAZY_READ_AHEAD_BYTES
LAZY_READ_AHEAD_TENSORS = _native.LAZY_READ_AHEAD_TENSORS


#: One tensor of the file's index (typed, read-only, built natively).
_Entry = _native.Entry


class TensorDeserializer(
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
        # With a group, a failure here reaches the other ranks, which wait
        # for this one in the load's agreement (spec §24.3).
        with _distributed.reported(process_group) as group:
            # Every reader option, decided once (spec §18.8).
            self._options = options = _native.DeserializerOptions(
                device=device, filter_func=filter_func, dtype=dtype, lazy_load=lazy_load, plaid_mode=plaid_mode,
                plaid_mode_buffers=plaid_mode_buffers, num_readers=num_readers, verify_hash=verify_hash,
                encryption=encryption, mmap=mmap, meta_tensors=meta_tensors, max_meta_bytes=max_meta_bytes,
                cooperative=group is not None,
            )
            # A rank of a cooperative load reads its share only, and a sharded
            # load its shards: a URI is opened without asking for all of it.
            partial = group is not None or self._partial_open
            self._loader = loader = _native.Loader(file_obj, options, TorchAllocator(options), partial)
            reader = loader.check_open()
            self._version, self.total_file_bytes = reader.version, reader.tensor_size
            # The index as typed entries, those `filter_func` keeps, the tree of their names.
            self._all = entries = reader.entries(tuple(TensorType))
            self._names = names = _native.Names(entries, options.filter_func)
            self._selected: list[_Entry] = names.selected
            self._structure: dict[Any, Any] = names.structure
            self._file_header = _FileHeader(reader.version, _FileFeatureFlags(reader.flags), reader.tensor_size, len(entries))
            self.total_tensor_bytes = sum(e.nbytes for e in self._selected)
            self.read_bytes = 0
            self.total_compressed_tensor_bytes = 0
        # Every tensor of an eagerly loaded file with flat names, by name: the
        # mapping's reads go straight to it (BENCHMARKS.md, case b).
        self._flat: dict[Any, Any] | None = None
        if not options.lazy_load:
            loader.load(self._selected, options.verify(None), group)
            self._names.yielded()
            self._flat = self._names.flat(loader.cache)
            self.total_tensor_bytes = self._names.data_bytes()

    # -- the loader ------------------------------------------------------------

    @property
    def _reader(self) -> Any:
        """The native reader (None once closed)."""
        return self._loader.reader

    @property
    def _cache(self) -> dict[int, Any]:
        """Loaded tensors by file index."""
        return self._loader.cache

    @property
    def _map(self) -> Any:
        """The private memory map ``mmap=`` hands out views of, or None."""
        return self._loader.map

    @property
    def _device(self) -> Any:
        """The ``torch.device`` tensors go to (tensorizer's private name,
        which its own tests read)."""
        return self._loader.device

    @property
    def _file_flags(self) -> _FileFeatureFlags:
        """The header's feature flags (tensorizer's private name)."""
        return self._file_header.feature_flags

    def _tensor(self, e: _Entry) -> Any:
        # Lazy reads in file order load a window ahead (names.rs).
        return self._loader.read(e, self._names, LAZY_READ_AHEAD_BYTES)

    # -- Mapping ----------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        flat = self._flat
        try:
            if flat is not None:
                return flat[key]
            node = self._structure[key]
        except KeyError:
            raise KeyError(f"Tensor {key} not found") from None
        if isinstance(node, _Entry):
            value = self._tensor(node)
            self._names.handed_out(node)
            return value
        self._loader.load(self._names.leaves(node), self._options.verify(None))
        return self._names.view(node, self._cache)

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
        node = self._names.node(prefix)
        if node is None:
            return default
        if isinstance(node, _Entry):
            return self._tensor(node)
        wanted = self._names.leaves(node, filter_func)
        self._loader.load(wanted, self._options.verify(None))
        result = self._names.tree(node, self._cache, filter_func)
        return result if (result or not wanted) else default

    # -- bulk reads -----------------------------------------------------------

    def read_tensors(
        self,
        filter_func: FilterFuncType | None = None,
        num_tensors: int = -1,
        verify_hash: bool | None = None,
    ) -> Iterator[tuple[int, TensorType, Any, Any]]:
        """Yields ``(module_index, tensor_type, name, tensor)`` in file order,
        continuing after the last tensor already handed out."""
        positions, entries = self._names.pending(filter_func, num_tensors)
        if not entries:
            return
        self._loader.load(entries, self._options.verify(verify_hash))
        indices = self._reader.module_indices([e.index for e in entries]) if self._reader else [0] * len(entries)
        cache = self._cache
        for pos, e, idx in zip(positions, entries, indices):
            self._names.yielded(pos)
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
        positions, entries = self._names.pending(filter_func, num_tensors)
        # As tensorizer: the arrays before the first opaque tensor are
        # yielded, then the opaque one raises (unless allow_raw_data).
        verify = self._options.verify(verify_hash)
        indices, arrays, opaque, refusal = self._loader.load_arrays(entries, allow_raw_data, verify)
        for pos, e, idx, arr, torch_name in zip(positions, entries, indices, arrays, opaque):
            self._names.yielded(pos)
            yield idx, e.tensor_type, e.name, arr, torch_name is not None, torch_name
        if refusal is not None:
            raise refusal

    # -- modules, Redis, receipts -------------------------------------------

    def load_into_module(
        self,
        m: Any,
        filter_func: FilterFuncType | None = None,
        verify_hash: bool | None = None,
        *,
        strict: bool = False,
        process_group: Any = None,
    ) -> int:
        """Registers every PARAM and BUFFER entry on the submodule its name
        points to (``"0.weight"`` → module ``"0"``, attribute ``weight``);
        returns how many. The tensors are inserted as loaded: no copies.

        ``strict=True`` (ours; tensorizer's behaviour is the default) first
        checks the names and shapes against the module, as
        ``torch.nn.Module.load_state_dict(strict=True)`` does, and raises
        :class:`StrictLoadError` before loading or changing anything when
        the module has parameters or persistent buffers the loaded entries
        lack (``missing_keys``), entries name no parameter or buffer of the
        module (``unexpected_keys``), or shapes differ.

        ``process_group``: tensors not loaded yet are loaded cooperatively
        with the other ranks of this ``torch.distributed`` group, each
        reading a share of the bytes (spec §24); a collective call, which
        every rank of the group makes with the same arguments."""
        verify = self._options.verify(verify_hash)
        return _modules.load_into_module(self._loader, self._names, m, filter_func, verify, strict, process_group)

    def verify_module(self, m: Any) -> tuple[bool, list[tuple[Any, bool]]]:
        """Checks a module's tensors against the stored hashes, without
        reading tensor data from the file."""
        tensors = dict(m.state_dict())
        tensors.update(dict(m.named_buffers()))
        return self._loader.verify_module(self._selected, tensors)

    def to_redis(self, redis_client: Any, key_prefix: str, force: bool = False) -> None:
        """Stores the file under ``key_prefix`` in tensorizer's Redis layout,
        readable with ``redis://host:port/<key_prefix>``: the header and
        index in ``{prefix}:header:0``, then each tensor's header and data
        under ``{prefix}:{name}:{byte offset}``.

        As in tensorizer, a tensor whose header key already exists is
        skipped unless ``force`` is true, and every tensor of the file is
        stored, whatever ``filter_func`` selected. ``redis_client`` is a
        ``redis.Redis`` (anything with ``set`` and ``exists``).
        """
        self._loader.check_open().to_redis(redis_client, key_prefix, force)

    @property
    def receipt(self) -> _native.LoadReceipt:
        """What this deserializer has loaded, checked and read so far (a
        snapshot: an eager deserializer's is complete once constructed; a
        lazy one's grows as tensors are read). Ours; tensorizer has none."""
        return self._loader.receipt(self._all, self._selected)

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        self._loader.close()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    @property
    def total_bytes_read(self) -> int:
        return self._names.data_bytes(self._cache)

    cache_status = None
