"""`invoke validate --hosts ...` and `invoke validate --slurm ...`: the fleet side of the validate task.

Thin on purpose: check every option, call the backend (gpuenv.fleet.sshhosts or .slurm) or read
reports already collected (`--from-reports`, gpuenv.fleet.collected), show progress per host, then
render the fleet report and turn "every host ready" into the exit code.
The task in validation.py reads invoke.yaml (`gpuenv.fleet`) and hands plain values here.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from gpuenv.cli.common import show
from gpuenv.errors import BadInput
from gpuenv.fleet.outcome import HostOutcome

#: Width of the host column in the plain progress lines.
_PAD = 28


@dataclass(frozen=True)
class FleetOptions:
    """The fleet settings after command line over invoke.yaml over defaults."""

    hosts: list[str] | None = None
    slurm: bool = False
    image: str | None = None
    parallel: int = 8
    partition: str | None = None
    nodes: int | None = None
    nodelist: str | None = None
    time: str | None = None
    prefix: str | None = None
    rundir: str | None = None
    report: str | None = None  # HTML
    json: str | None = None
    junit: str | None = None
    baseline: str | None = None
    gpus: str | None = None
    host_gpus: dict[str, str] | None = None  # SSH hosts: a host's own --gpus (URL=0,1;URL=2)
    from_reports: str | None = None  # a folder of per-host suite reports collected by any means
    outlier_floor: float = (
        0.9  # a GPU below this share of its model's fleet median degrades its host
    )
    verbose: bool = False  # the table lists ready hosts too
    queue_time: str | None = None  # Slurm: longest wait in the queue
    env: dict[str, str] | None = (
        None  # NCCL_*/GLOO_*/TORCH_* for every container and prefix run (fleet.env)
    )
    sbatch_args: list[str] | None = (
        None  # Slurm: more sbatch options (--sbatch-arg, slurm.sbatch_args)
    )


def merge_options(cli: dict[str, Any], config: dict[str, Any]) -> FleetOptions:
    """Command line beats invoke.yaml beats defaults; slurm settings live under `slurm:` in the file."""
    slurm_cfg = config.get("slurm") or {}
    if not isinstance(slurm_cfg, dict):
        raise BadInput(
            f"gpuenv.fleet.slurm in invoke.yaml is {slurm_cfg!r}, not a mapping",
            fix="write slurm: {partition: gpu, time: '30'}",
        )

    def pick(name: str, *, section: dict[str, Any] = config) -> Any:
        value = cli.get(name)
        return value if value not in (None, "") else section.get(name)

    hosts = cli.get("hosts")
    if hosts is True:  # a bare --hosts: the team's list from invoke.yaml
        hosts = config.get("hosts")
        if not hosts:
            raise BadInput(
                "--hosts without a value, and invoke.yaml has no gpuenv.fleet.hosts",
                fix="give --hosts ssh://user@host,... or list them under gpuenv: fleet: hosts: in invoke.yaml",
            )
    if isinstance(hosts, (list, tuple)):
        hosts = ",".join(str(h) for h in hosts)
    parallel = pick("parallel")
    try:
        parallel = int(parallel) if parallel not in (None, "") else 8
    except (TypeError, ValueError):
        raise BadInput(
            f"--parallel {parallel!r} is not a number",
            fix="give how many hosts to validate at once, e.g. --parallel 8",
        ) from None
    if parallel < 1:
        raise BadInput(
            f"--parallel {parallel} is less than 1", fix="give 1 or more, e.g. --parallel 8"
        )
    nodes = cli.get("nodes") if cli.get("nodes") not in (None, "") else slurm_cfg.get("nodes")
    if nodes not in (None, ""):
        try:
            nodes = int(nodes)
        except (TypeError, ValueError):
            raise BadInput(
                f"--nodes {nodes!r} is not a number", fix="give the node count, e.g. --nodes 4"
            ) from None
    else:
        nodes = None
    from gpuenv.fleet.sshhosts import parse_hosts

    floor = pick("outlier_floor")
    env = config.get("env") or {}
    if not isinstance(env, dict):
        raise BadInput(
            f"gpuenv.fleet.env in invoke.yaml is {env!r}, not a mapping",
            fix="write env: {NCCL_SOCKET_IFNAME: ib0}",
        )
    from gpuenv.fleet.slurm_job import check_env

    try:
        env = check_env(env)
    except BadInput as err:
        raise BadInput(f"gpuenv.fleet.env in invoke.yaml {err.message}", fix=err.fix) from None
    sbatch_args = list(cli.get("sbatch_arg") or []) or slurm_cfg.get("sbatch_args") or []
    if isinstance(sbatch_args, str) or not all(isinstance(a, str) for a in sbatch_args):
        raise BadInput(
            f"gpuenv.fleet.slurm.sbatch_args in invoke.yaml is {sbatch_args!r}, "
            "not a list of options",
            fix="write sbatch_args: [--account=ml, --qos=high]",
        )
    for arg in sbatch_args:
        if not arg.startswith("-") or "\n" in arg:
            raise BadInput(
                f"--sbatch-arg {arg!r} is not an sbatch option",
                fix="give one option a time, e.g. --sbatch-arg=--account=ml",
            )
    from gpuenv.fleet.sshhosts import parse_host_gpus

    listed = parse_hosts(hosts) if hosts and not cli.get("slurm") else None
    gpus, host_gpus = cli.get("gpus"), {}
    if listed:
        gpus, host_gpus = parse_host_gpus(gpus, listed)
    elif gpus and "=" in str(gpus):
        raise BadInput(
            f"--gpus {gpus!r} gives hosts their own GPUs, which only --hosts takes",
            fix="give one --gpus for every Slurm node (all, none, 0,1)",
        )
    return FleetOptions(
        hosts=listed,
        slurm=bool(cli.get("slurm")),
        image=pick("image"),
        parallel=parallel,
        partition=pick("partition", section=slurm_cfg),
        nodes=nodes,
        nodelist=pick("nodelist", section=slurm_cfg),
        time=str(pick("time", section=slurm_cfg))
        if pick("time", section=slurm_cfg) not in (None, "")
        else None,
        prefix=pick("prefix", section=slurm_cfg),
        rundir=pick("rundir", section=slurm_cfg),
        report=cli.get("report"),
        json=cli.get("json"),
        junit=cli.get("junit"),
        baseline=cli.get("baseline"),
        gpus=gpus,
        host_gpus=host_gpus,
        from_reports=cli.get("from_reports") or None,
        outlier_floor=outlier_floor(floor),
        verbose=bool(cli.get("verbose")),
        queue_time=pick("queue_time", section=slurm_cfg),
        env=env,
        sbatch_args=list(sbatch_args),
    )


def outlier_floor(value: Any) -> float:
    """--outlier-floor / gpuenv.fleet.outlier_floor: a share of the fleet median in (0, 1]."""
    if value in (None, ""):
        return 0.9
    try:
        floor = float(value)
    except (TypeError, ValueError):
        floor = math.nan
    if isinstance(value, bool) or not 0 < floor <= 1:
        raise BadInput(
            f"--outlier-floor {value!r} is not a share of the fleet median in (0, 1]",
            fix="give e.g. --outlier-floor 0.9 (a GPU below 90% of its model's fleet median degrades its host)",
        )
    return floor


def time_limit_seconds(text: str) -> float:
    """Slurm's --time forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds, for SSH hosts too;
    at most 7 days (gpuenv.fleet.slurm.MAX_LIMIT_S)."""
    from gpuenv.fleet.slurm_job import limit_seconds

    return limit_seconds(text, "--time", unlimited=False) or 0.0


def wants_fleet(cli: dict[str, Any]) -> bool:
    """A fleet run is asked for on the command line (--hosts, bare or with hosts, --slurm, or
    --from-reports for reports already collected): hosts
    listed in a shared invoke.yaml must not turn someone's `invoke validate` of their own machine
    into a run across the rack."""
    return bool(cli.get("hosts") or cli.get("slurm") or cli.get("from_reports"))


def _read_baseline(path: str | None) -> tuple[bytes | None, dict[str, dict[str, float]] | None]:
    if not path:
        return None, None
    from validate.report.baseline import BaselineError, parse_baseline, read_baseline_bytes

    try:  # read once: the same bytes are checked here and copied to every host (a FIFO has no second read)
        data = read_baseline_bytes(path)
        return data, parse_baseline(data, path)
    except BaselineError as err:
        raise BadInput(err.message, fix=err.fix) from None


def _check_outputs(opts: FleetOptions) -> None:
    from validate.files import output_clash

    outputs = {"--report": opts.report, "--json": opts.json, "--junit": opts.junit}
    for flag, path in outputs.items():
        if path:
            check_output_path(flag, path, f"fleet.{'html' if flag == '--report' else flag[2:]}")
    inputs: dict[str, str | Path | None] = {"--baseline": opts.baseline}
    if opts.from_reports:
        from gpuenv.fleet.collected import input_files

        inputs.update(input_files(opts.from_reports, outputs))
    clash = output_clash(outputs, inputs)
    if clash:
        raise BadInput(
            clash,
            fix="write the fleet reports outside the folder of node reports, each to its own file",
        )
    if opts.report and not opts.report.lower().endswith((".html", ".htm")):
        raise BadInput(
            f"--report {opts.report} is not an .html file",
            fix="give e.g. --report fleet.html (use --json/--junit for the other formats)",
        )


def check_output_path(flag: str, path: str, example: str) -> None:
    """An output file the run will write at its end, checked now: a writable folder, a name the
    file system takes, no folder or special file in its place."""
    import os

    target = Path(path)
    fix = f"give a file name in a folder you can write, e.g. {flag} {example}"
    from validate.files import path_problem

    problem = path_problem(
        path
    )  # the one check of names and lengths (gpuenv/cli/paths.py uses it too)
    if problem:
        raise BadInput(f"{flag} {path}: {problem}", fix=fix)
    if target.is_dir():
        raise BadInput(f"{flag} {path} is a folder", fix=fix)
    if target.exists() and not target.is_file():
        raise BadInput(f"{flag} {path} is not a regular file", fix=fix)
    if target.exists() and not os.access(target, os.W_OK):
        raise BadInput(f"{flag} {path} is not writable", fix=fix)
    folder = target.parent if str(target.parent) else Path(".")
    while (
        not folder.exists() and folder != folder.parent
    ):  # the report writer makes missing folders
        folder = folder.parent
    if not folder.is_dir():
        raise BadInput(f"{flag} {path}: {folder} is not a folder", fix=fix)
    from gpuenv.fleet.slurm_job import writable_folder_problem

    problem = writable_folder_problem(
        folder
    )  # tried, not guessed: root passes every access() check
    if problem:
        raise BadInput(f"{flag} {path}: the folder {folder} cannot be written ({problem})", fix=fix)


def check_fleet_options(opts: FleetOptions) -> None:
    """Every fleet option and output, before any host, job or engine is touched: one line each."""
    from gpuenv.engine import parse_gpus
    from gpuenv.images.share import parse_image_ref

    _check_outputs(opts)
    parse_gpus(opts.gpus or "all")
    if opts.image:
        parse_image_ref(opts.image)
    if opts.time and opts.time.strip().upper() not in ("UNLIMITED", "INFINITE"):
        time_limit_seconds(opts.time)
    if opts.slurm:
        from gpuenv.fleet.slurm_job import limit_seconds

        limit_seconds(opts.queue_time or "1:00:00", "--queue-time", unlimited=False)
        from gpuenv.fleet.slurm_job import check_rundir

        check_rundir(
            str(Path(opts.rundir or Path.cwd() / "gpuenv-fleet").absolute())
        )  # the default goes under ./
    elif opts.queue_time:
        raise BadInput("--queue-time is a Slurm option", fix="drop it, or validate through --slurm")
    elif opts.sbatch_args and not opts.from_reports:
        raise BadInput("--sbatch-arg is a Slurm option", fix="drop it, or validate through --slurm")


class HostProgress:
    """Progress per host: a live rich table on a terminal, plain lines (no control codes) otherwise."""

    def __init__(self, stream: Any = None, total: int = 0) -> None:
        from rich.console import Console

        self.console = Console(file=stream or sys.stdout, highlight=False)
        self.total = total  # hosts in the run (0: not known yet, e.g. a Slurm job's nodes)
        self.started = time.monotonic()
        self.state: dict[
            str, tuple[str, str, float, float | None]
        ] = {}  # phase, detail, start, end
        self.live: Any = None

    def __enter__(self) -> "HostProgress":
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(
                self._table(), console=self.console, refresh_per_second=4, transient=False
            )
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live is not None:
            self.live.update(self._table())
            self.live.__exit__(*exc)

    def _table(self) -> Any:
        from gpuenv.fleet.report.terminal import render_live

        return render_live(self.state, max(self.total, len(self.state)), time.monotonic())

    def __call__(self, host: str, phase: str, detail: str) -> None:
        since = self.state[host][2] if host in self.state else time.monotonic()
        self.state[host] = (phase, detail, since, time.monotonic() if phase == "done" else None)
        if self.live is not None:
            self.live.update(self._table())
        else:
            from gpuenv.fleet.suitereport import safe_text

            elapsed = time.monotonic() - self.started
            done = sum(1 for s in self.state.values() if s[0] == "done")
            line = f"{host:<{_PAD}} {phase}{': ' + detail if detail else ''}"
            # soft_wrap: a long line stays one line in a CI log, never cut at the console's 80 columns
            self.console.print(
                f"[{elapsed:6.1f}s {done}/{max(self.total, len(self.state))}] {safe_text(line)}",
                markup=False,
                soft_wrap=True,
            )
            self.console.file.flush()  # CI reads the log while it runs


def _stack_image_ref() -> str:
    """Without --image: the local image of the stack resolved for this host, by its tag."""
    from gpuenv.compat.host import resolve_for_host
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images

    stack = resolve_for_host()
    image_id = images.image_for_stack(stack)
    info = Engine.local().image_info(image_id)
    if info is None or not info.tags:
        raise BadInput(
            f"the local image of {stack.stack_id} has no tag the hosts could know it by",
            fix="push it (invoke push) and pass --image HOST/gpuenv/...@sha256:...",
        )
    show(
        f"no --image: using {info.tags[0]} (hosts that lack it pull it by tag; share images by digest with invoke push)",
        flush=True,
    )
    return info.tags[0]


def run_fleet(
    opts: FleetOptions,
    suite_args: list[str],
    say: Callable[[str], None] = lambda text: show(text, flush=True),
    baseline: bytes | None = None,
) -> list[HostOutcome]:
    """Run the chosen backend with progress and return every host's outcome (`baseline`: the
    --baseline file's bytes when the caller read them already)."""
    from gpuenv.engine import device_requests

    baseline_bytes = baseline if baseline is not None else _read_baseline(opts.baseline)[0]
    device_requests(opts.gpus or "all")  # a bad --gpus stops here, before any host is contacted
    if opts.slurm:
        from gpuenv.fleet import slurm, slurm_job

        rundir = opts.rundir or str(
            Path.cwd()
            / "gpuenv-fleet"
            / datetime.now(timezone.utc).strftime("slurm-%Y%m%dT%H%M%SZ")
        )
        job = slurm_job.SlurmJob(
            rundir=str(Path(rundir).absolute()),
            nodes=opts.nodes,
            nodelist=opts.nodelist,
            partition=opts.partition,
            time=opts.time,
            image=opts.image,
            prefix=opts.prefix,
            gpus=opts.gpus or "all",
            suite_args=suite_args,
            baseline=baseline_bytes is not None,
            queue_time=opts.queue_time,
            env=dict(opts.env or {}),
            extra_sbatch=list(opts.sbatch_args or []),
        )
        slurm_job.check_job(job)
        say(
            f"validating through Slurm: {opts.nodelist or (str(opts.nodes) + ' node(s)' if opts.nodes else '1 node')}, "
            f"run folder {job.rundir}"
        )
        with HostProgress(total=opts.nodes or 0) as progress:
            outcomes = slurm.run_job(job, baseline=baseline_bytes, progress=progress)
            # Two or more nodes: one job across them after their own suites (gpuenv/fleet/multinode.py).
            from gpuenv.fleet.multinode import run_multinode

            joint = run_multinode(job, outcomes, progress)
        return outcomes + ([joint] if joint else [])
    from gpuenv.fleet import sshhosts

    assert opts.hosts
    if opts.time and opts.time.upper() not in ("UNLIMITED", "INFINITE"):
        time_limit_seconds(opts.time)  # a bad value stops here, before any host is contacted
    image = opts.image or _stack_image_ref()
    if not opts.time:
        timeout: float | None = (
            sshhosts.DEFAULT_HOST_TIME_S
        )  # every wait is bounded, the suite's too
    else:
        timeout = (
            time_limit_seconds(opts.time)
            if opts.time.upper() not in ("UNLIMITED", "INFINITE")
            else None
        )
    run = sshhosts.SuiteRun(
        image=image,
        suite_args=suite_args,
        gpus=opts.gpus or "all",
        baseline=baseline_bytes,
        timeout_s=timeout,
        env=dict(opts.env or {}),
        host_gpus=dict(opts.host_gpus or {}),
    )
    limit = f", each within {timeout / 60:g} min (--time)" if timeout else ""
    say(
        f"validating {len(opts.hosts)} host(s) over SSH, {min(opts.parallel, len(opts.hosts))} at a time, in {image}{limit}"
    )
    with HostProgress(total=len(opts.hosts)) as progress:
        state = sshhosts.FleetState()
        outcomes = sshhosts.validate_hosts(
            opts.hosts, run, parallel=opts.parallel, progress=progress, state=state
        )
        # Two or more hosts whose suite ran: one job across them (gpuenv/fleet/sshmultinode.py).
        from gpuenv.fleet.sshmultinode import run_ssh_multinode

        joint = run_ssh_multinode(outcomes, run, progress, state)
    return outcomes + ([joint] if joint else [])


