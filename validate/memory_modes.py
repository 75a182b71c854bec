"""The memory-behaviour experiments: the environment each one runs under, and which --quick keeps.
Shared by the memory check and the process budget (validate/budget.py)."""

from __future__ import annotations

TF_MODES: dict[str, dict[str, str | None]] = {
    "growth-code": {"TF_FORCE_GPU_ALLOW_GROWTH": None},
    "growth-env": {"TF_FORCE_GPU_ALLOW_GROWTH": "true"},
    "no-growth": {"TF_FORCE_GPU_ALLOW_GROWTH": None},
}
TORCH_MODES: dict[str, dict[str, str | None]] = {
    "caching": {"PYTORCH_NO_CUDA_MEMORY_CACHING": None, "PYTORCH_CUDA_ALLOC_CONF": None},
    "no-caching": {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "PYTORCH_CUDA_ALLOC_CONF": None},
    "alloc-conf": {"PYTORCH_NO_CUDA_MEMORY_CACHING": None, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
}
QUICK_MODES = {"growth-env", "no-growth", "caching"}
