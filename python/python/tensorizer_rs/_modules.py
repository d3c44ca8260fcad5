"""Loading into and checking torch modules: ``load_into_module`` and
``verify_module``, and the garbage-collector pause bulk loads run under."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _distributed, _native
from ._registrar import _Registrar
from ._types import FilterFuncType, TensorType

if TYPE_CHECKING:
    from ._native import Loader

_Entry = _native.Entry


#: ``with gc_paused():`` Python's cyclic collector paused while many
#: objects are made at once (python/src/gc_pause.rs).
gc_paused = _native.gc_paused


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
        super().__init__(_native.Names.strict_message(module_name, missing_keys, unexpected_keys, size_mismatches))


def load_into_module(
    loader: Loader, names: _native.Names, m: Any, filter_func: FilterFuncType | None, verify: bool,
    strict: bool, process_group: Any,
) -> int:
    """``TensorDeserializer.load_into_module`` over the entries its
    constructor's filter kept (`names`)."""
    group = _distributed.check_group(process_group)
    with _distributed.reported(group):
        entries = names.module_entries(filter_func)
        if strict:
            # Every parameter and buffer name counts as known (tied ones
            # under each name, non-persistent buffers too: tensorizer writes
            # them); only those in ``state_dict()`` are required.
            known = dict(m.named_parameters(remove_duplicate=False))
            known.update(m.named_buffers(remove_duplicate=False))
            wrong = names.strict_mismatches(entries, known, list(m.state_dict(keep_vars=True)))
            if any(wrong):
                raise StrictLoadError(type(m).__name__, *wrong)
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
