"""A tiny vLLM-style model: built from ``vllm_config``, loads an iterable
of (name, tensor) with ``load_weights`` like vLLM's default weight loader."""

from collections.abc import Iterable

import torch
from torch import nn
from transformers import PreTrainedConfig


class TinyConfig(PreTrainedConfig):
    model_type = "tiny"

    def __init__(self, vocab_size: int = 64, hidden_size: int = 16, **kwargs: object) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        super().__init__(**kwargs)


class TinyForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: object, prefix: str = "") -> None:
        super().__init__()
        config = vllm_config.model_config.hf_config  # type: ignore[attr-defined]
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        self.register_buffer("position_ids", torch.arange(8, dtype=torch.int64).reshape(1, 8))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(self.embed_tokens(input_ids)))

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        targets = dict(self.named_parameters())
        targets.update(self.named_buffers())
        loaded: set[str] = set()
        for name, tensor in weights:
            name = name.lstrip(".")
            target = targets[name]  # KeyError: a tensor this model lacks
            assert target.shape == tensor.shape, (name, target.shape, tensor.shape)
            with torch.no_grad():
                target.data.copy_(tensor)
            loaded.add(name)
        missing = set(targets) - loaded
        assert not missing, f"not loaded: {sorted(missing)}"
        return loaded
