"""Stand-in for vllm.utils.torch_utils (vLLM's code)."""

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def set_default_torch_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Sets the default torch dtype to the given dtype."""
    old_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old_dtype)
