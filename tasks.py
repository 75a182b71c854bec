"""gpuenv's Invoke tasks: one flat namespace composed by gpuenv.cli from its modules (compat,
envs, images, validation); logic lives in gpuenv/.

The same tasks run from any folder as the `gpuenv` command (gpuenv/cli/program.py).
"""

from pathlib import Path

from gpuenv.cli import namespace
from gpuenv.cli.program import adopt_running_invoke, check_project_config

check_project_config(Path(__file__).resolve().parent)  # a broken invoke.yaml: one line, exit 2
adopt_running_invoke()  # a command line invoke cannot parse is bad input: exit 2, like the rest

ns = namespace()
