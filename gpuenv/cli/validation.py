"""The `validate` task: the validation suite on this server (inside a stack's image, or with this
Python: --local, --replay) or on a fleet (--hosts, --slurm, --from-reports: gpuenv/cli/fleet.py).

The suite itself is `validate/` (`python -m validate`); which run the flags ask for, and the
refusal of a mix, is gpuenv/fleet/modes.py. For this server the task builds the suite's command
line and, for the in-image path, resolves the stack, finds its image and runs the suite there; a
--replay with this Python is judged in this process (gpuenv/cli/replay.py), a live run in a new one.
"""

from __future__ import annotations

import json as jsonlib  # `json` is the task's --json option
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

from invoke.exceptions import Exit

from gpuenv.cli.output import show
from gpuenv.cli.settings import image_or_stack, team_settings
from gpuenv.cli.task import (
    OUTPUT_HELP,
    STACK_HELP,
    STACK_OPTIONS,
    is_dry,
    stack_options,
    task,
    user_errors,
)
from gpuenv.errors import BadInput
from validate.options import SUITE_OPTIONS, command_line

#: The suite baked into every image (docker/Dockerfile: COPY validate/ /opt/gpuenv/validate/). Run
#: by file path: `python -m validate` in /workspace would import a mounted checkout's validate/.
SUITE_IN_IMAGE = "/opt/gpuenv/validate/__main__.py"

#: What the suite options (validate/options.py, declared there once) mean beyond the suite in this
#: task.
_TASK_NOTES = {
    "expect_gpus": "default: invoke.yaml gpuenv.expect_gpus; else on a bare host at least 1, "
    "except a host with no NVIDIA driver and no NVIDIA device, which is validated as CPU-only",
    "json": "with --hosts/--slurm the fleet's, keyed by host then GPU UUID",
    "junit": "with --hosts/--slurm one testsuite per host",
    "replay": "runs with this Python (as --local) unless --image or a stack option names an "
    "image to judge it in",
    "verbose": "with --hosts/--slurm the fleet table lists ready hosts too; in an image also "
    "the full log of its pull",
}

_HELP = {
    "local": "run the suite on this host with this Python (`python -m validate`) instead of "
    "inside an image",
    **STACK_HELP,
    "cuda": STACK_HELP["cuda"]
    + "; picks the image to validate in (default without --local: the stack resolved for this "
    "host)",
    "image": "validate in this image instead of the stack's, e.g. "
    "HOST/gpuenv/<stack>@sha256:... as invoke push printed it; pulled (by digest) when missing",
    "gpus": "GPUs given to the container, as `docker run --gpus`: all, none, or 0,1 / GPU UUIDs "
    "(default: all; none for a CPU stack); with --hosts, a host's own after its URL: "
    "'URL=0,1;URL=2,3'",
    **{
        option.name: option.help
        + (f"; {_TASK_NOTES[option.name]}" if option.name in _TASK_NOTES else "")
        for option in SUITE_OPTIONS
    },
    # fleet validation (gpuenv/fleet/modes.py, gpuenv/cli/fleet.py); defaults from gpuenv.fleet
    "hosts": "validate these Docker hosts over SSH, comma-separated ssh://user@host[:port]; "
    "--hosts alone: the hosts in invoke.yaml (gpuenv.fleet.hosts)",
    "parallel": "with --hosts: validate at most N hosts at once (default: 8)",
    "report": "with --hosts/--slurm: write the fleet report as one self-contained HTML page "
    "(e.g. fleet.html)",
    "slurm": "validate the nodes of a Slurm job (one task per node) instead of this host",
    "partition": "with --slurm: the partition to submit to (default: "
    "gpuenv.fleet.slurm.partition, else Slurm's default)",
    "nodes": "with --slurm: validate this many nodes (default: 1)",
    "nodelist": "with --slurm: validate exactly these nodes, e.g. gpu[01-04] (instead of --nodes)",
    "time": "time limit, at most 7-0: with --slurm the job's, with --hosts each host's whole "
    "visit (connect, pull, suite); e.g. 30 (minutes), 0:30 (M:S) or 1:00:00",
    "queue_time": "with --slurm: cancel the job if it waits in the queue longer than this "
    "(default 1:00:00, at most 7-0); a job that can never start is cancelled at once",
    "prefix": "with --slurm: on nodes without Docker, run the suite from this prefix on a "
    "shared path (made by invoke install --prefix)",
    "rundir": "with --slurm: shared folder for the job's scripts and per-node reports (default: "
    "./gpuenv-fleet/slurm-TIME)",
    "from_reports": "render the fleet report (table, --report/--json/--junit) from a folder of "
    "per-host `python -m validate --json` reports named HOST.json, collected by any means "
    "(Slurm, pdsh, Ansible, cron)",
    "sbatch_arg": "with --slurm: one more sbatch option for the jobs, repeatable (e.g. "
    "--sbatch-arg=--account=ml --sbatch-arg=--gres=gpu:h100:8); default: "
    "gpuenv.fleet.slurm.sbatch_args",
    "outlier_floor": "fleet: a GPU below this share of its model's fleet median makes its host "
    "degraded, not ready (default: gpuenv.fleet.outlier_floor, else 0.9)",
    "quiet": OUTPUT_HELP["quiet"],
}


