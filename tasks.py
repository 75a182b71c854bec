"""gpuenv's Invoke tasks: one flat namespace composed from gpuenv/cli/* (logic lives in gpuenv/)."""

from invoke import Collection, Task

from gpuenv.cli import compat, envs, images, validation
from gpuenv.cli.program import adopt_running_invoke

adopt_running_invoke()  # a command line invoke cannot parse is bad input: exit 2, like the rest

ns = Collection()
for module in (compat, envs, images, validation):
    for task in vars(module).values():
        if isinstance(task, Task):
            ns.add_task(task)
