"""Stand-in for vllm.v1.engine.llm_engine.LLMEngine, as tensorize_vllm_model
uses it: one in-process worker per tensor-parallel rank, each with its own
model (seeded by rank), and collective_rpc calling every worker in turn with
vllm.distributed's rank set to the worker's. ``SAVED`` keeps, per rank, the
state dict each worker's model had before it was saved (the test's reference)."""

from typing import Any

import torch

import vllm.distributed
from vllm.config import VllmConfig
from vllm.model_executor.model_loader.utils import initialize_model
from vllm.utils.torch_utils import set_default_torch_dtype

SAVED: dict[int, dict[str, torch.Tensor]] = {}
SHUTDOWN_TIMEOUTS: list[float | None] = []


class _Worker:
    """vllm.v1.worker.gpu_worker.Worker, reduced to save_tensorized_model."""

    def __init__(self, vllm_config: VllmConfig, rank: int) -> None:
        self.rank = rank
        self.model_config = vllm_config.model_config
        torch.manual_seed(getattr(vllm_config, "seed", 0) + rank)
        with set_default_torch_dtype(self.model_config.dtype), torch.device("cpu"):
            self.model = initialize_model(vllm_config=vllm_config)

    def get_model(self) -> torch.nn.Module:
        return self.model

    def save_tensorized_model(self, tensorizer_config: Any) -> None:
        # vLLM's Worker.save_tensorized_model, verbatim apart from the import.
        from vllm.model_executor.model_loader.tensorizer_loader import TensorizerLoader

        SAVED[self.rank] = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        TensorizerLoader.save_model(
            self.get_model(),
            tensorizer_config=tensorizer_config,
            model_config=self.model_config,
        )


class _Renderer:
    def shutdown(self) -> None:
        pass


class _EngineCore:
    def shutdown(self, timeout: float | None = None) -> None:
        SHUTDOWN_TIMEOUTS.append(timeout)


class LLMEngine:
    def __init__(self, vllm_config: VllmConfig) -> None:
        self.vllm_config = vllm_config
        tp = vllm_config.parallel_config.tensor_parallel_size
        self.workers = [_Worker(vllm_config, rank) for rank in range(tp)]
        self.renderer = _Renderer()
        self.engine_core = _EngineCore()

    @classmethod
    def from_vllm_config(cls, vllm_config: VllmConfig, **_: Any) -> "LLMEngine":
        return cls(vllm_config)

    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = (),
                       kwargs: dict[str, Any] | None = None) -> list[Any]:
        results = []
        for worker in self.workers:
            vllm.distributed.TP_RANK = worker.rank
            try:
                results.append(getattr(worker, method)(*args, **(kwargs or {})))
            finally:
                vllm.distributed.TP_RANK = 0
        return results