def suite_arguments(path_for: Callable[[str], str] = lambda p: p, **values: object) -> list[str]:
    """`python -m validate` options for the suite option values given by name (validate/options.py);
    `path_for` maps host paths to the paths the suite will see."""
    expect_gpus = values.get("expect_gpus")
    if expect_gpus is not None:
        try:
            count = int(expect_gpus)  # type: ignore[call-overload]
        except ValueError:
            raise BadInput(
                f"--expect-gpus {expect_gpus!r} is not a number",
                fix="give the number of GPUs, e.g. --expect-gpus 8",
            ) from None
        if count < 0:
            raise BadInput(f"--expect-gpus {count} is negative", fix="give 0 or more")
        values["expect_gpus"] = count
    return command_line(values, path_for)


#: Where a report folder outside the current folder is mounted in the container (one per folder).
REPORTS_IN_CONTAINER = "/gpuenv-reports"


class ReportPaths:
    """The report files of an in-image run, as the container sees them: under the current folder
    they are under /workspace; elsewhere their folder is mounted for them. `shown` maps each
    container path back to the path the user gave, so what the suite prints is theirs."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir.resolve()
        self.mounts: dict[Path, str] = {}
        self.shown: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        from gpuenv.engine.containers import (
            WORKDIR_IN_CONTAINER,
        )  # here: the engine package costs every command's start

        resolved = Path(path).expanduser().resolve()
        try:
            inside = f"{WORKDIR_IN_CONTAINER}/{resolved.relative_to(self.workdir).as_posix()}"
        except ValueError:
            folder = resolved.parent
            if (
                not folder.is_dir()
            ):  # never made for the user (the engine would make it, owned by root)
                raise BadInput(
                    f"{path}: the folder {folder} does not exist",
                    fix="create it first, or give a path in an existing folder",
                ) from None
            mounted = self.mounts.setdefault(folder, f"{REPORTS_IN_CONTAINER}/{len(self.mounts)}")
            inside = f"{mounted}/{resolved.name}"
        self.shown[inside] = path
        return inside


def run_local(args: list[str]) -> int:
    """Run the suite on this host with this interpreter; its output goes straight to the
    terminal."""
    return subprocess.run([sys.executable, "-m", "validate", *args], check=False).returncode


@task(help=_HELP, optional=["hosts"], iterable=["sbatch_arg"])
@user_errors
def validate(
    c,
    local=False,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    driver=None,
    gpu_arch=None,
    strict_driver=False,
    wheelhouse=None,
    image=None,
    gpus=None,
    expect_gpus=None,
    json=None,
    junit=None,
    quick=False,
    save_baseline=None,
    baseline=None,
    hosts=None,
    parallel=None,
    report=None,
    slurm=False,
    partition=None,
    nodes=None,
    nodelist=None,
    time=None,
    prefix=None,
    rundir=None,
    verbose=False,
    quiet=False,
    queue_time=None,
    from_reports=None,
    outlier_floor=None,
    sbatch_arg=None,
    replay=None,
    record=None,
    health_only=False,
):
    """Tell whether this server is ready for the team's images, and why not (exit 0 when ready).

    This server: in the stack's image (default), in --image REF, or with this Python (--local;
    --replay FILE judges a capture instead). A fleet, with the same suite: --hosts (Docker hosts
    over SSH), --slurm (the nodes of a Slurm job) or --from-reports DIR (reports already collected).
    """
    given = {name: value for name, value in locals().items() if name != "c"}
    from gpuenv.cli.paths import check_paths
    from gpuenv.fleet.modes import check_mode, merge_options

    check_paths(
        json=json,
        junit=junit,
        save_baseline=save_baseline,
        baseline=baseline,
        report=report,
        rundir=rundir,
        prefix=prefix,
        replay=replay,
        record=record,
        folders=("rundir", "prefix", "record"),
    )
    settings = team_settings(c)
    # the team may say every server must have GPUs (or, with 0, that none need them)
    given["expect_gpus"] = settings.expect_gpus if expect_gpus is None else expect_gpus
    if image:  # the engine's grammar and length limit, before any host or engine is asked
        from gpuenv.images.share import parse_image_ref

        parse_image_ref(image)
    stack = stack_options(given)
    named = [f"--{k.replace('_', '-')}" for k in STACK_OPTIONS if stack[k] not in (None, False)]
    if check_mode(given, named):
        from gpuenv.cli.fleet import fleet_validate

        opts = merge_options(given, settings.fleet.as_config())
        code = fleet_validate(opts, suite_arguments(expect_gpus=given["expect_gpus"], quick=quick))
    else:
        code = validate_this_server(c, settings, given, named)
    if code != 0:
        raise Exit(code=code)


def validate_this_server(c, settings, given: dict, named: list[str]) -> int:
    """The suite on this server: with this Python (--local, and a --replay with no image named),
    else inside an image; the suite's exit code (0 under --dry)."""
    suite = {option.name: given[option.name] for option in SUITE_OPTIONS}
    image, gpus = given["image"], given["gpus"]
    # a capture is judged by this host's suite, as `python -m validate --replay` does
    local = given["local"] or bool(given["replay"] and image is None and not named and gpus is None)
    if not local:
        return validate_in_image(c, settings, given, suite)
    if named or gpus is not None or image is not None:
        wrong = named + ["--gpus"] * (gpus is not None) + ["--image"] * (image is not None)
        raise BadInput(
            "--local runs on this host's Python, so a stack option makes no sense with it",
            fix=f"drop {' '.join(wrong)}, or drop --local",
        )
    args = suite_arguments(**suite)
    if is_dry(c):
        text = f"would run {sys.executable} -m validate {' '.join(args)}; nothing run (--dry)"
        show(text.replace("  ", " "))
        return 0
    if given["replay"]:  # no second Python where it would run this same suite
        from gpuenv.cli.replay import judge_replay_here, judged_here

        if judged_here(Path.cwd(), os.environ):
            return judge_replay_here(args)
    return run_local(args)


