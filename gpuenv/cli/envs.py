"""Tasks that pin and install environments: lock (conda-lock or uv), export (an environment.yml
to share) and install (the lock into a folder on a host without Docker)."""

from __future__ import annotations

from pathlib import Path

from gpuenv.cli.output import reporter, show
from gpuenv.cli.settings import (
    remember_stack,
    resolve,
    resolve_for_task,
    stack_request,
    team_settings,
)
from gpuenv.cli.task import OUTPUT_HELP, STACK_HELP, is_dry, stack_options, task, user_errors

_LOCK_HELP = {
    **STACK_HELP,
    "platform": "conda platform to lock for: linux-64 or linux-aarch64 (default: invoke.yaml "
    "gpuenv.platforms, else the stack's: this host's, aarch64 on Grace); one also resolves the "
    "stack for it; repeat for several (an aarch64 stack locks for aarch64 alone)",
    "backend": "conda-lock (default: invoke.yaml gpuenv.backend, else conda-lock; a "
    "conda-lock.yml solved by py-rattler, needs a conda channel or its mirror, "
    "gpuenv.conda_mirrors) or uv (pip-only, with hashes; the default when a wheelhouse folder "
    "is given)",
    "wheelhouse": "folder of .whl files searched before the indexes (both backends; the same "
    "option `invoke build` takes), for air-gapped servers; only the framework releases, builds "
    "and Pythons it holds are considered, and when it holds the framework build, the "
    "framework's wheel index is not contacted (default: invoke.yaml gpuenv.wheelhouse)",
    "file": "lock this environment.yml (e.g. one received from a colleague) instead of the "
    "rendered spec; the team file is not merged into it",
    "force": "relock even when the inputs are unchanged since the last lock; and replace a lock "
    "made from another source (the team's spec, or another --file), which is refused otherwise",
    "team_file": "the team's extra packages (default: envs/team.yml)",
    **OUTPUT_HELP,
}


def _lock_plan_text(stack, request, wheelhouse, team_file, file) -> str:
    """What `invoke --dry lock` prints: the resolved stack, the lock it would make or reuse, the
    spec."""
    from gpuenv.envs import locking
    from gpuenv.stack import lock_platforms

    plan = locking.plan_lock(
        stack,
        backend=request.backend or ("uv" if wheelhouse else "conda-lock"),
        platforms=lock_platforms(stack, request.platforms),
        wheelhouse=Path(wheelhouse) if wheelhouse else None,
        team_file=Path(team_file) if team_file else None,
        env_file=Path(file) if file else None,
    )
    directory = locking.lock_directory(stack)
    meta = locking.read_metadata(directory) if directory.is_dir() else None
    current = bool(meta and meta.input_hash == plan.input_hash() and meta.backend == plan.backend)
    lines = [
        f"stack: {stack.stack_id} (base {stack.base_image}, {stack.pip_requirement})",
        f"backend: {plan.backend}; platforms: {', '.join(plan.platforms)}; inputs "
        f"{plan.input_hash()[:12]}",
        f"lock directory: {directory} "
        f"({'up to date: nothing would be done' if current else 'would be (re)locked'})",
        "spec:",
        *(f"  {line}" for line in plan.spec_text.rstrip().splitlines()),
    ]
    return "\n".join(lines)


def _source(env_file: str | None) -> str:
    return (
        f"{env_file} (invoke lock --file)"
        if env_file
        else "the team's spec (the stack and envs/team.yml)"
    )


def _refuse_replacing(lock_dir: Path, file: str | None, force: bool) -> None:
    """A lock made from another source (the team's spec, or another --file) is the team's current
    lock of that stack: replacing it silently would change every build. --force replaces it."""
    from gpuenv.envs import lockdir
    from gpuenv.errors import BadInput, DataError

    if force or not lockdir.has_lock(lock_dir):
        return
    try:
        meta = lockdir.read_metadata(lock_dir)
    except DataError:
        return  # a damaged or older lock: ensure_lock says so, or relocks it
    if meta is None:
        return
    old = str(Path(meta.env_file).resolve()) if meta.env_file else None
    new = str(Path(file).resolve()) if file else None
    if old != new:
        raise BadInput(
            f"{lock_dir} holds the lock of {_source(meta.env_file)}; locking {_source(file)} "
            "would replace it",
            fix="pass --force to replace it (it becomes the stack's current lock), or keep the "
            "current one",
        )


