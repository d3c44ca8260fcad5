"""``install_as_tensorizer()``: ``import tensorizer`` gives this package.

Code written for tensorizer (vLLM's loader, say) imports ``tensorizer`` and
its submodules by name. After ``install_as_tensorizer()`` those names are
this package's module objects, one copy of each: ``tensorizer`` is
``tensorizer_rs``, ``tensorizer.serialization`` is
``tensorizer_rs.serialization``, and so on for every submodule, imported
when first asked for (``tensorizer.torch_compat`` still imports torch only
then). So ``isinstance`` holds across the two names and patching one patches
the other. A submodule this package lacks fails to import, as it should.

Mapping ``sys.modules["tensorizer"]`` alone is not enough: Python would then
find ``tensorizer.serialization`` on the package's path and execute the file
a second time, as a second module with its own classes. A finder at the
front of ``sys.meta_path`` answers every ``tensorizer.*`` name instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType

ALIAS = "tensorizer"
PACKAGE = __name__.rpartition(".")[0]
#: Set to ``1`` to have the vLLM plugin install the alias in every vLLM
#: process (front end, engine core and workers).
ENV_VAR = "TENSORIZER_RS_AS_TENSORIZER"


class _Loader(importlib.abc.Loader):
    """Hands out the module that is already there under our name."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        # The import system gave the module the alias's spec; it keeps its own.
        module.__spec__ = self._spec


class _Finder(importlib.abc.MetaPathFinder):
    """``tensorizer.X`` is ``tensorizer_rs.X``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(ALIAS + "."):
            return None
        ours = PACKAGE + fullname[len(ALIAS) :]
        try:
            module = importlib.import_module(ours)
        except ModuleNotFoundError as e:
            if e.name != ours:
                raise
            return None
        return importlib.machinery.ModuleSpec(fullname, _Loader(module), is_package=hasattr(module, "__path__"))


def _installed() -> bool:
    return any(isinstance(f, _Finder) for f in sys.meta_path)


def install_as_tensorizer() -> None:
    """Makes ``import tensorizer`` (and every ``tensorizer.<submodule>``)
    give this package's modules, for code written for tensorizer.

    Call it before anything imports tensorizer. Calling it again does
    nothing. Raises ``RuntimeError`` if the real tensorizer is already
    imported: its classes would then coexist with ours under one name.
    """
    package = sys.modules[PACKAGE]
    present = {n: m for n, m in sys.modules.items() if n == ALIAS or n.startswith(ALIAS + ".")}
    ours = {n: m for n, m in present.items() if getattr(m, "__name__", "").startswith(PACKAGE)}
    if present.keys() != ours.keys():
        where = getattr(present.get(ALIAS), "__file__", None) or "elsewhere"
        raise RuntimeError(
            f"the real tensorizer is already imported ({where}); call "
            f"{PACKAGE}.install_as_tensorizer() before anything imports tensorizer"
        )
    if _installed():
        return
    sys.meta_path.insert(0, _Finder())
    sys.modules[ALIAS] = package
    # Submodules imported under our name already: the same objects.
    for name, module in list(sys.modules.items()):
        if name.startswith(PACKAGE + "."):
            sys.modules.setdefault(ALIAS + name[len(PACKAGE) :], module)


def install_if_asked() -> bool:
    """Installs the alias when ``TENSORIZER_RS_AS_TENSORIZER=1``; returns
    whether it is installed."""
    if os.environ.get(ENV_VAR, "") not in ("", "0"):
        install_as_tensorizer()
    return _installed()
