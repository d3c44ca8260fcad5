"""Stand-in for vllm.engine.arg_utils.EngineArgs: what tensorize_vllm_model uses."""

from dataclasses import dataclass

import torch

from vllm.config import ModelConfig, ParallelConfig, VllmConfig
from vllm.model_executor.models.tiny import TinyConfig


@dataclass
class EngineArgs:
    model: str
    dtype: torch.dtype = torch.float32
    tensor_parallel_size: int = 1
    seed: int = 0

    def create_engine_config(self) -> VllmConfig:
        model_config = ModelConfig(model=self.model, hf_config=TinyConfig(), dtype=self.dtype)
        config = VllmConfig(model_config=model_config,
                            parallel_config=ParallelConfig(tensor_parallel_size=self.tensor_parallel_size))
        config.seed = self.seed  # type: ignore[attr-defined]
        return config