@task(help=_LOCK_HELP, iterable=["platform"])
@user_errors
def lock(
    c,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    driver=None,
    gpu_arch=None,
    platform=None,
    backend=None,
    wheelhouse=None,
    file=None,
    force=False,
    team_file=None,
    strict_driver=False,
    verbose=False,
    quiet=False,
):
    """Pin every package of the stack's environment into envs/locks/<stack>/.

    Skipped when nothing changed.
    """
    from gpuenv.cli.config import mirror_map
    from gpuenv.cli.paths import check_paths
    from gpuenv.envs.locking import ensure_lock, lock_directory, lock_file_name
    from gpuenv.stack import lock_platforms

    check_paths(wheelhouse=wheelhouse, file=file, team_file=team_file)
    settings = team_settings(c)
    request = stack_request(
        settings, **stack_options(locals()), backend=backend, platforms=list(platform or [])
    )
    wheelhouse = request.wheelhouse
    report = reporter(verbose, quiet)
    stack = resolve(request)
    if is_dry(c):
        show(_lock_plan_text(stack, request, wheelhouse, team_file, file))
        return
    _refuse_replacing(lock_directory(stack), file, force)
    chosen_backend = request.backend or ("uv" if wheelhouse else "conda-lock")
    with report:
        report.say(f"stack: {stack.stack_id}")
        if request.backend is None and wheelhouse:
            report.say("backend: uv (--wheelhouse given and no --backend)")
        result = ensure_lock(
            stack,
            backend=chosen_backend,
            platforms=lock_platforms(stack, request.platforms),
            wheelhouse=Path(wheelhouse) if wheelhouse else None,
            team_file=Path(team_file) if team_file else None,
            env_file=Path(file) if file else None,
            force=force,
            progress=report.phase,
            conda_channels=settings.conda_channels,
            mirrors=mirror_map(settings.conda_mirrors),
        )
        remember_stack(
            stack,
            request,
            "lock",
            lock_directory(stack) / lock_file_name(result.backend),
            report.say,
        )
    state = "unchanged" if result.skipped else "locked"
    report.result(
        f"{state}: {result.files} (backend {result.backend}, inputs {result.input_hash[:12]})\n"
        f"current lock of {stack.stack_id}: "
        f"{lock_directory(stack) / lock_file_name(result.backend)}, from {_source(file)}"
    )


@task(
    help={
        **STACK_HELP,
        "output": "where to write the file (default: environment.yml; with --lock the lock's "
        "own name, requirements.lock.txt or conda-lock.yml, in the current folder)",
        "team_file": "the team's extra packages (default: envs/team.yml)",
        "unpinned": "write the environment.yml even when the stack has no lock: version ranges, "
        "not pins (refused otherwise)",
        "lock": "hand over the hashed form instead: the stack's lock file itself "
        "(conda-lock.yml or requirements.lock.txt, every package with its hash), for "
        "conda-lock, pixi, uv or pip --require-hashes",
    }
)
@user_errors
def export(
    c,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    driver=None,
    gpu_arch=None,
    output=None,
    team_file=None,
    strict_driver=False,
    wheelhouse=None,
    unpinned=False,
    lock=False,
):
    """Share the stack's environment: an environment.yml pinned from its lock, or the lock.

    Unpinned only when asked; with --lock, the hashed lock itself.
    """
    from gpuenv.cli.paths import check_paths
    from gpuenv.envs.export import (
        check_output,
        export_environment,
        export_lock,
        lock_file_for_sharing,
        pinned_from_lock,
    )
    from gpuenv.envs.locking import lock_directory
    from gpuenv.errors import BadInput

    if lock and unpinned:
        raise BadInput(
            "--lock and --unpinned contradict each other: a lock is all pins",
            fix="give one of them",
        )
    check_paths(output=output, team_file=team_file)
    if output:
        check_output(
            Path(output)
        )  # before the stack is resolved: a missing folder is named, never made
    _request, stack = resolve_for_task(team_settings(c), stack_options(locals()))
    if lock:
        source = lock_file_for_sharing(stack)
        target = Path(output or source.name)
        if is_dry(c):
            show(
                f"would copy {source} (hashed) to {target} for {stack.stack_id}; nothing written "
                "(--dry)"
            )
            return
        result = export_lock(stack, target)
        show(
            f"wrote {result.path} for {stack.stack_id}: the lock itself, every package with its "
            f"hash (from {result.lock})"
        )
        return
    target = Path(output or "environment.yml")
    if is_dry(c):
        found = pinned_from_lock(lock_directory(stack))
        how = (
            f"pinned from {found[2]}"
            if found
            else (
                "not pinned (--unpinned)"
                if unpinned
                else "refused: no lock yet (--unpinned to allow)"
            )
        )
        show(f"would write {target} for {stack.stack_id}, {how}; nothing written (--dry)")
        return
    result = export_environment(
        stack, target, team_file=Path(team_file) if team_file else None, unpinned=unpinned
    )
    how = f"pinned from {result.lock}" if result.lock else "NOT pinned: version ranges (--unpinned)"
    show(f"wrote {result.path} for {stack.stack_id}, {how}")
    if result.lock:
        show(
            "the hashed form (every package with its hash): invoke export --lock, or share "
            f"{result.lock}"
        )


