"""pytest plugin for a suite run in a subprocess: a SYNTHETIC two-GPU host instead of this machine.

`python -m validate -p synthetic_gpu_host ...` with tests/validate on PYTHONPATH: every NVML
reader of the suite then answers from nvml_synthetic.SyntheticNvml (hand-typed host, invented
UUIDs; not a recording), so the suite's end of run (exit status, last line, JSON) can be checked on
a GPU host where no GPU can compute: this machine has no GPU and its PyTorch is a CPU build.
"""

from __future__ import annotations

from typing import Any

from nvml_synthetic import SyntheticNvml

from validate.host import nvml

GIB = 2**30
_GPU = {
    "name": "NVIDIA H100 80GB HBM3",
    "bus": "00000000:18:00.0",
    "cc": (9, 0),
    "memory": (80 * GIB, 512 * 2**20),
    "ecc_uncorrected": 0,
    "pcie": (5, 5, 5, 16, 16),
    "power_mw": (700000, 700000),
    "reasons": 0x1,
    "compute_mode": 0,
    "mig": False,
    "nvlink": 18,
    "clocks": (1980, 1980),
    "power_usage_mw": 690000,
    "temperature": 61,
}
HOST = {
    "driver": "550.54.15",
    "cuda": 12040,
    "gpus": [
        {**_GPU, "uuid": "GPU-5e000000-0000-4000-8000-000000000000"},
        {**_GPU, "uuid": "GPU-5e000001-0000-4000-8000-000000000001", "bus": "00000000:2A:00.0"},
    ],
}
_use_module = nvml.use_module


def _synthetic_unless_given(nv: Any) -> None:
    """The suite sets NVML's module at start (None: the real one): the synthetic host stands in for
    that."""
    _use_module(SyntheticNvml(HOST) if nv is None else nv)


nvml.use_module = _synthetic_unless_given
