"""The GPUs a multi-GPU check runs one process on each of, shared by the NCCL all-reduce and the
DDP check: what PyTorch (and so each worker) can use, not what NVML lists, and only whole GPUs on
a host with MIG instances (NCCL does not run across them)."""

from __future__ import annotations

from typing import Any

import pytest


def whole_gpus(suite: Any, torch: Any, what: str) -> tuple[int, dict[str, str | None], list[Any]]:
    """(GPU count, environment for the child, NVML GPUs); skips saying why when fewer than two.
    The child keeps the caller's CUDA_VISIBLE_DEVICES, narrowed to whole GPUs on a MIG host."""
    env: dict[str, str | None] = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    gpus = suite.host.gpus
    if suite.host.mig_gpus:
        gpus = [g for g in suite.visible_gpus() if not g.mig_enabled]
        if len(gpus) < 2:
            pytest.skip(f"{what} needs 2 or more whole GPUs; {len(gpus)} visible GPU(s) are not in MIG mode")
        env["CUDA_VISIBLE_DEVICES"] = ",".join(g.uuid for g in gpus)
        return len(gpus), env, gpus
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        pytest.skip(f"{what} needs 2 or more GPUs; PyTorch sees {count}")
    return count, env, gpus
