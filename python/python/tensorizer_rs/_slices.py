"""Tensor slices read lazily: ``get_slice(key)[a:b]``.

``LazyStateDict.get_slice(key)`` (``tensorizer_rs.zipslicer``) and
``TensorDeserializer.get_slice(key)`` return a :class:`TensorSlice`, which
mirrors safetensors' ``PySafeSlice`` (``get_shape()``, ``get_dtype()``,
``[...]``) and reads, on indexing, only the bytes the slice needs: one
range read for a block of rows of a row-major tensor, a few coalesced
spans otherwise, and for an encrypted tensorizer file only the encryption
chunks those bytes lie in (each chunk is still authenticated). This works
the same on local files and ``http(s)://`` / ``s3://`` URIs.

Indexing is numpy/torch *basic* indexing: ints (negative from the end),
slices with a step ≥ 1, ``...`` and ``None``. The result equals
``full_tensor[key]`` as a new contiguous tensor (never a view of shared
memory). Advanced indexing (lists, tensors, bools) is refused: index the
returned tensor instead. A slice of a meta tensor (no stored data) is made
as the reader's ``meta_tensors`` says (zeros counted against
``max_meta_bytes``, an expanded zero, or a meta-device tensor).

Hashes cover a whole tensor, so a slice read checks none. When the
``TensorDeserializer`` was opened with ``verify_hash=True``, the first
slice of a tensor streams the whole tensor once to check its hashes (memory
bounded by one 8 MiB piece) before any slice of it is returned; checkpoints'
zip CRC-32s are not checked on slices (nor on ``LazyStateDict[key]``).

:func:`tp_shard` gives a tensor-parallel rank its share along one
dimension.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from types import EllipsisType
from typing import TYPE_CHECKING, Any, Protocol, Union

from . import _native

if TYPE_CHECKING:  # torch is imported where it is used: numpy-only use must not need it
    import torch

__all__ = ["TensorSlice", "tp_shard", "shard_range"]

IndexItem = Union[int, slice, EllipsisType, None]

_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1

def _bound(value: Any, what: str) -> int | None:
    if value is None:
        return None
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"slice {what} must be an int or None, not {type(value).__name__}") from None
    return min(max(v, _I64_MIN), _I64_MAX)


def normalize_index(key: Any) -> tuple[IndexItem, ...]:
    """``key`` as a tuple of ints, slices (bounds clamped into i64, step an
    int ≥ 1), ``...`` and ``None``; raises ``TypeError`` for advanced
    indexing and ``ValueError`` for a step below 1 (as torch does)."""
    import torch

    items = key if isinstance(key, tuple) else (key,)
    out: list[IndexItem] = []
    for item in items:
        if item is None or item is Ellipsis:
            out.append(item)
        elif isinstance(item, slice):
            step = _bound(item.step, "step")
            if step is not None and step < 1:
                raise ValueError(f"step must be greater than zero (got {step}); negative steps are not supported")
            out.append(slice(_bound(item.start, "start"), _bound(item.stop, "stop"), step))
        elif isinstance(item, bool) or (isinstance(item, torch.Tensor) and item.dtype == torch.bool):
            raise TypeError("boolean (mask) indexing is not supported by get_slice; index the returned tensor")
        else:
            try:
                i = operator.index(item)
            except TypeError:
                raise TypeError(
                    f"get_slice supports ints, slices, ... and None, not {type(item).__name__} "
                    "(advanced indexing: index the returned tensor)"
                ) from None
            if not _I64_MIN <= i <= _I64_MAX:
                raise IndexError(f"index {i} is out of bounds")
            out.append(i)
    return tuple(out)


class _Backend(Protocol):
    """Where a slice's bytes come from."""

    def shape_of(self, key: tuple[IndexItem, ...]) -> list[int]: ...

    def read_into(self, key: tuple[IndexItem, ...], buffer: Any) -> None: ...


class CheckpointBackend:
    """Entry ``index`` of a ``NativeCheckpoint``."""

    def __init__(self, native: _native.NativeCheckpoint, index: int) -> None:
        self._native = native
        self._index = index

    def shape_of(self, key: tuple[IndexItem, ...]) -> list[int]:
        return _native.checkpoint_slice_shape(self._native, self._index, key)

    def read_into(self, key: tuple[IndexItem, ...], buffer: Any) -> None:
        _native.checkpoint_read_slice(self._native, self._index, key, buffer)


class ReaderBackend:
    """Tensor ``index`` of a ``NativeReader``; ``verify`` checks the whole
    tensor's hashes once, before the first read."""

    def __init__(self, reader: _native.NativeReader, index: int, verify: bool) -> None:
        self._reader = reader
        self._index = index
        self._verify = verify

    def shape_of(self, key: tuple[IndexItem, ...]) -> list[int]:
        return _native.reader_slice_shape(self._reader, self._index, key)

    def read_into(self, key: tuple[IndexItem, ...], buffer: Any) -> None:
        if self._verify:
            _native.reader_verify_tensor(self._reader, self._index)
            self._verify = False
        _native.reader_read_slice(self._reader, self._index, key, buffer)


