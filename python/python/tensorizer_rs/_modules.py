"""Loading into and checking torch modules: ``load_into_module`` and
``verify_module``, and the garbage-collector pause bulk loads run under."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

from . import _distributed, _dtypes, _native
from ._registrar import _Registrar
from ._types import FilterFuncType, TensorType

_Entry = _native.Entry


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
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


class _ModuleLoading:
    """``TensorDeserializer``'s module methods (a mixin)."""

    _reader: Any
    _cache: dict[int, Any]
    _selected: list[_Entry]

    def _check_open(self) -> None:
        raise NotImplementedError

    def _verify(self, verify_hash: object) -> bool:
        raise NotImplementedError

    def _load(self, entries: list[_Entry], verify_hash: bool | None, group: Any = None) -> None:
        raise NotImplementedError

    def load_into_module(
        self,
        m: Any,
        filter_func: FilterFuncType | None = None,
        verify_hash: bool | None = None,
        *,
        process_group: Any = None,
    ) -> int:
        """Registers every PARAM and BUFFER entry on the submodule its name
        points to (``"0.weight"`` → module ``"0"``, attribute ``weight``);
        returns how many. The tensors are inserted as loaded: no copies.

        ``process_group``: tensors not loaded yet are loaded cooperatively
        with the other ranks of this ``torch.distributed`` group, each
        reading a share of the bytes (spec §24); a collective call, which
        every rank of the group makes with the same arguments."""
        group = _distributed.check_group(process_group)
        with _distributed.reported(group):
            entries = [e for e in self._selected if filter_func is None or filter_func(e.name)]
            for e in entries:
                if e.tensor_type == TensorType.STATE_DICT:
                    raise NotImplementedError(
                        "This was serialized with write_state_dict(); "
                        "use the TensorDeserializer directly as a state_dict mapping instead."
                    )
                if not isinstance(e.name, str):
                    raise NotImplementedError("Cannot load structured tensor paths into a module")
        self._load(entries, self._verify(verify_hash), group)
        with _gc_paused():
            self._register(m, entries)
        return len(entries)

    def _register(self, m: Any, entries: list[_Entry]) -> None:
        import torch

        modules = dict(m.named_modules())
        cache = self._cache
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

    def verify_module(self, m: Any) -> tuple[bool, list[tuple[Any, bool]]]:
        """Checks a module's tensors against the stored hashes, without
        reading tensor data from the file."""
        import torch

        self._check_open()
        tensors = dict(m.state_dict())
        tensors.update(dict(m.named_buffers()))
        results = []
        for e in self._selected:
            name = e.name if isinstance(e.name, str) else ".".join(map(str, e.name))
            t = tensors.get(name, tensors.get(name.lstrip(".")))
            ok = False
            if t is not None and _dtypes.dtype_string(t.dtype) == e.dtype and tuple(t.shape) == e.shape:
                data = b"" if e.is_meta else t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
                try:
                    self._reader.verify_bytes(e.index, data)
                    ok = True
                except _native.HashMismatchError:
                    ok = False
            results.append((e.name, ok))
        return all(ok for _, ok in results), results
