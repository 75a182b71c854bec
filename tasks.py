"""gpuenv's Invoke tasks: one flat namespace composed from gpuenv/cli/* (logic lives in gpuenv/)."""

from invoke import Collection, Task

from gpuenv.cli import compat, envs, images, validation

ns = Collection()
for module in (compat, envs, images, validation):
    for task in vars(module).values():
        if isinstance(task, Task):
            ns.add_task(task)
