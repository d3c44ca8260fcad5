"""Stand-in for vllm.config: the fields the tensorizer loader reads."""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from vllm.config.load import LoadConfig


@dataclass
class ModelConfig:
    model: str
    hf_config: Any
    dtype: torch.dtype = torch.float32
    architectures: tuple[str, ...] = ("TinyForCausalLM",)
    quantization: str | None = None
    served_model_name: str | list[str] | None = None
    revision: str | None = None

    def __post_init__(self) -> None:
        if self.served_model_name is None:
            self.served_model_name = self.model


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1


@dataclass
class DeviceConfig:
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def device_type(self) -> str:
        return self.device.type


@dataclass
class VllmConfig:
    model_config: ModelConfig
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    load_config: LoadConfig = field(default_factory=LoadConfig)
    quant_config: Any = None


_current: list[VllmConfig] = []


@contextlib.contextmanager
def set_current_vllm_config(
    vllm_config: VllmConfig, check_compile: bool = False, prefix: str | None = None
) -> Iterator[None]:
    _current.append(vllm_config)
    try:
        yield
    finally:
        _current.pop()


def get_current_vllm_config() -> VllmConfig:
    if not _current:
        raise RuntimeError("no current vLLM config")
    return _current[-1]
