"""Per-host suite reports collected by any means (a Slurm run folder, pdsh, Ansible, a cron job),
read from one folder into the `HostOutcome`s every fleet backend returns.

So a team with its own orchestration gets gpuenv's fleet report without its backends:
`invoke validate --from-reports DIR`. Each file is `python -m validate --json` output named after
its host (`gpu017.json` is host `gpu017`); a `report.json` in a subfolder is named after that
folder, which is how a Slurm run folder keeps them (`nodes/<node>/report.json`).

Each file is untrusted: one that is too big, not a regular file, not UTF-8, not JSON or not a
suite report makes its host MALFORMED with the reason, and every other host is read as usual.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpuenv.errors import BadInput
from gpuenv.fleet.outcome import MALFORMED, HostOutcome, status_from_report
from gpuenv.fleet.suitereport import (
    MAX_REPORT_BYTES,
    MalformedReport,
    UnreadableReport,
    parse_report,
    safe_text,
)
from validate.files import InputRefused, is_within, read_input

#: How deep below the folder a `report.json` is looked for (DIR/nodes/NODE/report.json is 2).
_DEPTH = 3


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
                f"a report file of --from-reports {safe_text(folder)} (host {safe_text(Path(path).stem, limit=60)} on the next run)"
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
    """Every host's outcome from a folder of per-host suite reports; BadInput when there are none."""
    where = Path(folder)
    if not where.is_dir():
        raise BadInput(
            f"--from-reports {safe_text(folder)}: {'no such folder' if not where.exists() else 'not a folder'}",
            fix="give the folder that holds one `python -m validate --json` report per host, named HOST.json",
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
    return [read_report(safe_text(host, limit=200), path, within=where) for host, path in files]
