"""tensorizer's ``utils``: model skeletons without initialisation, and
memory reporting."""

from __future__ import annotations

import contextlib
import resource
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

T = TypeVar("T")

_lock = threading.Lock()
_depth = 0
_saved: dict[str, Any] = {}


def convert_bytes(num: float, decimal: bool = True) -> str:
    """Formats a byte count: "12.3 MB" (powers of 1000) or "11.7 MiB"."""
    step = 1000.0 if decimal else 1024.0
    units = ["bytes", "KB", "MB", "GB", "TB", "PB"] if decimal else ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"]
    for unit in units[:-1]:
        if num < step:
            return "%3.1f %s" % (num, unit)
        num /= step
    return "%3.1f %s" % (num, units[-1])


def get_device() -> Any:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def get_mem_usage() -> str:
    """A one-line summary of CPU (and, with CUDA, GPU) memory use."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    parts = [f"CPU: (maxrss: {maxrss >> 10:,}MiB F: {_available_bytes() >> 20:,}MiB)"]
    try:
        import torch

        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            parts.append(f"GPU: (U: {(total - free) >> 20:,}MiB F: {free >> 20:,}MiB T: {total >> 20:,}MiB)")
    except ImportError:
        pass
    return " ".join(parts)


def _patch() -> None:
    import torch

    _saved["empty"] = torch.empty
    original_empty = torch.empty

    def meta_empty(*args: Any, **kwargs: Any) -> Any:
        kwargs["device"] = "meta"
        return original_empty(*args, **kwargs)

    torch.empty = meta_empty
    for cls in (torch.nn.Linear, torch.nn.Embedding, torch.nn.LayerNorm):
        _saved[cls.__name__] = cls.reset_parameters
        cls.reset_parameters = lambda self, *a, **k: None  # type: ignore[method-assign]


def _unpatch() -> None:
    import torch

    torch.empty = _saved.pop("empty")
    for cls in (torch.nn.Linear, torch.nn.Embedding, torch.nn.LayerNorm):
        cls.reset_parameters = _saved.pop(cls.__name__)  # type: ignore[method-assign]


@contextlib.contextmanager
def _no_init() -> Iterator[None]:
    global _depth
    with _lock:
        if _depth == 0:
            _patch()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _unpatch()


@overload
def no_init_or_tensor(loading_code: None = None) -> contextlib.AbstractContextManager[None]: ...
@overload
def no_init_or_tensor(loading_code: Callable[[], T]) -> T: ...
def no_init_or_tensor(loading_code: Callable[[], T] | None = None) -> Any:
    """Builds modules without initialising or allocating their weights:
    ``torch.empty`` allocates on the meta device and ``reset_parameters`` of
    Linear, Embedding and LayerNorm does nothing. Pass a callable to run it
    that way, or use the result of calling with no argument as a context
    manager. Load the real weights afterwards with ``load_into_module``."""
    if loading_code is None:
        return _no_init()
    if not callable(loading_code):
        raise TypeError("loading_code must be callable or None")
    with _no_init():
        return loading_code()
