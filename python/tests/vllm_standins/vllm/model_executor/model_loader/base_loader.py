"""Stand-in for vllm.model_executor.model_loader.base_loader."""

from abc import ABC, abstractmethod

from torch import nn

from vllm.config import ModelConfig, VllmConfig
from vllm.config.load import LoadConfig


class BaseModelLoader(ABC):
    def __init__(self, load_config: LoadConfig):
        self.load_config = load_config

    @abstractmethod
    def download_model(self, model_config: ModelConfig) -> None:
        raise NotImplementedError

    @abstractmethod
    def load_weights(self, model: nn.Module, model_config: ModelConfig) -> None:
        raise NotImplementedError

    @abstractmethod
    def load_model(self, vllm_config: VllmConfig, model_config: ModelConfig, prefix: str = "") -> nn.Module:
        raise NotImplementedError
