"""Per-host suite reports collected by any means (a Slurm run folder, pdsh, Ansible, a cron job),
read from one folder into the `HostOutcome`s every fleet backend returns.

So a team with its own orchestration gets gpuenv's fleet report without its backends:
`invoke validate --from-reports DIR`. Each file is `python -m validate --json` output named after
its host (`gpu017.json` is host `gpu017`); a `report.json` in a subfolder is named after that
folder, which is how a Slurm run folder keeps them (`nodes/<node>/report.json`).

Each file is untrusted: one that is too big, not a regular file, not UTF-8, not JSON or not a
suite report makes its host MALFORMED with the reason, and every other host is read as usual.

A large folder is read by a few worker processes at once (read_reports): parsing and checking a
report is pure Python, 1 to 2 ms a host, and a 12,500-host folder is 20 s of it on one core.
"""

from __future__ import annotations

import marshal
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from gpuenv.errors import BadInput
from gpuenv.fleet.outcome import MALFORMED, HostOutcome, status_from_report
from gpuenv.fleet.suitereport import (
    MAX_REPORT_BYTES,
    CheckedReport,
    MalformedReport,
    UnreadableReport,
    parse_report,
    safe_text,
)
from validate.reading import InputRefused, is_within, read_input

#: How deep below the folder a `report.json` is looked for (DIR/nodes/NODE/report.json is 2).
_DEPTH = 3
#: From this many report files on, worker processes read them (below it, starting the workers,
#: about 0.3 s, costs more than they save); at most MAX_READERS of them, one per usable CPU.
PARALLEL_FROM = 500
MAX_READERS = 4
#: Files a worker reads and sends back at once: about 1 MB of parsed reports to pass back.
CHUNK_FILES = 100


def report_files(folder: Path) -> list[tuple[str, Path]]:
    """(host, file) for each report in the folder, sorted by host; a host name seen twice keeps
    its path so that neither is lost."""
    found: list[tuple[str, Path]] = []
    for path in sorted(folder.glob("*.json")):
        found.append((path.stem, path))
    for depth in range(1, _DEPTH + 1):
        for path in sorted(folder.glob("/".join(["*"] * depth) + "/report.json")):
            found.append((path.parent.name, path))
    seen: dict[str, int] = {}
    for host, _ in found:
        seen[host] = seen.get(host, 0) + 1
    named = [
        (host if seen[host] == 1 else str(path.relative_to(folder)), path) for host, path in found
    ]
    return sorted(named, key=lambda item: item[0])


def input_files(folder: str | Path, outputs: dict[str, str | None]) -> dict[str, Path]:
    """What a `--from-reports` run reads, by name: every report file in the folder, and any of the
    `outputs` that would be read as a host's report on the next run (a .json in the folder)."""
    where = Path(folder)
    if not where.is_dir():
        return {}
    try:
        found = {
            f"host {safe_text(host, limit=60)}'s report in --from-reports {safe_text(folder)}": path
            for host, path in report_files(where)
        }
    except OSError:
        return {}  # read_report_folder says why, in its own line
    for flag, path in outputs.items():
        if path and path.endswith(".json") and is_within(path, where):
            found[
                f"a report file of --from-reports {safe_text(folder)} (host "
                f"{safe_text(Path(path).stem, limit=60)} on the next run)"
            ] = Path(path)
    return found


def read_bounded(path: Path, limit: int = MAX_REPORT_BYTES, within: Path | None = None) -> bytes:
    """The bytes of a regular report file of at most `limit` bytes, through the one bounded
    reader (a FIFO, a device or a folder named x.json is refused unread; with `within`, a link to
    a file outside that folder too); MalformedReport otherwise."""
    try:
        return read_input(path, limit, within=within)
    except InputRefused as err:
        raise MalformedReport(str(err)) from None


def read_suite_report(path: Any) -> dict[str, Any] | None:
    """A node's suite report file (a Slurm run folder's): None when there is none; bounded in size,
    never blocking on a FIFO, and never raising (see suitereport.load_suite_report)."""
    try:
        return parse_report(read_bounded(path))
    except MalformedReport as err:
        if not os.path.lexists(path) or str(err).startswith("not JSON"):
            return (
                None  # no report, or half of one (the suite was stopped): the exit code says more
            )
        return UnreadableReport(str(err))


def read_report(host: str, path: Path, within: Path | None = None) -> HostOutcome:
    """One host's outcome from its report file (MALFORMED with the reason when it cannot be read,
    or when it is a link out of the folder `within`: none of its text is shown)."""
    try:
        report = parse_report(read_bounded(path, within=within))
    except MalformedReport as err:
        return HostOutcome(
            host, MALFORMED, f"malformed report: {err}", details={"report_file": str(path)}
        )
    status, reason = status_from_report(report, None)
    return HostOutcome(
        host,
        status,
        reason,
        report=report,
        seconds=report["summary"]["seconds"],
        exit_code=report["summary"]["pytest_exit_status"],
        details={"report_file": str(path)},
    )


