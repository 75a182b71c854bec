"""`invoke validate --hosts ...`, `--slurm ...` and `--from-reports DIR`: the fleet side of the
validate task.

Thin on purpose: the mode rules and the merge of the fleet settings are gpuenv.fleet.modes; here
every option is checked, the backend called (gpuenv.fleet.sshhosts or .slurm) or reports already
collected read (`--from-reports`, gpuenv.fleet.collected), progress shown per host, then the fleet
report rendered and "every host ready" turned into the exit code.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from gpuenv.cli.output import show
from gpuenv.errors import BadInput
from gpuenv.fleet.modes import FleetOptions
from gpuenv.fleet.outcome import HostOutcome

#: Width of the host column in the plain progress lines.
_PAD = 28


def time_limit_seconds(text: str) -> float:
    """Slurm's --time forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds, for SSH hosts too;
    at most 7 days (gpuenv.fleet.slurm.MAX_LIMIT_S)."""
    from gpuenv.fleet.slurm_job import limit_seconds

    return limit_seconds(text, "--time", unlimited=False) or 0.0


def _read_baseline(path: str | None) -> tuple[bytes | None, dict[str, dict[str, float]] | None]:
    if not path:
        return None, None
    from validate.report.baseline import BaselineError, parse_baseline, read_baseline_bytes

    # read once: the same bytes are checked here and copied to every host (a FIFO has no second
    # read)
    try:
        data = read_baseline_bytes(path)
        return data, parse_baseline(data, path)
    except BaselineError as err:
        raise BadInput(err.message, fix=err.fix) from None


def _check_outputs(opts: FleetOptions) -> None:
    from validate.writing import output_clash

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
    from validate.writing import path_problem

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
    """Progress per host: a live rich table on a terminal, plain lines (no control codes)
    otherwise."""

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
            # soft_wrap: a long line stays one line in a CI log, never cut at the console's 80
            # columns
            self.console.print(
                f"[{elapsed:6.1f}s {done}/{max(self.total, len(self.state))}] {safe_text(line)}",
                markup=False,
                soft_wrap=True,
            )
            self.console.file.flush()  # CI reads the log while it runs


def stack_image_ref(engine: Any) -> str:
    """Without --image: the local image (on `engine`) of the stack resolved for this host, by its
    tag."""
    from gpuenv.compat.host import resolve_for_host
    from gpuenv.images import plan as images

    stack = resolve_for_host()
    info = engine.image_info(images.image_for_stack(engine, stack))
    if info is None or not info.tags:
        raise BadInput(
            f"the local image of {stack.stack_id} has no tag the hosts could know it by",
            fix="push it (invoke push) and pass --image HOST/gpuenv/...@sha256:...",
        )
    show(
        f"no --image: using {info.tags[0]} (hosts that lack it pull it by tag; share images by "
        "digest with invoke push)",
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
            "validating through Slurm: "
            f"{opts.nodelist or (str(opts.nodes) + ' node(s)' if opts.nodes else '1 node')}, run "
            f"folder {job.rundir}"
        )
        with HostProgress(total=opts.nodes or 0) as progress:
            outcomes = slurm.run_job(job, baseline=baseline_bytes, progress=progress)
            # Two or more nodes: one job across them after their own suites
            # (gpuenv/fleet/multinode.py).
            from gpuenv.fleet.multinode import run_multinode

            joint = run_multinode(job, outcomes, progress)
        return outcomes + ([joint] if joint else [])
    from gpuenv.fleet import sshhosts

    assert opts.hosts
    if opts.time and opts.time.upper() not in ("UNLIMITED", "INFINITE"):
        time_limit_seconds(opts.time)  # a bad value stops here, before any host is contacted
    if opts.image:
        image = opts.image
    else:
        from gpuenv.engine import Engine

        image = stack_image_ref(Engine.local())
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
        f"validating {len(opts.hosts)} host(s) over SSH, {min(opts.parallel, len(opts.hosts))} "
        f"at a time, in {image}{limit}"
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

    from gpuenv.cli.task import Terminated
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
