"""The `gpuenv:` section's name and defaults, which every command registers with Invoke.

Apart from config.py's checks and dataclasses so that a command's start (`invoke --list`, tasks.py
composing the namespace, configfiles.py reading invoke.yaml) imports only these few names.
"""

from __future__ import annotations

from typing import Any

SECTION = "gpuenv"
ENV_PREFIX = "INVOKE_"

#: The `gpuenv:` defaults registered with Invoke. Every key must exist here: Invoke reads an
#: INVOKE_GPUENV_* variable only for keys it already knows. None means "gpuenv decides" (the
#: resolver picks CUDA and Python for the host; conda-lock and linux-64 otherwise).
DEFAULTS: dict[str, Any] = {
    "framework": None,
    "torch": None,
    "tensorflow": None,
    "cuda": None,
    "python": None,
    "backend": None,
    "platforms": None,
    "base_image": None,
    "wheelhouse": None,
    "strict_driver": None,
    "registry": None,
    "conda_channels": None,
    "conda_mirrors": None,
    "expect_gpus": None,
    "fleet": {
        "hosts": None,
        "parallel": None,
        "outlier_floor": None,
        "env": None,
        "slurm": {
            "partition": None,
            "time": None,
            "queue_time": None,
            "nodes": None,
            "nodelist": None,
            "prefix": None,
            "rundir": None,
            "sbatch_args": None,
        },
    },
}
