"""Lazy, read-only access to ``torch.save`` checkpoints, mirroring zipslicer 0.8.1.

``load(path_or_uri)`` parses the checkpoint's ``data.pkl`` in Rust without
executing anything (no unpickling: only the opcodes and globals a state
dict uses are understood) and returns a :class:`LazyStateDict`. Indexing it
reads exactly one tensor's bytes, with range reads, from a local file or an
``http(s)://`` / ``s3://`` URI::

    from tensorizer_rs import zipslicer

    sd = zipslicer.load("model.pt")
    for key in sd.keys():              # torch.load order
        meta = sd.get_meta(key)        # shape and dtype, no data read
    w = sd["encoder.weight"]           # reads only this tensor
    rows = sd.get_slice("encoder.weight")[:128]   # reads only these rows

Differences from zipslicer: strided views (transposes, slices, expanded
tensors) come back with the values ``torch.load`` gives, as contiguous
copies; every torch dtype with a fixed size is supported; big-endian
checkpoints are byte-swapped; ``values()`` is a lazy generator instead of
an error; tensors are cached only with ``cache_tensors=True``. Nested
containers that hold tensors (``{"model": {...}, "optimizer": {...}}``)
come back as nested ``LazyStateDict`` objects keyed like torch.load's dicts
(list items are keyed by their int index). Values that hold no tensor
(ints, strings, a module's ``_extra_state`` dict, lists, tuples, empty
ones too) come back as the Python values ``torch.load`` gives, as zipslicer
returns them, and ``get_meta`` gives ``None`` for them.
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from types import SimpleNamespace
from typing import Any, Union

import torch

from ._native import CheckpointEntry, CheckpointUnpicklingError, NativeCheckpoint
from ._slices import CheckpointBackend, TensorSlice

__all__ = [
    "CheckpointUnpicklingError",
    "LazyStateDict",
    "create_storage",
    "dtype_by_name",
    "dtype_sizes",
    "get_typed_storage",
    "load",
    "load_tensor_partial",
    "skip_header",
]

Key = Union[str, int]


_Tree = dict[Key, Union[CheckpointEntry, "_Tree"]]


def _torch_dtype(name: str | None) -> torch.dtype:
    """The torch dtype a tensor entry names (every tensor entry has one)."""
    dtype = getattr(torch, name or "", None)
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"this torch has no dtype {name!r}")
    return dtype


class LazyStateDict(MutableMapping[Key, Any]):
    """A checkpoint's state dict whose tensors are read on access.

    Mirrors zipslicer's ``LazyStateDict``: ``keys()`` in ``torch.load``
    order, ``get_meta(k)``, ``__getitem__`` reading one tensor,
    ``items()``/``values()`` lazily, ``__setitem__`` (existing keys only)
    and ``__delitem__`` on an overlay that never touches the file.
    """

    def __init__(
        self,
        native: NativeCheckpoint,
        tree: _Tree,
        *,
        map_location: Any = "cpu",
        dtype: torch.dtype | None = None,
        cache_tensors: bool = False,
        debug: bool = False,
        _mapped: _MappedStorages | None = None,
    ) -> None:
        self._native = native
        self._mapped = _mapped
        self._tree = tree
        self._order: list[Key] = list(tree)
        self._overlay: dict[Key, Any] = {}
        self.map_location = map_location
        self.dtype = dtype
        self.cache_tensors = cache_tensors
        self.debug = debug

    # -- mapping ------------------------------------------------------------

    def keys(self) -> Any:
        """The keys, in ``torch.load`` order (a live view)."""
        return _KeysView(self)

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._tree

    def __getitem__(self, key: Key) -> Any:
        if key in self._overlay:
            return self._overlay[key]
        if key not in self._tree:
            raise KeyError(key)
        node = self._tree[key]
        if isinstance(node, dict) and not getattr(node, "has_tensor", True):
            return _value(node)
        if isinstance(node, dict):
            value: Any = LazyStateDict(
                self._native,
                node,
                map_location=self.map_location,
                dtype=self.dtype,
                cache_tensors=self.cache_tensors,
                debug=self.debug,
                _mapped=self._mapped,
            )
            self._overlay[key] = value
            return value
        value = self._load(node)
        if self.cache_tensors and isinstance(value, torch.Tensor):
            self._overlay[key] = value
        return value

    def __setitem__(self, key: Key, value: Any) -> None:
        # As zipslicer: new keys are not supported.
        if key not in self._tree:
            raise KeyError(key)
        self._overlay[key] = value

    def __delitem__(self, key: Key) -> None:
        if key not in self._tree:
            raise KeyError(key)
        del self._tree[key]
        self._order.remove(key)
        self._overlay.pop(key, None)

    def items(self) -> Any:
        """(key, value) pairs, each value read when its pair is reached."""
        return ((k, self[k]) for k in list(self._order))

    def values(self) -> Any:
        """Values, each read when reached (zipslicer raises here)."""
        return (self[k] for k in list(self._order))

    # -- metadata -------------------------------------------------------------

    def get_meta(self, k: Key) -> SimpleNamespace | None:
        """Shape, size() and dtype of a tensor without reading its data
        (also stride, storage_offset, storage_key, requires_grad); ``None``
        for a non-tensor value or a nested container."""
        if k not in self._tree:
            raise KeyError(k)
        node = self._tree[k]
        if isinstance(node, dict) or node.kind != "tensor":
            return None
        size = torch.Size(node.shape)
        return SimpleNamespace(
            shape=size,
            size=lambda: size,
            dtype=_torch_dtype(node.dtype),
            stride=tuple(node.stride),
            storage_offset=node.storage_offset,
            storage_key=node.storage_key,
            requires_grad=node.requires_grad,
        )

    def get_slice(self, key: Key) -> TensorSlice:
        """A tensor read a slice at a time: ``get_slice(k)[a:b]`` reads only
        the storage bytes rows ``a:b`` span (see ``tensorizer_rs._slices``);
        ``.shard(dim, rank, world_size)`` gives a tensor-parallel share.
        Slices come back converted by ``dtype`` and moved by
        ``map_location``, without ``requires_grad``."""
        node = self._tree.get(key)
        if node is None:
            raise KeyError(key)
        if isinstance(node, dict) or node.kind != "tensor":
            raise TypeError(f"{key!r} is not a tensor; get_slice takes a tensor's key")
        dtype_name, shape = node.dtype, node.shape

        def finish(t: torch.Tensor) -> torch.Tensor:
            if self.dtype is not None and t.dtype != self.dtype:
                t = t.to(self.dtype)
            if self.map_location not in (None, "cpu") and torch.device(self.map_location) != torch.device("cpu"):
                t = t.to(self.map_location)
            return t

        backend = CheckpointBackend(self._native, node.index)
        return TensorSlice(backend, key, tuple(shape), _torch_dtype(dtype_name), finish)

    def bytes_read(self) -> tuple[int, int]:
        """(bytes, requests) read from the checkpoint so far."""
        return self._native.bytes_read()

    def verify(self) -> None:
        """Checks every zip entry's CRC-32; raises ``ValueError`` naming the
        first entry that does not match."""
        for check in self._native.verify():
            if check.expected != check.actual:
                raise ValueError(f"{self._native.name()}: zip entry {check.name!r} fails its CRC-32")

    def _load(self, leaf: CheckpointEntry) -> Any:
        if leaf.kind != "tensor":
            return leaf.value
        dtype_name, shape, stride, offset = leaf.dtype, leaf.shape, leaf.stride, leaf.storage_offset
        storage, requires_grad = leaf.storage_key, leaf.requires_grad
        dtype = _torch_dtype(dtype_name)
        tensor = self._mapped.view(leaf.index, storage, dtype, shape, stride, offset) if self._mapped else None
        if tensor is None:
            nbytes = self._native.nbytes(leaf.index)
            raw = torch.empty(nbytes, dtype=torch.uint8)
            if nbytes:
                self._native.read_into(leaf.index, raw.numpy())
            tensor = raw.view(dtype).reshape(shape) if nbytes else torch.empty(shape, dtype=dtype)
            if self.debug:
                print(f"[tensorizer_rs.zipslicer] read {nbytes} bytes for entry {leaf.index}")
        if self.dtype is not None and tensor.dtype != self.dtype:
            tensor = tensor.to(self.dtype)
        if self.map_location not in (None, "cpu") and torch.device(self.map_location) != torch.device("cpu"):
            tensor = tensor.to(self.map_location)
        if requires_grad and (tensor.is_floating_point() or tensor.is_complex()):
            tensor.requires_grad_(True)
        return tensor

    def __repr__(self) -> str:
        return f"LazyStateDict({self._native.name()!r}, {len(self)} keys)"


class _MappedStorages:
    """``load(..., mmap=True)``: tensors as views of a private copy-on-write
    memory map of the file, as ``torch.load(mmap=True)`` gives them. Views
    of one storage share it (tied weights stay tied); writes stay private.
    Entries that cannot be viewed in place (big-endian archives, storages
    not aligned to their element size) are read as copies instead."""

    def __init__(self, native: NativeCheckpoint, path: str) -> None:
        import mmap

        self._native = native
        self._storages: dict[str, torch.Tensor] = {}
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
        self._usable = self._map is not None and native.byte_order() == "little"

    def view(
        self, index: int, key: str, dtype: torch.dtype, shape: Any, stride: Any, offset: int
    ) -> torch.Tensor | None:
        if not self._usable:
            return None
        storage = self._storages.get(key)
        if storage is None:
            start, length = self._native.storage_span(index)
            if length == 0:
                return None
            storage = torch.frombuffer(self._map, dtype=torch.uint8, count=length, offset=start)
            self._storages[key] = storage
        itemsize = dtype.itemsize
        if storage.numel() % itemsize or storage.data_ptr() % itemsize:
            return None
        # The core checked the view against the storage's bounds.
        return storage.view(dtype).as_strided(tuple(shape), tuple(stride), offset)


class _KeysView:
    """``keys()``: iterable, sized, supports ``in`` and equality with sets."""

    def __init__(self, owner: LazyStateDict) -> None:
        self._owner = owner

    def __iter__(self) -> Iterator[Key]:
        return iter(self._owner)

    def __len__(self) -> int:
        return len(self._owner)

    def __contains__(self, key: object) -> bool:
        return key in self._owner

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (set, frozenset, list, tuple, _KeysView)) and not hasattr(other, "__iter__"):
            return NotImplemented
        return set(self) == set(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"odict_keys({list(self)!r})"


class _Container(dict):  # type: ignore[type-arg]
    """A container of the checkpoint's pickle (keys in pickle order), with
    what it was pickled as and whether any tensor is below it."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.has_tensor = False


