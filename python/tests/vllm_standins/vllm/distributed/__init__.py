"""Stand-in for vllm.distributed: the tensor-parallel rank is set by the
test harness (``vllm.distributed.TP_RANK``) instead of a process group."""

TP_RANK = 0


def get_tensor_model_parallel_rank() -> int:
    return TP_RANK
