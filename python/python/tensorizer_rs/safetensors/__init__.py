"""safetensors' API on tensorizer_rs's reader.

``safe_open``, and in :mod:`tensorizer_rs.safetensors.torch` ``load_file``,
``load``, ``save_file`` and ``save``, take the arguments safetensors 0.8
takes and end the same way (``python/tests/test_safetensors_api.py`` checks
both against the published package). The differences, each on purpose
(spec §26):

- Files are read by the same native loader as tensorizer files: local
  paths and every URI tensorizer_rs reads (``https://``, ``s3://``,
  ``gs://``, ``az://``), many reader threads, reads around the page cache
  for a cold local file, ``device="cuda"`` through the staging ring. A
  tensorizer file opens too.
- ``backend`` chooses the memory. ``"mmap"`` (the default, as in
  safetensors) gives CPU tensors that are views of the file's pages only
  where the file cannot change under them (immutable, fs-verity, or on a
  read-only local file system: the rule of ``mmap="auto"``, spec §23.6),
  and private copies otherwise; safetensors maps every file, so a file
  rewritten in place shows through its tensors and one truncated kills the
  process with ``SIGBUS``. ``"pread"`` always gives private copies. Copies
  are read in full before the call returns, by many threads, around the
  page cache when the file is not cached.
- Only the ``"pt"`` (``"torch"``, ``"pytorch"``) and ``"np"`` (``"numpy"``)
  frameworks; the others raise ``SafetensorError`` naming these.
- ``save`` of a dtype safetensors cannot store raises ``ValueError``
  naming the tensor and the dtype (safetensors: a bare ``KeyError``).
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from typing import Any

from .. import _native

__all__ = ["SafeSlice", "SafetensorError", "safe_open"]


class SafetensorError(Exception):
    """What safetensors raises as ``safetensors.SafetensorError``: a file
    that is not safetensors, a tensor it does not hold, an argument value
    it does not know, a closed file."""


#: Framework names safetensors takes, by what they give here.
_TORCH = ("pt", "torch", "pytorch")
_NUMPY = ("np", "numpy")
_OTHER = ("tf", "tensorflow", "flax", "jax", "mlx", "paddle")
_BACKENDS = ("mmap", "pread")
#: Device types safetensors names without an index.
_DEVICE_TYPES = ("cpu", "cuda", "mps", "npu", "xpu", "xla", "hpu", "mlu", "musa")


def _framework(framework: Any) -> str:
    if not isinstance(framework, str):
        raise TypeError(f"argument 'framework': {type(framework).__name__!r} object is not an instance of 'str'")
    if framework in _TORCH:
        return "pt"
    if framework in _NUMPY:
        return "np"
    if framework in _OTHER:
        raise SafetensorError(f"framework {framework} is not read by tensorizer_rs: use 'pt' or 'np'")
    raise SafetensorError(f"framework {framework} is invalid")


def device_name(device: Any) -> str:
    """The torch device safetensors' ``device`` argument names: ``None``
    is the CPU, an ``int`` a CUDA device, a string a device type with an
    optional ``:index`` (only for devices other than the CPU)."""
    shown = device if isinstance(device, str) else repr(device)
    if device is None:
        return "cpu"
    if isinstance(device, int) and not isinstance(device, bool):
        if device >= 0:
            return f"cuda:{device}"
    elif isinstance(device, str):
        kind, colon, index = device.partition(":")
        if kind in _DEVICE_TYPES and (not colon or (kind != "cpu" and index.isdigit())):
            return device
    raise SafetensorError(f"device {shown} is invalid")


def _backend(backend: Any) -> str:
    if not isinstance(backend, str):
        raise TypeError(f"argument 'backend': {type(backend).__name__!r} object is not an instance of 'str'")
    if backend not in _BACKENDS:
        raise SafetensorError(f'backend "{backend}" is invalid (expected one of: "mmap", "pread")')
    return backend


def _filename(filename: Any) -> str:
    if isinstance(filename, os.PathLike):
        filename = os.fspath(filename)
    if not isinstance(filename, str):
        raise TypeError(f"argument 'filename': expected str or os.PathLike object, not {type(filename).__name__}")
    return filename


def open_deserializer(filename: Any, device: Any, backend: Any, lazy: bool) -> Any:
    """A ``TensorDeserializer`` over ``filename`` as safetensors' arguments
    ask (checked as safetensors checks them); a file the reader refuses
    raises ``SafetensorError``."""
    from .._deserializer import TensorDeserializer

    path, where, memory = _filename(filename), device_name(device), _backend(backend)
    try:
        return TensorDeserializer(path, device=where, lazy_load=lazy, verify_hash=False,
                                  mmap="auto" if memory == "mmap" else False)
    except _native.FormatError as e:
        raise SafetensorError(f"Error while deserializing header: {e}") from e


class SafeSlice:
    """What ``safe_open.get_slice`` returns: one stored tensor, read a slice
    at a time, in the framework the file was opened for. ``slice[key]``
    with ints, slices, ``...`` and ``None`` reads only the bytes the key
    selects (:class:`tensorizer_rs.TensorSlice`). As in safetensors, any
    other key (lists, tensors, booleans: advanced indexing) indexes the
    whole tensor with torch's rules under ``"pt"``, and raises
    ``SafetensorError`` under ``"np"``, which takes ints, slices and
    ``...`` only."""

    def __init__(self, inner: Any, give: Callable[[Any], Any], numpy: bool) -> None:
        self._inner = inner
        self._give = give
        self._numpy = numpy

    @property
    def shape(self) -> Any:
        return self._inner.shape

    @property
    def dtype(self) -> Any:
        return self._inner.dtype

    @property
    def ndim(self) -> int:
        return int(self._inner.ndim)

    def get_shape(self) -> list[int]:
        """The stored tensor's shape, as a list."""
        return list(self._inner.get_shape())

    def get_dtype(self) -> str:
        """The dtype as safetensors names it ("F32", "BF16", ...)."""
        return str(self._inner.get_dtype())

    def __len__(self) -> int:
        return len(self._inner)

    def __getitem__(self, key: Any) -> Any:
        if self._numpy:
            return self._give(self._inner[_numpy_key(key)])
        try:
            part = self._inner[key]
        except TypeError:  # not a basic index: torch indexes the whole
            return self._give(self._inner[...])[key]
        return self._give(part)

    def read(self) -> Any:
        """The whole tensor (``self[...]``)."""
        return self._give(self._inner.read())

    def shard(self, dim: int, rank: int, world_size: int, *, even: bool = False) -> Any:
        """Rank ``rank``'s share of ``world_size`` along ``dim``, reading
        only that share (:func:`tensorizer_rs.tp_shard`)."""
        return self._give(self._inner.shard(dim, rank, world_size, even=even))

    def __repr__(self) -> str:
        return f"SafeSlice({self._inner!r})"


