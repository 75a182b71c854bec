"""The memory-behaviour experiments: the environment each one runs under, and which --quick keeps.
Shared by the memory check and the process budget (validate/measure/budget.py)."""

from __future__ import annotations

from typing import Any, Callable

from validate.host import nvml

TF_MODES: dict[str, dict[str, str | None]] = {
    "growth-code": {"TF_FORCE_GPU_ALLOW_GROWTH": None},
    "growth-env": {"TF_FORCE_GPU_ALLOW_GROWTH": "true"},
    "no-growth": {"TF_FORCE_GPU_ALLOW_GROWTH": None},
}
TORCH_MODES: dict[str, dict[str, str | None]] = {
    "caching": {"PYTORCH_NO_CUDA_MEMORY_CACHING": None, "PYTORCH_CUDA_ALLOC_CONF": None},
    "no-caching": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PYTORCH_CUDA_ALLOC_CONF": None},
    "alloc-conf": {
        "PYTORCH_NO_CUDA_MEMORY_CACHING": None,
        "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
    },
}
QUICK_MODES = {"growth-env", "no-growth", "caching"}
#: The TensorFlow mode the TensorFlow info probe measures on the way (it runs with growth on):
#: the memory check reuses that measurement instead of starting another TensorFlow.
SHARED_TF_MODE = "growth-env"


def outside_measurer(uuid: str, nv: Any) -> tuple[int, Callable[[str, int], dict[str, Any]]]:
    """Used bytes before a child starts, and a function measuring the child at each step: NVML's
    per-process figure, or (inside containers, where NVML lists host PIDs) the GPU's used memory
    minus what was used before. `nv` is the suite's NVML module (Suite.nvml)."""
    before = nvml.gpu_used_memory(uuid, nv) or 0

    def measure(step: str, pid: int) -> dict[str, Any]:
        own = nvml.process_used_memory(pid, uuid, nv)
        if own is not None:
            return {"bytes": own, "method": "NVML per-process"}
        used = nvml.gpu_used_memory(uuid, nv)
        return {
            "bytes": None if used is None else max(used - before, 0),
            "method": "NVML GPU used minus before",
        }

    return before, measure
