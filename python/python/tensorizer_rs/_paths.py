"""Tensor paths: a plain str name, or a tuple of str keys and int indices."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

PathComponent = Union[str, int]
Path = tuple[PathComponent, ...]

#: The most components a tensor path may have. The Rust core refuses longer
#: names in files ("path depth"); the writer refuses them here, which also
#: stops the walk of a structure that contains itself.
MAX_DEPTH = 1024


def flatten(obj: Any, leaf_type: type | tuple[type, ...], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Depth-first walk of nested mappings (str keys) and sequences, in
    insertion order, yielding (path, leaf). Iterative, so the depth of the
    structure costs no stack; deeper than ``MAX_DEPTH`` raises ValueError."""
    path: list[Any] = list(prefix)
    # Per open container: its (component, child) iterator and whether it is a
    # mapping. Each open container owns the last slot of `path` it added.
    stack: list[tuple[Iterator[tuple[Any, Any]], bool]] = []
    node = obj
    while True:
        if isinstance(node, leaf_type):
            yield tuple(path), node
        elif isinstance(node, Mapping):
            stack.append((iter(node.items()), True))
            path.append(None)
        elif isinstance(node, Sequence) and not isinstance(node, (str, bytes)):
            stack.append((enumerate(node), False))
            path.append(None)
        else:
            raise TypeError(f"Cannot serialize type {type(node)!r}; expected tensors in mappings and sequences")
        # Move to the next child of the innermost container not yet finished.
        while stack:
            children, is_mapping = stack[-1]
            child = next(children, None)
            if child is not None:
                break
            stack.pop()
            path.pop()
        else:
            return
        key, node = child
        if is_mapping and not isinstance(key, str):
            raise TypeError(f"Invalid key type: {type(key)!r}; state dict keys must be str")
        path[-1] = key
        if len(path) > MAX_DEPTH:
            raise ValueError(
                f"tensor path depth exceeds {MAX_DEPTH} components (path starts {tuple(path[:4])!r}); "
                "a structure that contains itself cannot be serialized"
            )


def normalize(path: Path) -> str | Path:
    """tensorizer's public form: a lone str key is a plain str."""
    if len(path) == 1 and isinstance(path[0], str):
        return path[0]
    return path
