"""Tensor paths: a plain str name, or a tuple of str keys and int indices."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

PathComponent = Union[str, int]
Path = tuple[PathComponent, ...]


def flatten(obj: Any, leaf_type: type | tuple[type, ...], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Depth-first walk of nested mappings (str keys) and sequences, in
    insertion order, yielding (path, leaf)."""
    if isinstance(obj, leaf_type):
        yield prefix, obj
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"Invalid key type: {type(key)!r}; state dict keys must be str")
            yield from flatten(value, leaf_type, prefix + (key,))
    elif isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        for i, value in enumerate(obj):
            yield from flatten(value, leaf_type, prefix + (i,))
    else:
        raise TypeError(f"Cannot serialize type {type(obj)!r}; expected tensors in mappings and sequences")


def normalize(path: Path) -> str | Path:
    """tensorizer's public form: a lone str key is a plain str."""
    if len(path) == 1 and isinstance(path[0], str):
        return path[0]
    return path

