"""Loading into torch modules: ``load_into_module`` (the tensors are set on
the submodules natively: python/src/register.rs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _distributed, _native
from ._registrar import _Registrar
from ._types import FilterFuncType

if TYPE_CHECKING:
    from ._native import Loader


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
    with _distributed.reported(process_group) as group:
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
    _native.register_loaded(loader.cache, m, entries, _Registrar())
    return len(entries)