def _numpy_key(key: Any) -> Any:
    """``key`` as safetensors' numpy slicing takes it: ints, slices and
    ``...`` (an empty list selects nothing), else ``SafetensorError``."""
    if isinstance(key, list):
        if key:
            raise SafetensorError("Non empty lists are not implemented")
        return slice(0, 0)
    for i, item in enumerate(key if isinstance(key, tuple) else (key,)):
        if not (isinstance(item, slice) or item is Ellipsis or (isinstance(item, int) and not isinstance(item, bool))):
            raise SafetensorError(f"Unsupported slice index at position {i}: expected slice, int, or ellipsis")
    return key


class safe_open:  # noqa: N801 (safetensors' name)
    """A safetensors file opened for reading tensors one at a time:
    ``keys()`` (sorted), ``offset_keys()`` (in file order), ``metadata()``,
    ``get_tensor(name)``, ``get_slice(name)`` (a :class:`SafeSlice`:
    ``slice[key]`` reads only that part) and ``get_tensors()``. Works with
    or without ``with``; after the ``with`` block it is closed."""

    def __init__(self, filename: Any, framework: Any, device: Any = "cpu", *, backend: Any = "mmap") -> None:
        self._framework = _framework(framework)
        self._d: Any = open_deserializer(filename, device, backend, lazy=True)
        self._closed = False

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: types.TracebackType | None) -> None:
        self._closed = True
        self._d.close()

    def _open(self) -> Any:
        if self._closed:
            raise SafetensorError("File is closed")
        return self._d

    def _give(self, tensor: Any) -> Any:
        # A plain tensor, as safetensors gives (the reader's are Parameters,
        # as tensorizer's are).
        tensor = tensor.detach()
        return tensor.numpy() if self._framework == "np" else tensor

    def keys(self) -> list[str]:
        """The tensors' names, sorted."""
        return sorted(self._open().keys())

    def offset_keys(self) -> list[str]:
        """The tensors' names in the order their data is stored."""
        return list(self._open().keys())

    def metadata(self) -> dict[str, str] | None:
        """The header's ``__metadata__``, or ``None`` when it has none."""
        pairs = self._open()._reader.safetensors_metadata
        return dict(pairs) if pairs else None

    def get_tensor(self, name: str) -> Any:
        """The tensor ``name`` on the device the file was opened for."""
        d = self._open()
        if name not in d:
            raise SafetensorError(f"File does not contain tensor {name}")
        return self._give(d[name])

    def get_slice(self, name: str) -> SafeSlice:
        """Tensor ``name``, read a slice at a time (``slice[key]``)."""
        d = self._open()
        if name not in d:
            raise SafetensorError(f"File does not contain tensor {name}")
        return SafeSlice(d.get_slice(name), self._give, self._framework == "np")

    def get_tensors(self) -> dict[str, Any]:
        """Every tensor, in file order, loaded together."""
        d = self._open()
        return {name: self._give(t) for name, t in d.items()}
