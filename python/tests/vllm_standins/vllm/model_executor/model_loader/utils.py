"""Stand-in for vllm.model_executor.model_loader.utils: one architecture."""

import inspect

from torch import nn

from vllm.config import ModelConfig, VllmConfig, set_current_vllm_config
from vllm.model_executor.models.tiny import TinyForCausalLM

_REGISTRY: dict[str, type[nn.Module]] = {"TinyForCausalLM": TinyForCausalLM}


def get_model_architecture(model_config: ModelConfig) -> tuple[type[nn.Module], str]:
    for arch in model_config.architectures:
        if arch in _REGISTRY:
            return _REGISTRY[arch], arch
    raise ValueError(f"Model architectures {model_config.architectures} are not supported")


def initialize_model(
    vllm_config: VllmConfig,
    *,
    prefix: str = "",
    model_class: type[nn.Module] | None = None,
    model_config: ModelConfig | None = None,
) -> nn.Module:
    if model_config is None:
        model_config = vllm_config.model_config
    if model_class is None:
        model_class, _ = get_model_architecture(model_config)
    params = inspect.signature(model_class.__init__).parameters
    assert "vllm_config" in params and "prefix" in params
    with set_current_vllm_config(vllm_config, check_compile=True, prefix=prefix):
        return model_class(vllm_config=vllm_config, prefix=prefix)
