"""tensorizer's ``utils``: model skeletons without initialisation, and
memory reporting."""

from __future__ import annotations

import contextlib
import resource
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, NamedTuple, Optional, TypeVar, overload

T = TypeVar("T")

_lock = threading.Lock()
_depth = 0
_saved: dict[str, Any] = {}
# True in the threads and tasks inside no_init_or_tensor.
_no_init_active: ContextVar[bool] = ContextVar("tensorizer_rs_no_init", default=False)

#: In-place tensor methods that initialisation code calls (torch.nn.init,
#: transformers' _init_weights). On a meta tensor they change nothing, but
#: torch runs their shape checks through Python reference kernels (about
#: 1 ms each), which made building a model take 4x longer than it needs.
#: Inside no_init_or_tensor they return the meta tensor at once.
_META_NOOP_METHODS = (
    "normal_", "uniform_", "zero_", "fill_", "copy_", "bernoulli_", "exponential_", "log_normal_",
    "cauchy_", "geometric_", "random_", "erfinv_", "clamp_", "mul_", "add_", "sub_", "div_",
)


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


def _cuda() -> Any:
    """torch, if it is installed and CUDA is available; else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


class GlobalGPUMemoryUsage(NamedTuple):
    """Total memory usage statistics across all processes for a single GPU."""

    total: int
    free: int
    used: int

    @classmethod
    def now(cls, device: Any = None) -> Optional[GlobalGPUMemoryUsage]:
        """(total, free, used) bytes on ``device`` (default: the current
        GPU), or None without CUDA."""
        torch = _cuda()
        if torch is None:
            return None
        free, total = torch.cuda.mem_get_info(device)
        return cls(total, free, total - free)

    def __str__(self) -> str:
        return "GPU: (U: {:,}MiB F: {:,}MiB T: {:,}MiB)".format(self.used >> 20, self.free >> 20, self.total >> 20)


class TorchGPUMemoryUsage(NamedTuple):
    """Memory usage statistics for PyTorch on a single GPU."""

    reserved: int
    reserved_max: int
    used: int
    used_max: int

    @classmethod
    def now(cls, device: Any = None) -> Optional[TorchGPUMemoryUsage]:
        """PyTorch's (reserved, reserved_max, used, used_max) bytes on
        ``device``, or None without CUDA."""
        torch = _cuda()
        if torch is None:
            return None
        stats = torch.cuda.memory.memory_stats(device)
        return cls(
            stats.get("reserved_bytes.all.current", 0),
            stats.get("reserved_bytes.all.peak", 0),
            stats.get("allocated_bytes.all.current", 0),
            stats.get("allocated_bytes.all.peak", 0),
        )

    def __str__(self) -> str:
        return "TORCH: (R: {:,}MiB/{:,}MiB, A: {:,}MiB/{:,}MiB)".format(
            self.reserved >> 20, self.reserved_max >> 20, self.used >> 20, self.used_max >> 20
        )


class CPUMemoryUsage(NamedTuple):
    """Memory usage statistics for CPU RAM."""

    maxrss: int
    free: int

    @classmethod
    def now(cls) -> CPUMemoryUsage:
        """(maxrss of this process and its children, available RAM), in bytes."""
        maxrss = (
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        ) << 10
        return cls(maxrss, _available_bytes())

    def __str__(self) -> str:
        return "CPU: (maxrss: {:,}MiB F: {:,}MiB)".format(self.maxrss >> 20, self.free >> 20)


class MemoryUsage(NamedTuple):
    """CPU, total GPU and PyTorch memory usage together; ``gpu`` and
    ``torch`` are None without CUDA."""

    cpu: CPUMemoryUsage
    gpu: Optional[GlobalGPUMemoryUsage]
    torch: Optional[TorchGPUMemoryUsage]

    @classmethod
    def now(cls, device: Any = None) -> MemoryUsage:
        gpu_info = torch_info = None
        try:
            gpu_info = GlobalGPUMemoryUsage.now(device)
            torch_info = TorchGPUMemoryUsage.now(device)
        except AssertionError:
            pass
        return cls(CPUMemoryUsage.now(), gpu_info, torch_info)

    def __str__(self) -> str:
        return " ".join(str(item) for item in self if item)


def get_mem_usage() -> str:
    """A one-line summary of CPU (and, with CUDA, GPU and PyTorch) memory
    use: ``str(MemoryUsage.now())``."""
    return str(MemoryUsage.now())


def get_gpu_name() -> str:
    """The current CUDA device's name, or "N/A"."""
    torch = _cuda()
    return str(torch.cuda.get_device_name()) if torch is not None else "N/A"


def _patch() -> None:
    """Installs the replacements, which act only where ``_no_init_active``
    is set: the thread or task inside ``no_init_or_tensor``."""
    import torch

    original_empty = torch.empty
    _saved["empty"] = original_empty

    def empty(*args: Any, **kwargs: Any) -> Any:
        if _no_init_active.get():
            kwargs["device"] = "meta"
        return original_empty(*args, **kwargs)

    torch.empty = empty
    for cls in (torch.nn.Linear, torch.nn.Embedding, torch.nn.LayerNorm):
        _saved[cls.__name__] = cls.reset_parameters
        cls.reset_parameters = _skipped_when_active(cls.reset_parameters)  # type: ignore[method-assign]
    for name in _META_NOOP_METHODS:
        original = getattr(torch.Tensor, name)
        _saved["Tensor." + name] = original
        setattr(torch.Tensor, name, _meta_noop_when_active(original))


def _meta_noop_when_active(original: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.is_meta and _no_init_active.get():
            return self
        return original(self, *args, **kwargs)

    method.__name__ = getattr(original, "__name__", "method")
    method.__doc__ = getattr(original, "__doc__", None)
    return method


def _skipped_when_active(original: Callable[..., Any]) -> Callable[..., Any]:
    def reset_parameters(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _no_init_active.get():
            return None
        return original(self, *args, **kwargs)

    return reset_parameters


def _unpatch() -> None:
    import torch

    torch.empty = _saved.pop("empty")
    for name in _META_NOOP_METHODS:
        setattr(torch.Tensor, name, _saved.pop("Tensor." + name))
    for cls in (torch.nn.Linear, torch.nn.Embedding, torch.nn.LayerNorm):
        cls.reset_parameters = _saved.pop(cls.__name__)  # type: ignore[method-assign]


@contextlib.contextmanager
def _no_init() -> Iterator[None]:
    # The patches are global (installed while any thread is inside, counted
    # by _depth) but act only in the contexts that set _no_init_active, so
    # other threads and tasks build their modules normally.
    global _depth
    token = _no_init_active.set(True)
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
        _no_init_active.reset(token)


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
