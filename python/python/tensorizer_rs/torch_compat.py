"""``torch.save`` and ``torch.load`` with tensor data in a tensorizer file
beside the checkpoint (tensorizer's ``torch_compat``).

Inside :func:`tensorizer_saving`, ``torch.save(obj, f)`` writes the pickled
structure to ``f`` as usual, but the bytes of every tensor storage go to a
sidecar ``.tensors`` file (by default ``f + ".tensors"``), written with
:class:`~tensorizer_rs.TensorSerializer`. Inside :func:`tensorizer_loading`,
``torch.load(f)`` reads them back with
:class:`~tensorizer_rs.TensorDeserializer`::

    with tensorizer_saving():
        torch.save(model, "model.pt")       # model.pt + model.pt.tensors
    with tensorizer_loading(device="cuda", num_readers=4):
        model = torch.load("model.pt")

Files are interchangeable with tensorizer 2.12.1's ``torch_compat`` in both
directions (the pickle references and the sidecar layout are the same;
spec/18-torch-compat.md). Both context managers affect only the calling
thread or asyncio task: ``torch.save`` and ``torch.load`` are replaced
while any context is open anywhere, but the replacements behave exactly
like torch's own outside a context.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
import logging
import os
import pickle
import threading
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, Final, Optional, Union

import torch

from . import _args, _cuda
from ._deserializer import TensorDeserializer
from ._serializer import TensorSerializer

__all__ = (
    "tensorizer_saving",
    "tensorizer_loading",
)

logger = logging.getLogger(__name__)

# What torch.save / torch.load accept as ``f``.
_FileLike: typing.TypeAlias = Union[str, "os.PathLike[str]", typing.IO[bytes]]
# What TensorSerializer / TensorDeserializer accept as ``file_obj``.
_SidecarLike: typing.TypeAlias = Union[str, bytes, "os.PathLike[str]", int, io.BufferedIOBase, io.RawIOBase, typing.BinaryIO]
_FileObjArg: typing.TypeAlias = Union[_SidecarLike, Callable[[_FileLike], Optional[_SidecarLike]]]
_SaveFunc: typing.TypeAlias = Callable[[Any, list[torch.Tensor], dict[str, Any]], Any]
_LoadFunc: typing.TypeAlias = Callable[[Any, dict[str, Any]], Iterable[torch.Tensor]]

# The persistent id of a storage kept in the sidecar, as tensorizer writes
# it: (_PID_TAG, _PID_VERSION, _PID_STORAGE, index in the sidecar, dtype or
# None for an untyped storage).
_PID_TAG: Final = "TensorizerPickler"
_PID_VERSION: Final = 0
_PID_STORAGE: Final = "storage"

# Loaded storages start where the sidecar tensor starts and are aligned as
# torch aligns its own (64 bytes); others are copied once.
_STORAGE_ALIGNMENT: Final = 64

_ORIG_TORCH_SAVE: Final = torch.save
_ORIG_TORCH_LOAD: Final = torch.load

# torch.load's default pickle_module (None since torch 1.13).
_LOAD_WRAPPER_DEFAULT_MODULE: Any = None


# -- per-context and per-call state ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Saving:
    file_obj: Any
    save_func: Optional[_SaveFunc]
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Loading:
    file_obj: Any
    load_func: Optional[_LoadFunc]
    suppress_weights_only: bool
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _SaveCall:
    """One torch.save inside a saving context: where the sidecar goes
    (None: nowhere, plain torch)."""

    target: Any
    save_func: Optional[_SaveFunc]
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _LoadCall:
    """One torch.load inside a loading context. The sidecar location is
    resolved from ``f`` only when the pickle refers to it."""

    f: Any
    state: _Loading
    map_location: Any


_saving: ContextVar[Optional[_Saving]] = ContextVar("tensorizer_rs_saving", default=None)
_loading: ContextVar[Optional[_Loading]] = ContextVar("tensorizer_rs_loading", default=None)
_save_call: ContextVar[Optional[_SaveCall]] = ContextVar("tensorizer_rs_save_call", default=None)
_load_call: ContextVar[Optional[_LoadCall]] = ContextVar("tensorizer_rs_load_call", default=None)


def _default_sidecar(f: Any) -> Optional[str]:
    """``f + ".tensors"`` for a path or a file object with a path name;
    None (plain torch, with a warning) when ``f`` names no file."""
    if isinstance(f, (str, bytes, os.PathLike)):
        return os.fsdecode(f) + ".tensors"
    name = getattr(f, "name", None)
    if isinstance(name, (str, bytes, os.PathLike)):
        return os.fsdecode(name) + ".tensors"
    logger.warning(
        "Cannot infer a .tensors location from a %s without a file name; not using the tensorizer "
        "backend for it (pass file_obj= to tensorizer_saving/tensorizer_loading to choose a location)",
        type(f).__name__,
    )
    return None


def _sidecar_for(f: Any, file_obj: Any) -> Any:
    if file_obj is None:
        return _default_sidecar(f)
    if callable(file_obj):
        return file_obj(f)
    return file_obj


def _untyped(storage: Any) -> torch.UntypedStorage:
    if isinstance(storage, torch.UntypedStorage):
        return storage
    inner = getattr(storage, "_untyped_storage", None)
    if inner is None:
        inner = storage.untyped()
    return typing.cast(torch.UntypedStorage, inner)


def _storage_tensor(storage: torch.UntypedStorage) -> torch.Tensor:
    """A 1-D uint8 tensor over all of ``storage``."""
    t = torch.empty((0,), dtype=torch.uint8, device=storage.device)
    t.set_(storage)
    return t


# -- saving ------------------------------------------------------------------------


class _Pickler(pickle.Pickler):
    """Pickles storages that hold data as references into the sidecar,
    which :meth:`dump` writes after the pickle.

    torch subclasses this (``class PyTorchPickler(pickle_module.Pickler)``)
    and defines its own ``persistent_id``; ``__init_subclass__`` wraps it
    so that storages with data are ours first."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tz_call = _save_call.get()
        self._tz_tensors: list[torch.Tensor] = []
        self._tz_index: dict[tuple[Any, ...], int] = {}

    def _tz_persistent_id(self, obj: Any) -> Optional[tuple[Any, ...]]:
        call = self._tz_call
        if call is None or call.target is None or not torch.is_storage(obj):
            return None
        storage = _untyped(obj)
        if storage.device.type == "meta" or storage.data_ptr() == 0:
            return None  # no data: torch pickles it as usual
        # One sidecar entry per storage, however many tensors view it.
        key = (storage.device, storage.data_ptr(), storage.nbytes())
        idx = self._tz_index.get(key)
        if idx is None:
            idx = self._tz_index[key] = len(self._tz_tensors)
            self._tz_tensors.append(_storage_tensor(storage))
        return (_PID_TAG, _PID_VERSION, _PID_STORAGE, idx, getattr(obj, "dtype", None))

    def persistent_id(self, obj: Any) -> Any:
        return self._tz_persistent_id(obj)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("persistent_id")
        if own is None:
            return

        @functools.wraps(own)
        def persistent_id(self: _Pickler, obj: Any) -> Any:
            pid = _Pickler._tz_persistent_id(self, obj)
            return pid if pid is not None else own(self, obj)

        setattr(cls, "persistent_id", persistent_id)

    def dump(self, obj: Any) -> None:
        super().dump(obj)
        tensors, self._tz_tensors, self._tz_index = self._tz_tensors, [], {}
        call = self._tz_call
        if not tensors or call is None or call.target is None:
            return  # nothing with data: no sidecar at all
        if call.save_func is not None:
            call.save_func(call.target, tensors, call.kwargs)
            return
        # Structured names "\x1e[0]", "\x1e[1]", ... of 1-D uint8 tensors.
        with TensorSerializer(call.target, **call.kwargs) as serializer:
            serializer.write_state_dict(tensors)


