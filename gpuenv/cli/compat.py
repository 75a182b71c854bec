"""Tasks that read the compatibility data and the team's settings: doctor, matrix, resolve."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gpuenv.cli.output import show
from gpuenv.cli.settings import resolve, stack_request, team_settings
from gpuenv.cli.task import STACK_HELP, stack_options, task, user_errors

if TYPE_CHECKING:  # compat loads the resolver: not at every command's start
    from gpuenv.compat.host import HostSource


def settings_report(c) -> tuple[object | None, dict]:
    """The team's Settings (read once, for the whole of `doctor`) and the report of the effective
    `gpuenv:` settings and where each came from; a bad file is reported, not raised (no
    Settings)."""
    from gpuenv.cli.config import effective_rows
    from gpuenv.errors import GpuenvError

    try:
        settings = team_settings(c)
        rows = effective_rows(settings)
    except GpuenvError as err:
        return None, {"available": False, "why": err.render()}
    values = [{"key": k, "value": v, "source": s} for k, v, s in rows]
    return settings, {"available": True, "values": values}


def team_stack_report(settings, host: HostSource | None = None) -> dict:
    """The stack every task addresses with no command-line stack options, and why: the team pinned
    it in invoke.yaml, `lock`/`build` remembered it for this project (envs/locks/current.json), or
    it floats (each host resolves its own); on `host` (doctor's --host and --platform; None: this
    machine)."""
    from gpuenv.cli.settings import current_stack_reason, resolve_for_task
    from gpuenv.envs.current import current_file
    from gpuenv.envs.locking import locks_root
    from gpuenv.errors import GpuenvError

    try:
        why, entry = current_stack_reason(settings, {})
        request, stack = (
            resolve_for_task(settings, {}, announce=False, host=host)
            if why == "remembered"
            else (stack_request(settings), None)
        )
        stack = stack or resolve(request, host)
    except GpuenvError as err:
        return {"available": False, "why": err.render()}
    report = {"available": True, "pinned": why == "pinned", "current": why, **stack.to_dict()}
    if entry:
        report["remembered_from"] = {
            "file": str(current_file(locks_root())),
            "made_by": entry.made_by,
            "lock_file": entry.lock_file,
        }
    return report


def format_team_stack(team: dict) -> str:
    if not team.get("available"):
        return f"current   no stack: {team['why']}"
    line = (
        f"current   {team['stack_id']}  base {team['base_image']}  ({team['pip_requirement']}): "
        "what tasks address with no stack options"
    )
    if team.get("current") == "pinned":
        return (
            line + "\n          pinned (invoke.yaml): every server addresses this stack; a driver "
            "that cannot run it is an error"
        )
    if team.get("current") == "remembered":
        source = team["remembered_from"]
        return (
            line + f"\n          remembered: the last `invoke {source['made_by']}` recorded it in "
            f"{source['file']} (commit it with the lock); invoke.yaml pins or stack options "
            "choose another"
        )
    return (
        line + "\n          the stack floats: each host resolves its own from its driver and the "
        "data; pin gpuenv.cuda, gpuenv.python and gpuenv.torch (or tensorflow) in invoke.yaml "
        "for one stack everywhere, or `invoke build` one to remember it"
    )


def format_settings(report: dict) -> str:
    from validate.report.tables import format_table

    if not report.get("available"):
        return f"settings  not available: {report['why']}"
    rows = [(row["key"], row["value"], row["source"]) for row in report["values"]]
    return "settings (invoke.yaml `gpuenv:`; the command line wins over these)\n" + format_table(
        ("key", "value", "from"), rows
    )


PLATFORM_HELP = (
    "the server's CPU architecture: linux-64 (x86_64) or linux-aarch64 (Grace: GH200, GB200, "
    "GB300, GB10); default: read from this host, or inferred from a capture's GPUs"
)
HOST_HELP = (
    "a capture of a server (nvidia-smi -q -x > server.xml, nvidia-smi -q, or a python -m "
    "validate --record file): its driver and GPUs are used instead of this machine's"
)


@task(
    help={
        "json": "print the report as JSON instead of a table",
        "host": HOST_HELP,
        "platform": PLATFORM_HELP,
    }
)
@user_errors
def doctor(c, json_=False, host=None, platform=None):
    """The host as seen from here: driver, GPUs, Docker, NVIDIA runtime, settings, stack.

    Each of the team's settings says where it came from, and the recommended stack follows
    (exit 2 when the settings are invalid).
    """
    from invoke.exceptions import Exit

    from gpuenv.cli.doctor import collect_report, format_report
    from gpuenv.compat.host import HostSource
    from gpuenv.engine import Engine

    # --platform and --host, checked before anything slow: the team's stack below is chosen for
    # that server too
    server = HostSource.checked(host, platform)
    report = collect_report(Engine.local, server)
    settings, report["settings"] = settings_report(c)
    report["team_stack"] = (
        team_stack_report(settings, server)
        if settings is not None
        else {"available": False, "why": "the settings cannot be used"}
    )
    if json_:
        show(json.dumps(report, indent=2))
    else:
        show(
            format_report(report)
            + "\n"
            + format_settings(report["settings"])
            + "\n"
            + format_team_stack(report["team_stack"])
        )
    if not report["settings"].get("available"):
        raise Exit(f"gpuenv: the settings are invalid: {report['settings']['why']}", code=2)


@task(
    help={
        "json": "print the whole validated data as JSON (for machines); with --check, the drift "
        "report as JSON",
        "check": "compare the data with PyPI (JSON API and wheel METADATA through range "
        "requests, never whole wheels; pip's index-url, proxy and cert are honoured): exit 1 "
        "when upstream has moved on, 0 when current",
    }
)
@user_errors
def matrix(c, json_=False, check=False):
    """Show the compatibility data (envs/compat.yaml): CUDA, images, PyTorch, TensorFlow, GPUs."""
    from gpuenv.compat.matrix import load_matrix
    from gpuenv.compat.matrix_view import format_drift, format_matrix

    data = load_matrix()
    if not check:
        show(json.dumps(data.to_dict(), indent=2) if json_ else format_matrix(data))
        return
    import sys

    from invoke.exceptions import Exit

    from gpuenv.compat.drift import compare, gather
    from gpuenv.compat.pypi import PyPI

    client = PyPI()
    say = lambda line: show(f"  {line}", file=sys.stderr, flush=True)  # noqa: E731 (progress goes to stderr: --json stays clean)
    report = compare(data, gather(client, data, progress=say), index=client.settings.index_url)
    report.notes.append(
        f"{client.requests} requests, {client.bytes_fetched / 2**20:.1f} MiB read from "
        f"{client.settings.json_base}"
    )
    show(json.dumps(report.to_dict(), indent=2) if json_ else format_drift(report))
    if report.drift:
        raise Exit(code=1)


@task(
    name="resolve",
    help={
        **STACK_HELP,
        "host": HOST_HELP + " (--driver and --gpu-arch still win)",
        "platform": PLATFORM_HELP,
        "json": "print the stack as JSON (keys: cuda and cuda_version of the image, "
        "framework_cuda of the build, min_driver, base_image, python, framework, "
        "framework_version, wheel_variant, index_url, reasons, ...)",
    },
)
@user_errors
def resolve_(
    c,
    driver=None,
    cuda=None,
    framework=None,
    torch=None,
    tensorflow=None,
    python=None,
    gpu_arch=None,
    json_=False,
    strict_driver=False,
    wheelhouse=None,
    host=None,
    platform=None,
):
    """Choose the stack (CUDA, base image, framework build, Python) for this host and your wishes.

    The team's invoke.yaml gives the defaults and pins.
    """
    from gpuenv.compat.host import HostSource
    from gpuenv.compat.stack_view import format_stack

    # --platform, and --host: that server's driver and GPUs instead of this machine's (checked now)
    server = HostSource.checked(host, platform)
    request = stack_request(team_settings(c), **stack_options(locals()))
    stack = resolve(request, server)
    show(json.dumps(stack.to_dict(), indent=2) if json_ else format_stack(stack))
