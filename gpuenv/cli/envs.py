"""Tasks that pin environments: lock (conda-lock or uv) and export (an environment.yml to share)."""

from __future__ import annotations

from pathlib import Path

from invoke import task

from gpuenv.cli.common import STACK_HELP, STRICT_DRIVER_HELP, user_errors

_LOCK_HELP = {
    **STACK_HELP,
    "platform": "conda platform to lock for: linux-64 (default) or linux-aarch64; repeat for several (GPU stacks with conda-lock: linux-64 only)",
    "backend": "conda-lock (default: conda-forge Python + pip packages, needs a conda channel) or uv (pip-only, with hashes; "
    "the default when a wheelhouse folder is given)",
    "wheelhouse": "folder of .whl files searched before the indexes (uv backend; the same option `invoke build` takes), "
    "for air-gapped servers; only the framework releases, builds and Pythons it holds are considered, and when it holds "
    "the framework build, the framework's wheel index is not contacted",
    "strict_driver": STRICT_DRIVER_HELP,
    "file": "lock this environment.yml (e.g. one received from a colleague) instead of the rendered spec; "
    "the team file is not merged into it",
    "force": "relock even when the inputs are unchanged since the last lock",
    "team_file": "the team's extra packages (default: envs/team.yml)",
}



@task(help=_LOCK_HELP, iterable=["platform"])
@user_errors
def lock(
    c, cuda=None, framework=None, torch=None, tensorflow=None, python=None, driver=None, gpu_arch=None,
    platform=None, backend=None, wheelhouse=None, file=None, force=False, team_file=None, strict_driver=False,
):
    """Pin every package of the stack's environment into envs/locks/<stack>/ (skipped when nothing changed)."""
    from gpuenv.locking import ensure_lock
    from gpuenv.host import resolve_for_host

    stack = resolve_for_host(
        driver=driver, cuda=cuda, framework=framework, torch=torch, tensorflow=tensorflow, python=python, gpu_arch=gpu_arch,
        strict_driver=strict_driver, wheelhouse=wheelhouse,
    )
    if backend is None:
        backend = "uv" if wheelhouse else "conda-lock"
        if wheelhouse:
            print("backend: uv (--wheelhouse given: conda-lock cannot lock from a wheel folder)")
    print(f"stack: {stack.stack_id}")
    result = ensure_lock(
        stack,
        backend=backend,
        platforms=list(platform or []),
        wheelhouse=Path(wheelhouse) if wheelhouse else None,
        team_file=Path(team_file) if team_file else None,
        env_file=Path(file) if file else None,
        force=force,
        progress=lambda line: print(f"  {line}", flush=True),
    )
    state = "unchanged" if result.skipped else "locked"
    print(f"{state}: {result.files} (backend {result.backend}, inputs {result.input_hash[:12]})")


@task(
    help={
        **STACK_HELP,
        "output": "where to write the environment.yml (default: environment.yml in the current folder)",
        "team_file": "the team's extra packages (default: envs/team.yml)",
        "strict_driver": STRICT_DRIVER_HELP,
    }
)
@user_errors
def export(c, cuda=None, framework=None, torch=None, tensorflow=None, python=None, driver=None, gpu_arch=None, output="environment.yml", team_file=None, strict_driver=False):
    """Write an environment.yml for conda/mamba: pinned from the stack's lock when there is one."""
    from gpuenv.export import export_environment
    from gpuenv.host import resolve_for_host

    stack = resolve_for_host(driver=driver, cuda=cuda, framework=framework, torch=torch, tensorflow=tensorflow, python=python, gpu_arch=gpu_arch, strict_driver=strict_driver)
    result = export_environment(stack, Path(output), team_file=Path(team_file) if team_file else None)
    how = f"pinned from {result.lock}" if result.lock else "not pinned (no lock yet: run `invoke lock` first)"
    print(f"wrote {result.path} for {stack.stack_id}, {how}")
