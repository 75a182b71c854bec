"""gpuenv's Invoke tasks: one flat namespace composed from gpuenv/cli/* (logic lives in gpuenv/)."""

from invoke import Collection, Task

from gpuenv.cli import compat

ns = Collection()
for module in (compat,):
    for task in vars(module).values():
        if isinstance(task, Task):
            ns.add_task(task)
