"""pytest plugin for a suite run in a subprocess: a SYNTHETIC two-GPU host instead of this machine.

`python -m validate -p synthetic_gpu_host ...` with tests/validate on PYTHONPATH: the suite asks
its plugins for this host's NVML module (validate/hookspecs.py) and this one answers with
nvml_synthetic.SyntheticNvml (hand-typed host, invented UUIDs; not a recording), so every NVML
reader of the run answers from it and the suite's end of run (exit status, last line, JSON) can be
checked on a GPU host where no GPU can compute: this machine has no GPU and its PyTorch is a CPU
build. A --replay run still reads its capture.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from nvml_synthetic import TWO_H100_HOST, SyntheticNvml


def pytest_validate_nvml_module(config: pytest.Config) -> Any:
    """The synthetic host stands in for this host's NVML."""
    return SyntheticNvml(copy.deepcopy(TWO_H100_HOST))
