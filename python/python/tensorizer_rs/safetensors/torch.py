"""``safetensors.torch``'s functions on tensorizer_rs: ``load_file``,
``load``, ``save_file`` and ``save`` (see :mod:`tensorizer_rs.safetensors`
for what differs, and why)."""

from __future__ import annotations

import io
import os
from typing import Any

import torch

from .. import _native
from . import SafetensorError, open_deserializer

__all__ = ["load", "load_file", "save", "save_file"]


def load_file(filename: str | os.PathLike[str], device: str | int = "cpu", *, backend: str = "mmap") -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors file ``filename`` (a path or a URI),
    in file order, loaded together by the native reader: with
    ``backend="mmap"`` (the default) views of a file that cannot change
    (spec §23.6) and private copies of any other, with ``"pread"`` private
    copies always."""
    with open_deserializer(filename, device, backend, lazy=False) as d:
        return {name: t.detach() for name, t in d.items()}


def load(data: bytes) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file held in ``data``, on the CPU."""
    if not isinstance(data, bytes):
        raise TypeError(f"argument 'bytes': {type(data).__name__!r} object is not an instance of 'bytes'")
    from .._deserializer import TensorDeserializer

    try:
        d = TensorDeserializer(io.BytesIO(data), device="cpu", verify_hash=False)
    except _native.FormatError as e:
        raise SafetensorError(f"Error while deserializing: {e}") from e
    with d:
        return {name: t.detach() for name, t in d.items()}


def _shared(tensors: dict[str, torch.Tensor]) -> list[set[str]]:
    """Names whose tensors overlap in memory, as groups of two or more.
    Views of one storage that share no byte (a fused weight's ``chunk``s)
    are saved as tensors of their own, as safetensors saves them; the
    tensors are contiguous (checked first), so each covers one run of
    bytes."""
    runs: dict[tuple[Any, int], list[tuple[int, int, str]]] = {}
    for name, t in tensors.items():
        if t.device.type != "meta" and t.numel():
            start = t.data_ptr()
            key = (t.device, t.untyped_storage().data_ptr())
            runs.setdefault(key, []).append((start, start + t.numel() * t.element_size(), name))
    groups: list[set[str]] = []
    for spans in runs.values():
        spans.sort()
        group, end = {spans[0][2]}, spans[0][1]
        for start, stop, name in spans[1:]:
            if start < end:
                group.add(name)
                end = max(end, stop)
                continue
            if len(group) > 1:
                groups.append(group)
            group, end = {name}, stop
        if len(group) > 1:
            groups.append(group)
    return groups


def _checked(tensors: Any, metadata: Any) -> tuple[list[tuple[str, str, list[int]]], list[Any], list[tuple[str, str]]]:
    """``tensors`` and ``metadata`` checked as safetensors checks them, as
    the native writer takes them: (name, torch dtype name, shape) and the
    CPU bytes of each, and the metadata's pairs."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"argument 'tensor_dict': {type(name).__name__!r} object is not an instance of 'str'")
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor but received {type(t)}")
        if t.layout != torch.strided:
            raise ValueError(f"You are trying to save a sparse tensor: `{name}` which this library does not support.")
        if not t.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. "
                "Call `.contiguous()` on it first (or save a copy)."
            )
    shared = _shared(tensors)
    if shared:
        raise RuntimeError(
            f"Some tensors share memory, so they would be stored twice and load as separate tensors: {shared}. "
            "Save one name per storage (or clone the others first)."
        )
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"argument 'metadata': {type(metadata).__name__!r} object is not an instance of 'dict'")
    pairs: list[tuple[str, str]] = []
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            bad = v if isinstance(k, str) else k
            raise TypeError(f"argument 'metadata': {type(bad).__name__!r} object is not an instance of 'str'")
        pairs.append((k, v))
    specs, buffers = [], []
    for name, t in tensors.items():
        t = t.detach().cpu()
        specs.append((name, str(t.dtype).removeprefix("torch."), list(t.shape)))
        buffers.append(t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b"")
    return specs, buffers, pairs


def save(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """A safetensors file of ``tensors`` (contiguous, dense, no two
    overlapping in memory) with ``metadata``, as bytes laid out as safetensors lays them."""
    specs, buffers, pairs = _checked(tensors, metadata)
    return _native.safetensors_file_bytes(specs, buffers, pairs)


def save_file(
    tensors: dict[str, torch.Tensor], filename: str | os.PathLike[str], metadata: dict[str, str] | None = None
) -> None:
    """Writes ``save(tensors, metadata)`` to ``filename`` atomically: a file
    already there is replaced only by a complete, durable new one. A write
    that fails raises ``SafetensorError`` (its ``__cause__`` the
    ``OSError``), as safetensors does."""
    specs, buffers, pairs = _checked(tensors, metadata)
    try:
        _native.write_safetensors_file(filename, specs, buffers, pairs)
    except OSError as e:  # (safetensors' class for every failed write)
        raise SafetensorError(f"Error while serializing: {e}") from e