# -- loading -----------------------------------------------------------------------


def _is_sidecar_pid(pid: Any) -> bool:
    return isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == _PID_TAG


def _unsupported_pid(pid: Any) -> Any:
    raise pickle.UnpicklingError("unsupported persistent id encountered")


def _own_storage(t: torch.Tensor) -> torch.UntypedStorage:
    """The bytes of a loaded sidecar tensor as a storage of their own:
    its storage when that holds exactly them, aligned; a copy otherwise."""
    t = t.detach()
    storage = t.untyped_storage()
    nbytes = t.numel() * t.element_size()
    exact = (
        t.is_contiguous()
        and t.storage_offset() == 0
        and storage.nbytes() == nbytes
        and storage.data_ptr() % _STORAGE_ALIGNMENT == 0
    )
    if exact or t.is_meta:
        return storage
    return t.contiguous().reshape(-1).view(torch.uint8).clone().untyped_storage()


def _location(device: torch.device) -> str:
    return str(device)  # "cpu", "cuda:0": torch's location tags


def _place(storage: torch.UntypedStorage, map_location: Any) -> torch.UntypedStorage:
    """Applies torch.load's ``map_location`` to a sidecar storage. Its
    location is the device the sidecar was loaded onto (the pickle reference
    does not record where it was saved from)."""
    if map_location is None:
        return storage
    location = _location(storage.device)
    if callable(map_location) and not isinstance(map_location, (str, torch.device, dict)):
        moved = map_location(storage, location)
        return storage if moved is None else _untyped(moved)
    target = map_location.get(location) if isinstance(map_location, dict) else map_location
    if target is None:
        return storage
    device = torch.device(target)
    if device.type == storage.device.type and (device.index is None or device.index == storage.device.index):
        return storage
    return _storage_tensor(storage).to(device).untyped_storage()


