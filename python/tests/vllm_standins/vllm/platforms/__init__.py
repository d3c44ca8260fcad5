"""Stand-in for vllm.platforms: vLLM's CPU platform (device_type "cpu").

vLLM's ``deserialize_tensorizer_model`` builds its device as
``f"{current_platform.device_type}:{torch.accelerator.current_device_index()}"``.
Where torch has no usable accelerator, ``current_device_index()`` raises:
torch 2.15's CUDA build without a driver raises RuntimeError("Found no
NVIDIA driver on your system ..."), and a CPU-only build cannot answer
either (its ``at::accelerator::getDeviceIndex`` requires an accelerator).
vLLM 0.33.0's CPU platform does not change that, so unmodified vLLM cannot
load a vLLM-tensorized model on a machine without an accelerator, whichever
tensorizer it uses. The harness checks that it raises the same way for both
implementations, then calls ``patch_accelerator_index()``: the index becomes
0, the index of the one CPU device, so the device is "cpu:0" (a string
torch accepts). With a usable accelerator nothing is patched.
"""

import torch


class CpuPlatform:
    device_name: str = "cpu"
    device_type: str = "cpu"
    dispatch_key: str = "CPU"

    def is_cpu(self) -> bool:
        return True

    def is_cuda_alike(self) -> bool:
        return False


current_platform = CpuPlatform()


def accelerator_index_error() -> BaseException | None:
    """What torch.accelerator.current_device_index() raises here (None: it works)."""
    try:
        torch.accelerator.current_device_index()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def patch_accelerator_index() -> bool:
    """Index 0 where torch has no usable accelerator; True if patched."""
    if accelerator_index_error() is None:
        return False
    torch.accelerator.current_device_index = lambda: 0  # type: ignore[assignment]
    return True
