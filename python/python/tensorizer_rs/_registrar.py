"""Registering loaded tensors on torch modules, as ``register_parameter``
and ``register_buffer`` would, without their per-call cost where that is
safe."""

from __future__ import annotations

from typing import Any


class _Registrar:
    """Registers loaded tensors on modules as ``register_parameter`` and
    ``register_buffer`` would, storing them directly when that is all those
    calls would do: torch's own methods (not a subclass's), no global
    registration hooks, and a name that is already a parameter (buffer) or
    is no attribute at all. Their checks cost about 5 µs a call (most of it
    an ``AttributeError`` raised inside ``hasattr``); anything unusual takes
    the real call."""

    def __init__(self) -> None:
        import torch
        from torch.nn.modules import module as _module

        self._module_type = torch.nn.Module
        self._parameter_type = torch.nn.Parameter
        self._hooks = {
            kind: bool(getattr(_module, f"_global_{kind}_registration_hooks", True)) for kind in ("parameter", "buffer")
        }
        self._plain: dict[tuple[type, str], bool] = {}

    def _table(self, module: Any, kind: str, store: str) -> dict[str, Any] | None:
        """`module`'s table `store` when registering a `kind` there would
        only store it (torch's own method, no hooks), else None."""
        key = (type(module), kind)
        plain = self._plain.get(key)
        if plain is None:
            method = f"register_{kind}"
            plain = not self._hooks[kind] and getattr(key[0], method) is getattr(self._module_type, method)
            self._plain[key] = plain
        table: dict[str, Any] | None = module.__dict__.get(store) if plain else None
        return table

    def _fast(self, module: Any, kind: str, store: str, attr: str) -> dict[str, Any] | None:
        table = self._table(module, kind, store)
        if table is None or not attr:
            return None
        if attr in table:
            return table
        d = module.__dict__
        if attr in d or hasattr(type(module), attr):
            return None
        for other in ("_parameters", "_buffers", "_modules"):
            if other != store and attr in d.get(other, ()):
                return None
        return table

    def parameters_of(self, module: Any) -> dict[str, Any] | None:
        """`module`'s parameter table when an existing parameter may be
        replaced by storing into it, else None."""
        return self._table(module, "parameter", "_parameters")

    def parameter(self, module: Any, attr: str, tensor: Any) -> None:
        table = self._fast(module, "parameter", "_parameters", attr)
        if table is None:
            module.register_parameter(attr, tensor)
        else:
            table[attr] = tensor

    def buffer(self, module: Any, attr: str, tensor: Any) -> None:
        """Registers `tensor` (a ``Parameter``'s data) as a persistent buffer."""
        if isinstance(tensor, self._parameter_type):
            tensor = tensor.data
        table = self._fast(module, "buffer", "_buffers", attr)
        if table is None:
            module.register_buffer(attr, tensor)
        else:
            table[attr] = tensor
            module._non_persistent_buffers_set.discard(attr)