def validate_in_image(c, settings, given: dict, suite: dict) -> int:
    """The suite inside the stack's image (or --image REF), the current folder at /workspace and
    the report files where the user asked for them."""
    from gpuenv.engine import parse_gpus

    image, gpus = given["image"], given["gpus"]
    workdir = Path.cwd()
    if gpus is not None:
        parse_gpus(gpus)  # before the stack is resolved or the engine asked
    reports = ReportPaths(workdir)
    args = suite_arguments(path_for=reports, **suite)
    chosen = image_or_stack(
        c, settings, image, stack_options(given), given["verbose"], given["quiet"]
    )
    if is_dry(c):
        pulled = " (pulled by digest if missing)" if image else ""
        show(f"would validate in {chosen.name}{pulled}; nothing run (--dry)")
        return 0
    gpus = gpus or ("none" if chosen.cpu else "all")
    show(f"validating in {chosen.name}, GPUs: {gpus}", flush=True)
    # here: the suite's report writer costs every command's start
    from validate.report.record import HOST_PATHS_VARIABLE

    shown = {"env": {HOST_PATHS_VARIABLE: jsonlib.dumps(reports.shown)}} if reports.shown else {}
    return chosen.engine.run_container(
        chosen.ref,
        ["python", SUITE_IN_IMAGE, *args],
        gpus=gpus,
        workdir_mount=workdir,
        mounts=reports.mounts,
        **shown,
    )
