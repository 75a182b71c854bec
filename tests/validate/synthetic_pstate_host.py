"""pytest plugin for a suite run in a subprocess: the SYNTHETIC two-GPU host of
synthetic_gpu_host.py, whose GPU 0 answers one bare hw_slowdown (a P-state change, nvml.h) at its
first clock-event reading and only gpu_idle after: the suite's own re-reading is what clears it.
Given alone (`-p synthetic_pstate_host`), it answers the suite's pytest_validate_nvml_module.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from nvml_synthetic import TWO_H100_HOST, SyntheticNvml

#: nvmlClocksEventReasonGpuIdle and nvmlClocksEventReasonHwSlowdown (nvml.h).
IDLE, HW_SLOWDOWN = 0x1, 0x8


class _Readings(list):
    """Clock-event masks answered in turn; the last one holds from then on."""

    def pop(self, index: int = -1) -> Any:
        return super().pop(index) if len(self) > 1 else self[0]


def _host() -> dict[str, Any]:
    host = copy.deepcopy(TWO_H100_HOST)
    first = {**host["gpus"][0], "reasons": _Readings([IDLE | HW_SLOWDOWN, IDLE])}
    return {**host, "gpus": [first, *host["gpus"][1:]]}


def pytest_validate_nvml_module(config: pytest.Config) -> Any:
    """This host stands in for this host's NVML."""
    return SyntheticNvml(_host())
