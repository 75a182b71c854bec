"""gpuenv's Invoke tasks: one flat namespace composed by gpuenv.cli from its modules (compat,
envs, images, validation); logic lives in gpuenv/.

The same tasks run from any folder as the `gpuenv` command (gpuenv/cli/program.py).
"""

import gc
import sys

# What Python and Invoke made so far (modules, classes, functions) lives as long as the command:
# the collector need not walk it again in each full collection that loading gpuenv's modules and
# data sets off (about 0.01 s of CPU per command)
gc.freeze()

# Invoke turns off writing .pyc files (unless --write-pyc) before it loads this file, so that no
# tasks.pyc is left in a project; gpuenv's own modules would then be compiled again at every
# command (about 0.05 s of CPU). They are cached as Python caches any package's, unless -B or
# PYTHONDONTWRITEBYTECODE says not to.
sys.dont_write_bytecode = sys.dont_write_bytecode and bool(sys.flags.dont_write_bytecode)

from pathlib import Path  # noqa: E402 (after the bytecode setting, which the imports read)

from gpuenv.cli import namespace  # noqa: E402
from gpuenv.cli.program import adopt_running_invoke, check_project_config  # noqa: E402

check_project_config(Path(__file__).resolve().parent)  # a broken invoke.yaml: one line, exit 2
adopt_running_invoke()  # a command line invoke cannot parse is bad input: exit 2, like the rest

ns = namespace()
