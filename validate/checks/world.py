"""The GPUs a multi-GPU check runs one process on each of, shared by the NCCL all-reduce, the
DDP check and MirroredStrategy: what the framework (and so each worker) can use, not what NVML
lists, and only whole GPUs on a host with MIG instances (NCCL does not run across them)."""

from __future__ import annotations

from typing import Any

import pytest

from validate.host.masking import DEVICE_ORDER


def whole_gpu_env(suite: Any) -> tuple[dict[str, str | None], list[Any]]:
    """(environment for the child, the whole GPUs it gets): on a MIG host CUDA_VISIBLE_DEVICES
    narrowed to the visible GPUs not in MIG mode, by UUID; elsewhere the caller's mask is kept."""
    env: dict[str, str | None] = {"CUDA_DEVICE_ORDER": DEVICE_ORDER}
    if not suite.host.mig_gpus:
        return env, suite.host.gpus
    gpus = [g for g in suite.visible_gpus() if not g.mig_enabled]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in gpus)
    return env, gpus


def whole_gpus(suite: Any, torch: Any, what: str) -> tuple[int, dict[str, str | None], list[Any]]:
    """(GPU count, environment for the child, NVML GPUs); skips saying why when fewer than two.
    The child keeps the caller's CUDA_VISIBLE_DEVICES, narrowed to whole GPUs on a MIG host."""
    env, gpus = whole_gpu_env(suite)
    if suite.host.mig_gpus:
        if len(gpus) < 2:
            pytest.skip(
                f"{what} needs 2 or more whole GPUs; {len(gpus)} visible GPU(s) are not in MIG mode"
            )
        return len(gpus), env, gpus
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        pytest.skip(f"{what} needs 2 or more GPUs; PyTorch sees {count}")
    return count, env, gpus