def fleet_validate(opts: FleetOptions, suite_args: list[str]) -> int:
    """The whole fleet run: outcomes, table, report files; 0 only if every host is ready."""
    from invoke.exceptions import Exit

    from gpuenv.cli.common import Terminated
    from gpuenv.fleet.report import cycles_uncollected, write_reports
    from gpuenv.fleet.report.analysis import analyse
    from gpuenv.fleet.report.terminal import render_table
    from validate.judge.peaks import load_peaks

    check_fleet_options(opts)
    baseline_bytes, baseline_models = _read_baseline(opts.baseline)
    if opts.from_reports:
        from gpuenv.fleet.collected import read_report_folder

        with cycles_uncollected():
            outcomes = read_report_folder(opts.from_reports)
        show(f"read {len(outcomes)} host report(s) from {opts.from_reports}", flush=True)
    else:
        try:
            outcomes = run_fleet(opts, suite_args, baseline=baseline_bytes)
        except (
            KeyboardInterrupt
        ) as err:  # Ctrl-C, SIGTERM or SIGHUP: the backend stopped what it started
            import signal

            signal.signal(
                signal.SIGINT, signal.SIG_IGN
            )  # we are leaving: another Ctrl-C must not become a traceback
            signal_name, code = (
                (err.signal_name, err.exit_code) if isinstance(err, Terminated) else ("Ctrl-C", 130)
            )
            done = getattr(err, "cleanup", None) or "nothing had been started on any host"
            raise Exit(
                f"gpuenv: interrupted ({signal_name}): {done}; no fleet report was written",
                code=code,
            ) from None
    with cycles_uncollected():
        fleet = analyse(outcomes, load_peaks(), baseline_models, outlier_floor=opts.outlier_floor)
        show()
        show(render_table(fleet, verbose=opts.verbose))
        for path in write_reports(
            fleet, json_path=opts.json, junit_path=opts.junit, html_path=opts.report
        ):
            show(f"written: {path}")
    return 0 if fleet.ready else 1