def _no_index_when_complete(plan, offline: bool):
    """The install plan asking no index when its wheelhouse holds every locked wheel; with
    --offline, every missing wheel named in one line before anything is installed."""
    import dataclasses
    import platform

    from gpuenv.envs import wheelhouse

    if plan.wheelhouse is None or plan.lock.backend != "uv":
        return plan
    cover = wheelhouse.lock_coverage(
        plan.lock.path, plan.wheelhouse, python=plan.stack.python, arch=platform.machine()
    )
    if offline:
        wheelhouse.require_complete(cover)
    return dataclasses.replace(plan, offline=True) if cover.complete else plan


def _refuse_other_platform(stack, meta) -> None:
    """`install` runs on this host: a stack, or a lock, of another CPU architecture is refused in
    one line before anything is installed (its wheels would not run here)."""
    from gpuenv.compat.host import live_platform
    from gpuenv.errors import BadInput

    here, why = live_platform()
    if stack.platform != here:
        raise BadInput(
            f"{stack.stack_id} is a {stack.platform} stack, but this host is {here} ({why})",
            fix=f"install it on a {stack.platform} host, or drop --platform to install this "
            "host's stack",
        )
    if meta is not None and meta.platforms and here not in meta.platforms:
        locked = ", ".join(meta.platforms)
        raise BadInput(
            f"the lock of {stack.stack_id} is for {locked}, not for this host ({here})",
            fix=f"relock for it: invoke lock --platform {here} --force",
        )


@task(
    help={
        **STACK_HELP,
        "platform": "the CPU architecture of the stack (linux-64, linux-aarch64): this host's",
        "prefix": "the folder to install into, e.g. /shared/envs/torch (built beside it, then "
        "renamed into place)",
        "wheelhouse": "folder of .whl files the lock's wheels are looked for in; when it holds "
        "every wheel of the lock no index is asked (default: invoke.yaml gpuenv.wheelhouse, "
        "else the one the lock was made with, if it still exists)",
        "force": "reinstall even when the prefix already holds this lock",
        "offline": "ask no index: every wheel of the (uv) lock must be in --wheelhouse; the "
        "missing ones are named before anything is installed (air-gapped servers)",
        **OUTPUT_HELP,
    }
)
@user_errors
def install(
    c,
    prefix=None,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    driver=None,
    gpu_arch=None,
    wheelhouse=None,
    force=False,
    offline=False,
    strict_driver=False,
    verbose=False,
    quiet=False,
    platform=None,
):
    """Install the stack's lock into a folder on this host, without Docker (servers, clusters).

    Then `PREFIX/bin/python -m validate` checks it.
    """
    import signal

    from invoke.exceptions import Exit

    from gpuenv.cli.config import mirror_map
    from gpuenv.cli.paths import check_paths
    from gpuenv.compat.host import HostSource
    from gpuenv.envs import install as installer
    from gpuenv.envs.locking import lock_directory, read_metadata

    host = HostSource.checked(platform=platform)  # --platform: checked before anything slow
    installer.check_prefix(prefix)  # before anything slow: a bad prefix is one line at once
    check_paths(wheelhouse=wheelhouse)
    report = reporter(verbose, quiet)
    # --platform resolves the stack, never takes the remembered one
    chosen = {**stack_options(locals()), "platform": platform}
    settings = team_settings(c)
    request, stack = resolve_for_task(settings, chosen, host=host)
    lock_dir = lock_directory(stack)
    _refuse_other_platform(stack, read_metadata(lock_dir) if lock_dir.is_dir() else None)
    wheels = Path(request.wheelhouse) if request.wheelhouse else None
    if wheels is None and not offline:
        meta = read_metadata(lock_dir) if lock_dir.is_dir() else None
        recorded = meta.wheelhouse if meta else None
        if recorded and Path(recorded).is_dir():
            wheels = Path(recorded)
    plan = installer.plan_install(
        stack,
        lock_dir,
        prefix,
        wheelhouse=wheels,
        offline=offline,
        mirrors=mirror_map(settings.conda_mirrors),
    )
    plan = _no_index_when_complete(plan, offline)
    where = f"{plan.prefix}" + (f" (a link to {plan.folder})" if plan.folder != plan.prefix else "")
    if is_dry(c):
        state = (
            "holds this lock: nothing would be done"
            if installer.is_current(plan) and not force
            else "would be (re)installed"
        )
        show(
            f"stack: {stack.stack_id}\nlock: {plan.lock.path} ({plan.lock.backend}, sha256 "
            f"{plan.lock.sha256[:12]})\n"
            f"prefix: {where} ({state})\nwheelhouse: {plan.wheelhouse or 'none'}"
            f"{' (holds every locked wheel: no index is asked)' if plan.offline else ''}"
        )
        return
    with report:
        report.say(
            f"stack: {stack.stack_id}; lock {plan.lock.path.name} ({plan.lock.backend}, sha256 "
            f"{plan.lock.sha256[:12]})"
        )
        result = installer.install(plan, say=report.phase, output=report.output, force=force)
    if result.skipped:
        report.result(f"unchanged: {where} holds lock {result.lock_sha256[:12]}")
    elif result.interrupted:
        # The interrupt came during the swap, which was let finish: say so, and exit as interrupted.
        signum = result.interrupted[0]
        raise Exit(
            f"gpuenv: {signal.Signals(signum).name} arrived while the new prefix was moved into "
            f"place; the move was finished first: {where} holds lock {result.lock_sha256[:12]}, "
            "the old one (if any) was removed and nothing was left beside it",
            code=128 + signum,
        )
    else:
        report.result(
            f"installed {stack.stack_id} into {where}\ncheck this host with: "
            f"{result.prefix}/bin/python -m validate"
        )