def _tree(native: NativeCheckpoint) -> _Tree:
    """The state dict as nested containers of entries, in pickle order:
    each container (empty ones included) is placed before the entries it
    precedes, and each tensor marks the containers above it."""
    root: _Tree = {}

    def parent_of(path: tuple[Key, ...]) -> tuple[_Tree, list[_Container]]:
        node, chain = root, []
        for component in path[:-1]:
            child = node.setdefault(component, _Container("dict"))
            if not isinstance(child, dict):
                raise ValueError(f"{native.name()}: {path!r} is both a value and a container")
            if isinstance(child, _Container):
                chain.append(child)
            node = child
        return node, chain

    def place(path: tuple[Key, ...], kind: str) -> None:
        node, _ = parent_of(path)
        node.setdefault(path[-1], _Container(kind))

    containers = native.containers()
    at = 0
    for entry in native.entries():
        while at < len(containers) and containers[at][3] <= entry.index:
            place(containers[at][0], containers[at][1])
            at += 1
        path = entry.path
        node, chain = parent_of(path)
        node[path[-1]] = entry
        if entry.kind == "tensor":
            for container in chain:
                container.has_tensor = True
    for path, kind, _len, _before in containers[at:]:
        place(path, kind)
    return root


def _value(node: CheckpointEntry | _Tree) -> Any:
    """A value that holds no tensor, rebuilt as ``torch.load`` gives it."""
    if not isinstance(node, dict):
        return node.value
    kind = getattr(node, "kind", "dict")
    if kind in ("list", "tuple"):
        items = [_value(node[k]) for k in sorted(node, key=int)]
        return items if kind == "list" else tuple(items)
    pairs = [(k, _value(v)) for k, v in node.items()]
    return OrderedDict(pairs) if kind == "ordered_dict" else dict(pairs)


