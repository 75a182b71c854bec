"""The session-end check "no test leaves a container behind, pass or fail" (issue 28), as pytest
hooks that tests/conftest.py takes in (and `-p leftovers` loads elsewhere, for its own test).

A container counts as this session's leftover when, at the session's end, it still exists and
1. the engine created it after the session started (to the microsecond),
2. it is gpuenv's: a label under io.gpuenv. (containers inherit their image's labels), an image
   named gpuenv..., or a command that names gpuenv, and
3. it shows it is this session's: it mounts a folder under this session's temporary folder
   (pytest's basetemp, made for this session alone).

The engine is shared (other developers' sessions, CI jobs, a benchmark or `invoke run` in this
same checkout), and it does not record which client made a container, so (3) is what keeps
everyone else's containers out: no other process works in this session's basetemp. (A mount of
the checkout is not proof: a first run of this check removed a benchmark's `invoke run`
container that mounted it.) A gpuenv container that mounts nothing of the session (a build step,
the Python probe, a fleet container, a task run from the checkout) cannot be told from another
user's here; the tests that make those count their own (tests/dockercases.py:
build_step_containers_since, containers_created_since).

Each leftover is named with the test module that was running when it was created, removed, and
reported as one error (the run then exits non-zero).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

LABEL_PREFIX = "io.gpuenv."
#: The node id the error is reported under (it belongs to no test).
REPORT_NODEID = "tests/leftovers.py::no-container-left-behind"


@dataclass(frozen=True)
class Leftover:
    id: str
    name: str
    image: str
    status: str
    module: str | None  # the test module running when the engine created it, when known


def _is_gpuenv(info: dict[str, Any]) -> bool:
    config = info.get("Config") or {}
    labels = config.get("Labels") or {}
    command = " ".join([info.get("Path") or "", *(info.get("Args") or [])])
    return (
        any(key.startswith(LABEL_PREFIX) for key in labels)
        or str(config.get("Image", "")).startswith("gpuenv")
        or "gpuenv" in command
    )


def _mounts_under(info: dict[str, Any], roots: list[Path]) -> bool:
    sources = [Path(m["Source"]) for m in info.get("Mounts") or [] if m.get("Source")]
    return any(source == root or root in source.parents for source in sources for root in roots)


def module_at(moment: float, windows: list[tuple[float, float, str]]) -> str | None:
    """The test module whose test was running at `moment` (its set-up and teardown included);
    under two workers, two tests run at once: both modules, "A or B"."""
    modules = dict.fromkeys(module for start, end, module in windows if start <= moment <= end)
    return " or ".join(modules) or None


def find_leftovers(
    since: float, roots: list[Path], windows: list[tuple[float, float, str]] | None = None
) -> list[Leftover]:
    """This session's gpuenv containers that still exist (see the module docstring)."""
    from dockercases import _client, _created, containers_created_since

    api = _client().api
    found = []
    for cid in containers_created_since(since):
        try:
            info = api.inspect_container(cid)
        except Exception:  # noqa: BLE001 (removed meanwhile: not left behind)
            continue
        if not _is_gpuenv(info) or not _mounts_under(info, roots):
            continue
        found.append(
            Leftover(
                info["Id"],
                info.get("Name", "").lstrip("/"),
                str((info.get("Config") or {}).get("Image", "")),
                str((info.get("State") or {}).get("Status", "")),
                module_at(_created(info["Created"]), windows or []),
            )
        )
    return found


def describe(leftovers: list[Leftover]) -> str:
    """The error's text: one line per container, with the module that made it."""
    lines = [
        f"{len(leftovers)} container(s) made by this test session were left behind (now removed):"
    ]
    for c in leftovers:
        lines.append(
            f"  {c.id[:12]} {c.name} ({c.status}, image {c.image}), made during "
            f"{c.module or 'no test (a fixture or hook)'}"
        )
    return "\n".join(lines)


def remove(leftovers: list[Leftover]) -> None:
    from dockercases import _client

    api = _client().api
    for c in leftovers:
        try:
            api.remove_container(c.id, force=True)
        except Exception:  # noqa: BLE001 (already gone)
            pass


# The session's state: when it started, and when each test ran (its set-up to its teardown).
_STARTED: list[float] = []
_WINDOWS: dict[str, tuple[float, float]] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    _STARTED[:] = [time.time()]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each phase's report widens its test's window. Reports carry their times, and under
    pytest-xdist the workers' reports reach the controller, which runs the check for them all."""
    if not report.start:
        return
    start, stop = _WINDOWS.get(report.nodeid, (report.start, report.stop))
    _WINDOWS[report.nodeid] = (min(start, report.start), max(stop, report.stop))


def run_windows() -> list[tuple[float, float, str]]:
    """(start, end, module) of every test reported so far."""
    return [(start, stop, nodeid.split("::", 1)[0]) for nodeid, (start, stop) in _WINDOWS.items()]


def _engine_answers() -> bool:
    try:
        from dockercases import _client

        _client().ping()
        return True
    except Exception:  # noqa: BLE001 (no engine, no SDK: no container can have been made)
        return False


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Report this session's leftover containers as an error (which fails the run), then remove
    them. Under pytest-xdist the controller checks, once every worker is done: its basetemp holds
    each worker's (popen-gw0, ...), and a report sent from a worker's session end would be
    refused by xdist (it belongs to no test)."""
    if hasattr(session.config, "workerinput") or not _STARTED or not _engine_answers():
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    leftovers = find_leftovers(_STARTED[0], [factory.getbasetemp()], run_windows())
    if not leftovers:
        return
    remove(leftovers)
    report = pytest.TestReport(
        nodeid=REPORT_NODEID,
        location=("tests/leftovers.py", 0, "no-container-left-behind"),
        keywords={},
        outcome="failed",
        longrepr=describe(leftovers),
        when="teardown",
    )
    session.config.hook.pytest_runtest_logreport(report=report)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
