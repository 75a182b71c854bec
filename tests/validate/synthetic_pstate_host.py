"""pytest plugin for a suite run in a subprocess: the SYNTHETIC two-GPU host of
synthetic_gpu_host.py, whose GPU 0 answers one bare hw_slowdown (a P-state change, nvml.h) at its
first clock-event reading and only gpu_idle after: the suite's own re-reading is what clears it.
"""

from __future__ import annotations

from typing import Any

from nvml_synthetic import TWO_H100_HOST as HOST
from nvml_synthetic import SyntheticNvml

from validate.host import nvml

#: nvmlClocksEventReasonGpuIdle and nvmlClocksEventReasonHwSlowdown (nvml.h).
IDLE, HW_SLOWDOWN = 0x1, 0x8


class _Readings(list):
    """Clock-event masks answered in turn; the last one holds from then on."""

    def pop(self, index: int = -1) -> Any:
        return super().pop(index) if len(self) > 1 else self[0]


def _host() -> dict[str, Any]:
    first = {**HOST["gpus"][0], "reasons": _Readings([IDLE | HW_SLOWDOWN, IDLE])}
    return {**HOST, "gpus": [first, *HOST["gpus"][1:]]}


_use_module = nvml.use_module


def _synthetic_unless_given(nv: Any) -> None:
    """The suite sets NVML's module at start (None: the real one): this host stands in for it."""
    _use_module(SyntheticNvml(_host()) if nv is None else nv)


nvml.use_module = _synthetic_unless_given