#: At most this many problems are printed; --json holds them all.
_SHOWN_PROBLEMS = 40


@task(
    help={
        **STACK_HELP,
        "prefix": "check this folder (one `invoke install` made, or any conda or venv prefix) "
        "instead of an image",
        "image": "check this image's environment (/opt/gpuenv/env), read through the engine "
        "without running the image (default: the image of the current stack, or of the stack "
        "options given)",
        "json": "also write the verdict to this file (every problem, the counts, what the "
        "packages were compared with)",
        **OUTPUT_HELP,
    }
)
@user_errors
def verify(
    c,
    prefix=None,
    image=None,
    json=None,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    driver=None,
    gpu_arch=None,
    strict_driver=False,
    wheelhouse=None,
    verbose=False,
    quiet=False,
):
    """Prove an environment holds exactly its lock's bytes: every file against its package's record
    (conda-meta, RECORD), every package against the lock; exits 1 naming each altered, missing or
    unowned file."""
    import json as jsonlib

    from invoke.exceptions import Exit

    from gpuenv.cli.paths import check_paths
    from gpuenv.errors import BadInput
    from validate.writing import WriteFailed, write_text_atomic

    if prefix and image:
        raise BadInput("--prefix and --image name two environments", fix="give one of them")
    check_paths(prefix=prefix, json=json)
    report = reporter(verbose, quiet)
    if prefix:
        given = [f"--{k.replace('_', '-')}" for k, v in stack_options(locals()).items() if v]
        if given:
            raise BadInput(
                f"--prefix names the environment, so {', '.join(given)} cannot choose one",
                fix="drop them or --prefix",
            )
        from gpuenv.envs.verify import verify_prefix

        with report:
            verdict = verify_prefix(prefix, say=report.phase)
    else:
        from gpuenv.engine import Engine
        from gpuenv.images.verify import verify_image

        if image:
            given = [f"--{k.replace('_', '-')}" for k, v in stack_options(locals()).items() if v]
            if given:
                raise BadInput(
                    f"--image names the image, so {', '.join(given)} cannot choose one",
                    fix="drop them or --image",
                )
            ref = image
            engine = Engine.local()
        else:
            from gpuenv.images import plan as images

            _request, stack = resolve_for_task(team_settings(c), stack_options(locals()))
            engine = Engine.local()
            ref = images.image_for_stack(engine, stack)
        with report:
            verdict = verify_image(engine, ref, say=report.phase)
    if json:
        try:
            write_text_atomic(json, jsonlib.dumps(verdict.to_dict(), indent=2) + "\n")
        except (WriteFailed, OSError) as err:
            raise BadInput(
                f"--json {json}: cannot write it ({err})", fix="give a writable path"
            ) from None
    for problem in verdict.problems[:_SHOWN_PROBLEMS]:
        show(problem.line())
    if len(verdict.problems) > _SHOWN_PROBLEMS:
        show(
            f"... and {len(verdict.problems) - _SHOWN_PROBLEMS} more"
            + (f" (all in {json})" if json else " (--json FILE lists all)")
        )
    counts = (
        f"{len(verdict.packages)} package records, {verdict.files_checked} files checked "
        f"({verdict.files_hashed} hashed), {verdict.caches} cache files and "
        f"{len(verdict.scaffolding)} installer files skipped"
    )
    compared = (
        f"packages compared with {verdict.compared}"
        if verdict.compared and "not compared" not in verdict.compared
        else (verdict.compared or "packages not compared with a lock")
    )
    if verdict.problems:
        raise Exit(
            f"NOT INTACT: {verdict.root}: {len(verdict.problems)} problems; {counts}; {compared}",
            code=1,
        )
    layer = f"; {verdict.layer}" if verdict.layer else ""
    report.result(f"intact: {verdict.root}: {counts}; {compared}{layer}")
