"""Stand-in for vllm.envs: vLLM reads its variables on attribute access."""

import os
from typing import Any


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


_READERS = {
    "S3_ACCESS_KEY_ID": lambda: os.environ.get("S3_ACCESS_KEY_ID"),
    "S3_SECRET_ACCESS_KEY": lambda: os.environ.get("S3_SECRET_ACCESS_KEY"),
    "S3_ENDPOINT_URL": lambda: os.environ.get("S3_ENDPOINT_URL"),
    "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": lambda: _int("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", 60),
}


def __getattr__(name: str) -> Any:
    if name in _READERS:
        return _READERS[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
