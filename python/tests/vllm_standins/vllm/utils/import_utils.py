"""Stand-in for vllm.utils.import_utils.PlaceholderModule: what vLLM puts in
place of tensorizer's names when ``import tensorizer`` fails. Any use raises
the ImportError, so a name missing from an implementation cannot pass
unnoticed."""

import importlib
from typing import Any, NoReturn


class _Placeholder:
    def __init__(self, module: str, attr: str | None = None) -> None:
        self._module = module
        self._attr = attr

    def _fail(self) -> NoReturn:
        importlib.import_module(self._module)  # raises the original ImportError
        what = f"{self._module}.{self._attr}" if self._attr else self._module
        raise ImportError(f"vLLM placeholder for {what} used although {self._module} imports")

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        self._fail()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._fail()


class PlaceholderModule(_Placeholder):
    def __init__(self, name: str) -> None:
        super().__init__(name)

    def placeholder_attr(self, attr_path: str) -> _Placeholder:
        return _Placeholder(self._module, attr_path)