#: The element sizes of the dtypes zipslicer 0.8.1 reads (its public
#: table, kept as it is so code iterating it behaves the same); this module
#: reads every torch dtype with a fixed size.
dtype_sizes: dict[torch.dtype, int] = {
    torch.float64: 8,
    torch.float32: 4,
    torch.bfloat16: 2,
    torch.float16: 2,
    torch.int64: 8,
    torch.int32: 4,
    torch.int16: 2,
    torch.uint8: 1,
    torch.int8: 1,
    torch.bool: 1,
}

#: zipslicer's dtype names (``"torch.float32"``) to dtypes.
dtype_by_name: dict[str, torch.dtype] = {str(d): d for d in dtype_sizes}

#: zipslicer's message for a checkpoint its loader cannot interpret; code
#: written for zipslicer matches on it.
_BOOTSTRAP_ERROR = (
    "Error at zipslicer.load bootstrap stage, your torch pickle checkpoint is likely too complex for the "
    "lightweight loader to interpret. Make sure your network was saved as a state_dict, instead of "
    "general-purpose network pickle. Exception was: {}"
)


def load(
    ckpt: str | os.PathLike[str],
    map_location: Any = "cpu",
    dtype: torch.dtype | None = None,
    cache_tensors: bool = False,
    debug: bool = False,
    *,
    mmap: bool = False,
) -> LazyStateDict:
    """Opens a ``torch.save`` checkpoint (a path, ``http(s)://`` or
    ``s3://`` URI) and returns its state dict with tensors read on access.

    Only the archive's directory and ``data.pkl`` are read here. ``dtype``
    converts tensors as they load; ``map_location`` moves them (zipslicer
    accepts only ``"cpu"``); ``cache_tensors`` keeps loaded tensors.
    ``mmap=True`` (local files; not in zipslicer) returns views of a
    private copy-on-write memory map instead of copies, as
    ``torch.load(mmap=True)`` does: nothing is read until touched, but a
    process that rewrites the file in place changes tensors not yet
    written to (spec §15.5).
    A pickle that needs more than a state dict (a whole pickled module,
    any global outside the allow-list) raises
    ``CheckpointUnpicklingError``, a ``pickle.UnpicklingError`` (as
    zipslicer raises, with its message) and a ``FormatError``, naming the
    global; nothing is executed. Legacy (pre-1.6) and compressed
    checkpoints raise ``FormatError``.
    """
    path = os.fsdecode(os.fspath(ckpt))
    if not path:
        raise FileNotFoundError(2, os.strerror(2), path)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or None, not {type(dtype).__name__}")
    try:
        native = NativeCheckpoint(path)
    except CheckpointUnpicklingError as e:
        raise CheckpointUnpicklingError(_BOOTSTRAP_ERROR.format(e)) from e
    mapped = _MappedStorages(native, path) if mmap and os.path.isfile(path) else None
    return LazyStateDict(
        native,
        _tree(native),
        map_location=map_location,
        dtype=dtype,
        cache_tensors=cache_tensors,
        debug=debug,
        _mapped=mapped,
    )


