"""Arguments as tensorizer 2.12.1 takes them: one place for how a value of
a public parameter is read and for the classes its refusals raise.

tensorizer tests flags for truth (``TensorDeserializer``'s are decided
natively, in ``_native.DeserializerOptions``), counts with
``itertools.islice``, paths with ``open``, and often fails on a wrong type by duck typing (an
``AttributeError`` from ``None.write``, a ``struct.error`` from packing).
Our refusals say what is wrong, and their classes derive from the class
tensorizer raises for the same value, so code written against tensorizer
catches them (``python/tests/test_arguments.py`` checks every public
parameter against tensorizer itself; spec §11.5).
"""

from __future__ import annotations

import operator
import os
import pickle
import struct
from typing import Any

import numpy as np


class ArgumentTypeError(TypeError, AttributeError):
    """A value of the wrong type where tensorizer's duck typing raises
    ``AttributeError`` (a file object without ``write``, a tensor without
    ``dtype``): a ``TypeError`` that ``except AttributeError`` still
    catches."""


class ModuleIndexError(ValueError, struct.error):
    """A module index that is not an int from 0 to 65535 (tensorizer packs
    it and raises ``struct.error``)."""


class SidecarMismatchError(pickle.UnpicklingError, KeyError, IndexError):
    """A ``torch_compat`` checkpoint whose tensor sidecar does not hold the
    tensors its pickle names (tensorizer looks them up and raises
    ``KeyError`` or ``IndexError``)."""

    __str__ = BaseException.__str__  # a message, not KeyError's quoted key


def count(value: Any) -> int:
    """A count or position given as an int, a bool or a numpy int/bool."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    return operator.index(value)


def module_index(idx: object) -> int:
    """A tensor header's module index: an int from 0 to 65535."""
    try:
        value = operator.index(idx)  # type: ignore[arg-type]
    except TypeError:
        raise ModuleIndexError(f"module index must be an int from 0 to 65535, not {type(idx).__name__}") from None
    if not 0 <= value <= 0xFFFF:
        raise ModuleIndexError(f"module index {value} does not fit in 16 bits (0 to 65535)")
    return value


def no_such_path(path: str | bytes) -> bool:
    """Whether `path` is the empty path, which ``open`` refuses with
    ``FileNotFoundError`` (tensorizer opens it and fails there)."""
    return path in ("", b"")


def file_not_found(path: str | bytes) -> FileNotFoundError:
    return FileNotFoundError(2, os.strerror(2), os.fsdecode(path))


def not_a_file(file_obj: Any, what: str = "a path or a binary file object") -> ArgumentTypeError:
    return ArgumentTypeError(f"file_obj must be {what}, not {type(file_obj).__name__}")
