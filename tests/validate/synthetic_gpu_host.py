"""pytest plugin for a suite run in a subprocess: a SYNTHETIC two-GPU host instead of this machine.

`python -m validate -p synthetic_gpu_host ...` with tests/validate on PYTHONPATH: every NVML
reader of the suite then answers from nvml_synthetic.SyntheticNvml (hand-typed host, invented
UUIDs; not a recording), so the suite's end of run (exit status, last line, JSON) can be checked on
a GPU host where no GPU can compute: this machine has no GPU and its PyTorch is a CPU build.
"""

from __future__ import annotations

import copy
from typing import Any

from nvml_synthetic import TWO_H100_HOST, SyntheticNvml

from validate.host import nvml

_use_module = nvml.use_module


def _synthetic_unless_given(nv: Any) -> None:
    """The suite sets NVML's module at start (None: the real one): the synthetic host stands in for
    that."""
    _use_module(SyntheticNvml(copy.deepcopy(TWO_H100_HOST)) if nv is None else nv)


nvml.use_module = _synthetic_unless_given