# -- zipslicer 0.8.1's remaining public helpers ---------------------------
# Kept so that code importing them keeps working; `load` does not use them
# (the native reader parses the archive).

#: A zip local file header: signature, versions, flags, method, times,
#: CRC-32, sizes, name and extra lengths.
structFileHeader = "<4s2B4HL2L2H"
stringFileHeader = b"PK\003\004"
sizeFileHeader = struct.calcsize(structFileHeader)


def create_storage(buf: Any) -> torch.UntypedStorage:
    """An untyped storage holding a copy of ``buf``."""
    return torch.UntypedStorage.from_buffer(buf, dtype=torch.uint8)


def get_typed_storage(backing_storage: torch.UntypedStorage, dtype: torch.dtype) -> Any:
    """``backing_storage`` seen as elements of ``dtype``."""
    return torch.storage.TypedStorage(  # type: ignore[no-untyped-call]
        wrap_storage=backing_storage, dtype=dtype, _internal=True
    )


def skip_header(zef_file: Any, zinfo: zipfile.ZipInfo) -> bool:
    """Moves ``zef_file`` past ``zinfo``'s local header (to its data),
    checking the signature and the name; raises ``zipfile.BadZipFile``."""
    zef_file.seek(zinfo.header_offset)
    raw = zef_file.read(sizeFileHeader)
    if len(raw) != sizeFileHeader:
        raise zipfile.BadZipFile("Truncated file header")
    fields = struct.unpack(structFileHeader, raw)
    if fields[0] != stringFileHeader:
        raise zipfile.BadZipFile("Bad magic number for file header")
    name = zef_file.read(fields[10])
    zef_file.read(fields[11])
    decoded = name.decode("utf-8" if fields[3] & 0x800 else "cp437")
    if decoded != zinfo.orig_filename:
        raise zipfile.BadZipFile(f"File name in directory {zinfo.orig_filename!r} and header {name!r} differ.")
    return True


def load_tensor_partial(
    zipfile: zipfile.ZipFile,
    fh: Any,
    offset_index: dict[str, int],
    dtype: torch.dtype,
    numel: int,
    key: str,
    location: Any,
    offset: int,
    use_uncompressed: bool = True,
) -> Any:
    """``numel`` elements of ``dtype`` from storage ``key``, from byte
    ``offset`` of it, as a typed storage (zipslicer's helper; ``fh``,
    ``offset_index``, ``location`` and ``use_uncompressed`` are accepted
    and unused)."""
    names = [n for n in zipfile.namelist() if n.endswith(f"data/{key}")]
    if len(names) != 1:
        raise KeyError(f"storage {key!r}: {len(names)} matching archive entries")
    size = torch.empty((), dtype=dtype).element_size() * numel
    with zipfile.open(names[0]) as f:
        f.seek(offset)
        data = f.read(size)
    if len(data) != size:
        raise ValueError(f"storage {key!r} holds fewer than {numel} elements from byte {offset}")
    return get_typed_storage(create_storage(data), dtype)