def _direct_device(map_location: Any) -> Optional[torch.device]:
    """The device to load the sidecar straight onto for a plain
    ``map_location`` (a string, int or torch.device)."""
    if isinstance(map_location, (str, int, torch.device)) and not isinstance(map_location, bool):
        device = torch.device(map_location)
        if device.type in ("cpu", "cuda"):
            return device
    return None


class _Unpickler(pickle.Unpickler):
    """Resolves sidecar references to storages, reading the sidecar on the
    first one (so plain torch files never look for a sidecar), and hands
    every other reference to torch.

    torch sets ``unpickler.persistent_load = <its loader>`` on the
    instance; ``__setattr__`` chains ours in front of whatever is set."""

    _tz_own_load: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tz_call = _load_call.get()
        self._tz_storages: Optional[list[torch.UntypedStorage]] = None
        if not type(self)._tz_own_load:
            setattr(self, "persistent_load", _unsupported_pid)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "persistent_load" and not getattr(value, "_tz_chained", False):
            value = self._tz_chain(value)
        super().__setattr__(name, value)

    def _tz_chain(self, fallback: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def persistent_load(pid: Any) -> Any:
            if _is_sidecar_pid(pid):
                return self._tz_persistent_load(pid)
            return fallback(pid)

        setattr(persistent_load, "_tz_chained", True)
        return persistent_load

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("persistent_load")
        if own is None:
            return

        @functools.wraps(own)
        def persistent_load(self: _Unpickler, pid: Any) -> Any:
            if _is_sidecar_pid(pid):
                return self._tz_persistent_load(pid)
            return own(self, pid)

        setattr(cls, "persistent_load", persistent_load)
        cls._tz_own_load = True

    def load(self) -> Any:
        try:
            return super().load()
        finally:
            self._tz_storages = None

    def _tz_persistent_load(self, pid: tuple[Any, ...]) -> Any:
        version = pid[1]
        if version != _PID_VERSION:
            raise pickle.UnpicklingError(f"Unsupported TensorizerPickler data version ({version!r})")
        kind = pid[2]
        if kind != _PID_STORAGE:
            raise pickle.UnpicklingError(f"Unsupported TensorizerPickler object type ({kind!r})")
        if len(pid) != 5:
            raise pickle.UnpicklingError(f"malformed TensorizerPickler storage reference {pid!r}")
        idx, dtype = pid[3], pid[4]
        if not isinstance(idx, int) or isinstance(idx, bool) or not (dtype is None or isinstance(dtype, torch.dtype)):
            raise pickle.UnpicklingError(f"malformed TensorizerPickler storage reference {pid!r}")
        storages = self._tz_sidecar()
        if not 0 <= idx < len(storages):
            raise _args.SidecarMismatchError(
                f"the checkpoint refers to sidecar storage {idx}, but the sidecar holds {len(storages)}; "
                "the .tensors file does not belong to this checkpoint"
            )
        typed = torch.TypedStorage(  # type: ignore[no-untyped-call]
            wrap_storage=storages[idx], dtype=torch.uint8 if dtype is None else dtype, _internal=True
        )
        return typed

    def _tz_sidecar(self) -> list[torch.UntypedStorage]:
        if self._tz_storages is not None:
            return self._tz_storages
        call = self._tz_call
        source = None if call is None else _sidecar_for(call.f, call.state.file_obj)
        if call is None or source is None:
            raise pickle.UnpicklingError(
                "this checkpoint keeps its tensor data in a tensorizer .tensors sidecar, but no sidecar "
                "location is known: load it inside tensorizer_loading(file_obj=...) naming the sidecar"
            )
        state = call.state
        if state.load_func is not None:
            tensors = list(state.load_func(source, state.kwargs))
        else:
            kwargs = state.kwargs
            direct = _direct_device(call.map_location)
            if direct is not None and "device" not in kwargs:
                kwargs = {**kwargs, "device": direct}
            # device="cuda" loads natively (spec §19), one allocation per
            # tensor: each storage handed to the pickle must be its own.
            with _cuda.per_tensor(), TensorDeserializer(source, **kwargs) as deserializer:
                tree = deserializer.tree()
            if isinstance(tree, dict) and not tree:
                tree = []
            if not isinstance(tree, list):
                raise _args.SidecarMismatchError(
                    "the sidecar is not a torch_compat .tensors file (expected tensors named [0], [1], ...)"
                )
            tensors = tree
        self._tz_storages = [_place(_own_storage(t), call.map_location) for t in tensors]
        return self._tz_storages


def _pickle_attr(name: str) -> Any:
    return getattr(pickle, name)


# The pickle_module handed to torch: pickle, with our Pickler and Unpickler.
_tensorizer_pickle = types.ModuleType("tensorizer_rs_pickle")
setattr(_tensorizer_pickle, "__getattr__", _pickle_attr)
setattr(_tensorizer_pickle, "Pickler", _Pickler)
setattr(_tensorizer_pickle, "Unpickler", _Unpickler)


# -- torch.save / torch.load replacements ----------------------------------------


def _check_pickle_module(pickle_module: Any) -> None:
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError(
            "Tensorizer-based torch serialization is incompatible with using a pickle_module other than the default"
        )


@functools.wraps(_ORIG_TORCH_SAVE)
def _save_wrapper(obj: object, f: _FileLike, pickle_module: Any = pickle, *args: Any, **kwargs: Any) -> Any:
    state = _saving.get()
    if state is None:
        return _ORIG_TORCH_SAVE(obj, f, pickle_module, *args, **kwargs)
    _check_pickle_module(pickle_module)
    token = _save_call.set(_SaveCall(_sidecar_for(f, state.file_obj), state.save_func, state.kwargs))
    try:
        return _ORIG_TORCH_SAVE(obj, f, _tensorizer_pickle, *args, **kwargs)
    finally:
        _save_call.reset(token)


_WEIGHTS_ONLY_MESSAGE: Final = (
    "Can not safely load weights when explicit pickle_module is specified (tensorizer_loading: torch's "
    "weights_only unpickler accepts only its own storage references, not the tensorizer sidecar's; for "
    "files you trust, pass suppress_weights_only=True to tensorizer_loading)"
)


@functools.wraps(_ORIG_TORCH_LOAD)
def _load_wrapper(
    f: _FileLike,
    map_location: Any = None,
    pickle_module: Any = _LOAD_WRAPPER_DEFAULT_MODULE,
    *args: Any,
    weights_only: Optional[bool] = None,
    **kwargs: Any,
) -> Any:
    state = _loading.get()
    if state is None:
        return _ORIG_TORCH_LOAD(f, map_location, pickle_module, *args, weights_only=weights_only, **kwargs)
    _check_pickle_module(pickle_module)
    if state.suppress_weights_only:
        weights_only = False
    elif weights_only:
        raise RuntimeError(_WEIGHTS_ONLY_MESSAGE)
    token = _load_call.set(_LoadCall(f, state, map_location))
    try:
        return _ORIG_TORCH_LOAD(f, map_location, _tensorizer_pickle, *args, weights_only=weights_only, **kwargs)
    finally:
        _load_call.reset(token)


class _Patch:
    """``torch.<attr>`` replaced by ``wrapper`` while any context, in any
    thread, is open (reference-counted); the wrapper itself checks the
    calling context."""

    def __init__(self, attr: str, wrapper: Callable[..., Any]) -> None:
        self._attr = attr
        self._wrapper = wrapper
        self._lock = threading.Lock()
        self._users = 0
        self._previous: Any = None

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1:
                self._previous = getattr(torch, self._attr)
                setattr(torch, self._attr, self._wrapper)

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                # Someone who replaced it after us keeps their replacement
                # (ours, now idle, is what it calls through).
                if getattr(torch, self._attr) is self._wrapper:
                    setattr(torch, self._attr, self._previous)
                self._previous = None


_SAVE_PATCH: Final = _Patch("save", _save_wrapper)
_LOAD_PATCH: Final = _Patch("load", _load_wrapper)


# TensorDeserializer arguments that would corrupt sidecar storages (dtype
# converts the bytes, filter_func renumbers them).
_STORAGE_BREAKING: Final = ("dtype", "filter_func")


def _check_kwargs(cls: type, kwargs: dict[str, Any]) -> None:
    """Unknown keyword arguments fail when the context opens, not at the
    first save or load."""
    try:
        inspect.signature(cls).bind(None, **kwargs)
    except TypeError as e:
        raise TypeError(f"{cls.__name__} does not accept these arguments: {e}") from None


@contextlib.contextmanager
def tensorizer_saving(
    file_obj: Optional[_FileObjArg] = None,
    *,
    save_func: Optional[_SaveFunc] = None,
    **kwargs: Any,
) -> Iterator[None]:
    """Inside this context, ``torch.save`` keeps tensor data in a separate
    tensorizer file; load it back inside :func:`tensorizer_loading`.

    Only the calling thread or asyncio task is affected.

    Args:
        file_obj: Where the tensor data goes: anything ``TensorSerializer``
            accepts (a path, an ``s3://`` URI, a writable binary stream), or
            a callable given ``torch.save``'s ``f`` that returns one, or
            None to save plainly with torch. Default: ``f + ".tensors"``
            (``f``'s ``name`` for file objects; plain torch, with a logged
            warning, for one without a name such as ``io.BytesIO``).
        save_func: Replaces the write step:
            ``save_func(file_obj, tensors, kwargs)`` with the resolved
            destination, a list of 1-D uint8 tensors (one per storage) and
            the keyword arguments below.
        kwargs: Passed to ``TensorSerializer`` (``encryption=``,
            ``layout="tensorizer"`` for tensorizer's exact bytes, ...).

    No sidecar is written for objects without tensor data.
    """
    if save_func is None:
        _check_kwargs(TensorSerializer, kwargs)
    token = _saving.set(_Saving(file_obj, save_func, kwargs))
    _SAVE_PATCH.acquire()
    try:
        yield
    finally:
        _SAVE_PATCH.release()
        _saving.reset(token)


@contextlib.contextmanager
def tensorizer_loading(
    file_obj: Optional[_FileObjArg] = None,
    *,
    load_func: Optional[_LoadFunc] = None,
    suppress_weights_only: bool = False,
    **kwargs: Any,
) -> Iterator[None]:
    """Inside this context, ``torch.load`` reads tensor data that
    :func:`tensorizer_saving` (ours or tensorizer's) kept in a separate
    file. Plain torch files load as usual.

    Only the calling thread or asyncio task is affected.

    Args:
        file_obj: Where the tensor data is: anything ``TensorDeserializer``
            accepts (a path, a URI, a readable binary stream), or a callable
            given ``torch.load``'s ``f`` that returns one. Default:
            ``f + ".tensors"``. It is opened only when the checkpoint refers
            to it.
        load_func: Replaces the read step:
            ``load_func(file_obj, kwargs) -> Iterable[Tensor]``.
        suppress_weights_only: Turn ``weights_only=True`` into
            ``weights_only=False``: torch's weights-only unpickler cannot
            resolve sidecar references, so ``weights_only=True`` otherwise
            raises RuntimeError. Use it only for files you trust.
        kwargs: Passed to ``TensorDeserializer`` (``device=``,
            ``encryption=``, ``num_readers=``, ...).

    ``torch.load``'s ``map_location`` (a device string, ``torch.device``,
    dict or callable) applies to sidecar storages too; a plain device loads
    the sidecar straight onto it unless ``device=`` is given.
    """
    if load_func is None:
        _check_kwargs(TensorDeserializer, kwargs)
        for name in _STORAGE_BREAKING:
            if kwargs.get(name) is not None:
                raise ValueError(
                    f"tensorizer_loading does not take {name}=: the sidecar holds raw storage bytes, "
                    f"addressed by position, which {name}= would change; convert the loaded objects instead"
                )
    token = _loading.set(_Loading(file_obj, load_func, bool(suppress_weights_only), kwargs))
    _LOAD_PATCH.acquire()
    try:
        yield
    finally:
        _LOAD_PATCH.release()
        _loading.reset(token)