def read_report_folder(folder: str | Path) -> list[HostOutcome]:
    """Every host's outcome from a folder of per-host suite reports; BadInput when there are
    none."""
    where = Path(folder)
    if not where.is_dir():
        raise BadInput(
            f"--from-reports {safe_text(folder)}: "
            f"{'no such folder' if not where.exists() else 'not a folder'}",
            fix="give the folder that holds one `python -m validate --json` report per host, "
            "named HOST.json",
        )
    try:
        files = report_files(where)
    except OSError as err:
        raise BadInput(
            f"--from-reports {safe_text(folder)}: cannot list it ({err.strerror})",
            fix="check its permissions",
        ) from None
    if not files:
        raise BadInput(
            f"--from-reports {safe_text(folder)} holds no *.json report",
            fix="put one `python -m validate --json HOST.json` report per host in it",
        )
    return read_reports(where, files)


def read_reports(
    folder: Path, files: list[tuple[str, Path]], readers: int | None = None
) -> list[HostOutcome]:
    """read_report of each (host, file) of the folder, in order: from PARALLEL_FROM files on by
    `readers` worker processes (read_in_workers; default: one per usable CPU, at most
    MAX_READERS), else, or if the workers fail, by this process."""
    named = [(safe_text(host, limit=200), path) for host, path in files]
    readers = _usable_cpus() if readers is None else readers
    if readers > 1 and len(named) >= PARALLEL_FROM:
        outcomes = read_in_workers(folder, named, readers)
        if outcomes is not None:
            return outcomes
    return [read_report(host, path, within=folder) for host, path in named]


def _usable_cpus() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    return min(cpus, MAX_READERS)


def read_in_workers(
    folder: Path, named: list[tuple[str, Path]], readers: int, chunk: int = CHUNK_FILES
) -> list[HostOutcome] | None:
    """read_report of each (host, file), in order, by `readers` forked worker processes, each
    reading `chunk` files at a time and passing back their outcomes (the same as this process
    would read: tests/fleet/test_fleet_collected.py). None when they cannot: not on Linux, or
    another thread is running (forking then could copy a lock it holds; a fork server or spawn
    would import the program's main module again in every worker, and a script without the
    `__main__` guard would run itself once more in each), or the workers cannot start or die:
    the caller then reads every file itself. Never a crash, never a host lost. The workers
    leave Ctrl-C, SIGTERM and SIGHUP to this process (not to the handlers they inherit), which
    stops them, each after its current chunk."""
    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return None
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    outcomes: list[HostOutcome] = []
    try:
        pool = ProcessPoolExecutor(
            readers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_signals
        )
    except OSError:
        return None
    chunks = [named[n : n + chunk] for n in range(0, len(named), chunk)]
    try:
        for done in pool.map(_read_chunk, [str(folder)] * len(chunks), chunks):
            outcomes += _from_wire(done) if isinstance(done, bytes) else done
    except (BrokenProcessPool, OSError):
        return None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def _worker_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _read_chunk(folder: str, chunk: list[tuple[str, Path]]) -> bytes | list[HostOutcome]:
    """A worker's task: read_report of each file of the chunk, sent back as marshal data
    (_to_wire), or as they are when that cannot carry them."""
    outcomes = [read_report(host, path, within=Path(folder)) for host, path in chunk]
    try:
        return _to_wire(outcomes)
    except ValueError:  # something marshal does not carry: pickled, as the pool does by itself
        return outcomes


def _to_wire(outcomes: list[HostOutcome]) -> bytes:
    """Outcomes as marshal data: a parsed report is plain JSON data, which marshal writes and
    reads back in a third less time than pickle (a 12,500-host folder's 1.1 million checks pass
    this way), and its shared texts (check names, thresholds) come back as one string each.
    Between processes of one interpreter only, which these are (forked)."""
    return marshal.dumps(
        [
            (
                o.host,
                o.status,
                o.reason,
                None if o.report is None else dict(o.report),
                o.seconds,
                o.exit_code,
                o.details,
            )
            for o in outcomes
        ]
    )


def _from_wire(data: bytes) -> list[HostOutcome]:
    """_to_wire's outcomes back, each report a CheckedReport again (read_report checked it)."""
    return [
        HostOutcome(
            host,
            status,
            reason,
            report=None if report is None else CheckedReport(report),
            seconds=seconds,
            exit_code=exit_code,
            details=details,
        )
        for host, status, reason, report, seconds, exit_code, details in marshal.loads(data)
    ]