class ZerosBackend:
    """A meta tensor (no stored data): every slice is zeros. ``make(shape)``,
    when given, builds a slice whole (the reader's ``meta_tensors`` form,
    counted against its ``max_meta_bytes`` before anything is allocated)."""

    def __init__(self, shape: tuple[int, ...], make: Callable[[list[int]], torch.Tensor] | None = None) -> None:
        self._shape = [int(d) for d in shape]
        self.make = make

    def shape_of(self, key: tuple[IndexItem, ...]) -> list[int]:
        return _native.slice_shape(self._shape, key)

    def read_into(self, key: tuple[IndexItem, ...], buffer: Any) -> None:
        buffer[...] = 0


class TensorSlice:
    """One stored tensor, read a slice at a time (safetensors'
    ``PySafeSlice`` API): ``get_shape()``, ``get_dtype()``, ``shape``,
    ``dtype``, ``ndim``, ``len()``, and ``slice[key]`` returning
    ``full[key]`` as a new contiguous tensor. :meth:`shard` gives a
    tensor-parallel rank's share."""

    def __init__(
        self,
        backend: _Backend,
        name: Any,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        finish: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        import torch

        self._backend = backend
        self.name = name
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self._finish = finish

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def get_shape(self) -> list[int]:
        """The stored tensor's shape, as a list."""
        return list(self.shape)

    def get_dtype(self) -> str:
        """The dtype as safetensors names it ("F32", "BF16", ...; the torch
        name for dtypes safetensors has no name for)."""
        name = str(self.dtype).split(".", 1)[1]
        return _native.safetensors_dtype_name(name) or name

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, key: Any) -> torch.Tensor:
        import torch

        index = normalize_index(key)
        shape = self._backend.shape_of(index)
        if isinstance(self._backend, ZerosBackend) and self._backend.make is not None:
            return self._backend.make(shape)
        out = torch.empty(shape, dtype=self.dtype)
        if out.numel():
            self._backend.read_into(index, out.reshape(-1).view(torch.uint8).numpy())
        return self._finish(out) if self._finish is not None else out

    def read(self) -> torch.Tensor:
        """The whole tensor (``self[...]``)."""
        return self[...]

    def shard(self, dim: int, rank: int, world_size: int, *, even: bool = False) -> torch.Tensor:
        """Rank ``rank``'s share of ``world_size`` along ``dim``, reading
        only that share (see :func:`tp_shard`)."""
        return tp_shard(self, dim, rank, world_size, even=even)

    def __repr__(self) -> str:
        return f"TensorSlice({self.name!r}, shape={list(self.shape)}, dtype={self.dtype})"


def shard_range(size: int, rank: int, world_size: int, *, even: bool = False) -> slice:
    """The positions ``rank`` of ``world_size`` gets out of ``size``.

    Uneven sizes split as ``torch.tensor_split`` (and ``numpy.array_split``)
    do: the first ``size % world_size`` ranks get one more; every rank gets
    a share (maybe empty) and the shares concatenate, in rank order, to the
    whole. With ``even=True`` a size not divisible by ``world_size`` raises
    ``ValueError`` instead, as vLLM and Megatron require for their parallel
    linear layers (where both rules give the same shares).
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank!r}")
    base, extra = divmod(size, world_size)
    if even and extra:
        raise ValueError(f"size {size} does not divide evenly into {world_size} shards")
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


def tp_shard(
    tensor: TensorSlice | torch.Tensor, dim: int, rank: int, world_size: int, *, even: bool = False
) -> torch.Tensor:
    """A tensor-parallel rank's share of ``tensor`` along ``dim``.

    ``tensor`` is a :class:`TensorSlice` (only the share is read, as a new
    contiguous tensor) or a ``torch.Tensor`` (a view of it, as
    ``torch.tensor_split`` returns). Shares follow :func:`shard_range`:
    ``torch.tensor_split(t, world_size, dim)[rank]``, so ranks 0..world_size
    concatenated along ``dim`` give back the whole tensor.
    """
    shape = tuple(tensor.shape)
    if not shape:
        raise ValueError("a 0-d tensor cannot be sharded")
    if not -len(shape) <= dim < len(shape):
        raise IndexError(f"dim {dim} is out of range for a tensor of {len(shape)} dimensions")
    dim %= len(shape)
    part = shard_range(shape[dim], rank, world_size, even=even)
    key = (slice(None),) * dim + (part,)
    if isinstance(tensor, TensorSlice):
        return tensor[key]
    return tensor.narrow(dim, part.start, part.stop - part.start)


def deserializer_slice(d: Any, key: Any) -> TensorSlice:
    """``TensorDeserializer.get_slice``: ``key`` is a tensor's name (a top-
    level key) or its path as a tuple of components."""

    import torch

    from ._dtypes import torch_dtype

    node: Any = d._structure
    for part in key if isinstance(key, tuple) else (key,):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"Tensor {key} not found")
        node = node[part]
    if not isinstance(node, _native.Entry):
        raise KeyError(f"{key!r} is a group of tensors, not one tensor; get_slice takes a tensor's full path")
    d._loader.check_open()
    stored = torch_dtype(node.dtype)
    backend: _Backend
    if node.is_meta:
        entry = node
        backend = ZerosBackend(node.shape, lambda shape: d._loader.meta_slice(entry, shape))
    else:
        backend = ReaderBackend(d._reader, node.index, d._options.verify(None))
    device = d._loader.device
    target = d._loader.cast_to(stored)

    def finish(t: torch.Tensor) -> torch.Tensor:
        if device.type != "cpu":
            t = t.to(device)
        if target is not None:
            t = t.to(target)
        return t

    return TensorSlice(backend, node.name, node.shape, stored, finish)
