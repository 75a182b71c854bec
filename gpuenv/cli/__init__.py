"""Invoke tasks, one module per area; `namespace()` composes them for tasks.py and the `gpuenv`
command.

Tasks stay thin: parse, call, print.
"""

from __future__ import annotations

from invoke import Collection, Task


def namespace() -> Collection:
    """Every task in one flat namespace, with the `gpuenv:` defaults registered in Invoke's config
    (so INVOKE_GPUENV_* variables are read: Invoke reads a variable only for a key it knows)."""
    import copy

    from gpuenv.cli import compat, envs, images, validation
    from gpuenv.cli.defaults import DEFAULTS, SECTION

    ns = Collection()
    for module in (compat, envs, images, validation):
        for task in vars(module).values():
            if isinstance(task, Task):
                ns.add_task(task)
    ns.configure({SECTION: copy.deepcopy(DEFAULTS)})
    return ns
