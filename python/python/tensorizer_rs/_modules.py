"""Loading into and checking torch modules: ``load_into_module`` and
``verify_module``, and the garbage-collector pause bulk loads run under."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import _distributed, _dtypes, _native
from ._registrar import _Registrar
from ._types import FilterFuncType, TensorType

if TYPE_CHECKING:
    from ._native import Loader

_Entry = _native.Entry


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while an index or a load
    builds tens of thousands of objects at once (each collection it would
    trigger walks every object the process has, torch's included: about a
    third of a 20,000-tensor load). Nothing built here forms a cycle."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class StrictLoadError(RuntimeError):
    """``load_into_module(strict=True)`` found the file and the module
    disagree; nothing was loaded or changed. The message is formatted as
    ``torch.nn.Module.load_state_dict``'s."""

    def __init__(
        self,
        module_name: str,
        missing_keys: list[str],
        unexpected_keys: list[str],
        size_mismatches: list[tuple[str, tuple[int, ...], tuple[int, ...]]],
    ) -> None:
        #: Parameters and persistent buffers of the module no loaded entry sets.
        self.missing_keys = missing_keys
        #: Loaded entries that name no parameter or buffer of the module.
        self.unexpected_keys = unexpected_keys
        #: ``(name, shape in the file, shape in the module)``.
        self.size_mismatches = size_mismatches
        errors = []
        if missing_keys:
            errors.append("Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing_keys)))
        if unexpected_keys:
            errors.append("Unexpected key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in unexpected_keys)))
        for name, stored, expected in size_mismatches:
            errors.append(
                f"size mismatch for {name}: copying a param with shape {list(stored)} from checkpoint, "
                f"the shape in current model is {list(expected)}."
            )
        super().__init__("Error(s) in loading state_dict for {}:\n\t{}".format(module_name, "\n\t".join(errors)))


def _check_strict(m: Any, entries: list[_Entry]) -> None:
    """Raises StrictLoadError unless `entries` set exactly the module's
    state-dict keys, with the module's shapes. Every parameter and buffer
    name counts as known (tied ones under each name, non-persistent
    buffers too: tensorizer writes them); only those in ``state_dict()``
    are required."""
    known = {n: t for n, t in m.named_parameters(remove_duplicate=False)}
    known.update(m.named_buffers(remove_duplicate=False))
    stored = {str(e.name): e for e in entries}  # plain names: checked by the caller
    missing = [k for k in m.state_dict(keep_vars=True) if k not in stored]
    unexpected = [n for n in stored if n not in known]
    mismatched = [
        (n, tuple(e.shape), tuple(known[n].shape))
        for n, e in stored.items()
        if n in known and tuple(e.shape) != tuple(known[n].shape)
    ]
    if missing or unexpected or mismatched:
        raise StrictLoadError(type(m).__name__, missing, unexpected, mismatched)


def load_into_module(
    loader: Loader, selected: list[_Entry], m: Any, filter_func: FilterFuncType | None, verify: bool,
    strict: bool, process_group: Any,
) -> int:
    """``TensorDeserializer.load_into_module`` over `selected`, the
    entries its constructor's filter kept."""
    group = _distributed.check_group(process_group)
    with _distributed.reported(group):
        entries = [e for e in selected if filter_func is None or filter_func(e.name)]
        for e in entries:
            if e.tensor_type == TensorType.STATE_DICT:
                raise NotImplementedError(
                    "This was serialized with write_state_dict(); "
                    "use the TensorDeserializer directly as a state_dict mapping instead."
                )
            if not isinstance(e.name, str):
                raise NotImplementedError("Cannot load structured tensor paths into a module")
        if strict:
            _check_strict(m, entries)
    loader.load(entries, verify, group)
    with gc_paused():
        _register(loader.cache, m, entries)
    return len(entries)


def _register(cache: dict[int, Any], m: Any, entries: list[_Entry]) -> None:
    import torch

    modules = dict(m.named_modules())
    param = TensorType.PARAM
    register = _Registrar()
    # Per module: its parameter table when a parameter already there may
    # simply be replaced (see _Registrar), else None.
    replaceable: dict[str, dict[str, Any] | None] = {}
    for e in entries:
        name = e.name
        assert isinstance(name, str)
        prefix, _, attr = name.rpartition(".")
        module = modules.get(prefix)
        if module is None:
            raise KeyError(f"Module {prefix!r} for tensor {name!r} not found in {type(m).__name__}")
        tensor = cache[e.index]
        if e.tensor_type is param:
            if prefix in replaceable:
                table = replaceable[prefix]
            else:
                table = replaceable[prefix] = register.parameters_of(module)
            if table is not None and attr in table:
                table[attr] = tensor
            else:
                register.parameter(module, attr, tensor)
        else:
            buffer = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
            # As tensorizer: every loaded buffer is registered persistent,
            # so state_dict() has the same keys after either library's
            # load (spec §11, "non-persistent buffers").
            register.buffer(module, attr, buffer)



def verify_module(loader: Loader, selected: list[_Entry], m: Any) -> tuple[bool, list[tuple[Any, bool]]]:
    """``TensorDeserializer.verify_module`` over `selected`."""
    import torch

    reader = loader.check_open()
    tensors = dict(m.state_dict())
    tensors.update(dict(m.named_buffers()))
    results = []
    for e in selected:
        name = e.name if isinstance(e.name, str) else ".".join(map(str, e.name))
        t = tensors.get(name, tensors.get(name.lstrip(".")))
        ok = False
        if t is not None and _dtypes.dtype_string(t.dtype) == e.dtype and tuple(t.shape) == e.shape:
            data = b"" if e.is_meta else t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
            try:
                reader.verify_bytes(e.index, data)
                ok = True
            except _native.HashMismatchError:
                ok = False
        results.append((e.name, ok))
    return all(ok for _, ok in results), results
