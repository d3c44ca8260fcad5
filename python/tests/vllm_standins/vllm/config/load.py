"""Stand-in for vllm.config.load."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoadConfig:
    load_format: str = "tensorizer"
    download_dir: str | None = None
    device: str | None = None
    # A TensorizerConfig, or {"tensorizer_config": {...}} (vLLM's JSON form).
    model_loader_extra_config: Any = field(default_factory=dict)
