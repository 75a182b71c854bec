"""Command line of the suite: translate our options into a pytest run and its exit status.

Exit status: 0 every check ran and passed (or skipped with its reason) and each GPU computed (or
--health-only); 1 not ready (a check failed, or nothing was validated: no check collected, a pytest
mode that runs none such as --collect-only, or a GPU host where no framework proved each GPU
computes); 2 bad input (a report path that cannot be written, an unusable baseline, a pytest usage
error), said in one line before any slow work; 3 pytest's internal error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from validate.options import SUITE_OPTIONS, add_options
from validate.text import safe_text

SUITE_DIR = Path(__file__).resolve().parent

EXIT_MEANING = {
    1: "some checks failed",
    2: "the run was interrupted",
    3: "pytest hit an internal error",
    4: "pytest was called wrongly",
    5: "no checks were collected",
}
#: pytest's exit status -> ours (see the module docstring).
EXIT_STATUS = {0: 0, 1: 1, 2: 130, 3: 3, 4: 2, 5: 1}


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m validate",
        description="Check that this server is ready for the team's PyTorch and TensorFlow images. "
        "Outside an image at least one GPU is expected (--expect-gpus 0 for a CPU-only host). "
        "Other arguments are passed to pytest (e.g. -k masking, -x).",
    )
    add_options(parser.add_argument)
    return parser.parse_known_args(argv)


def pytest_args(
    args: argparse.Namespace, extra: list[str], junit_path: str | None = None
) -> list[str]:
    """The pytest command line for these options (pure, so it is tested directly).

    `junit_path` is where pytest writes the XML: a temporary file beside --junit, moved into
    place only when the run is over, so no half-written report is ever left.

    Each value is joined to its flag (`--replay=PATH`): pytest reads its command line before it
    knows the suite's flags, so a separate PATH would count as a test path, and pytest would load
    every conftest.py from the folders of a capture, a baseline or a report (a checkout's tests/).
    """
    out = [
        str(SUITE_DIR),
        "--rootdir",
        str(SUITE_DIR),
        "-c",
        str(SUITE_DIR / "pytest.ini"),
        "-q",
        "-rN",
        "--tb=no",
    ]
    for option in SUITE_OPTIONS:
        value = getattr(args, option.name)
        if value is None or value is False:
            continue
        if option.name == "junit":
            out += [f"--junitxml={junit_path or value}"]
        elif option.metavar is None:
            out.append(option.in_plugin)
        else:
            out.append(f"{option.in_plugin}={value}")
    return out + extra


def unwritable(path: str) -> str | None:
    """Why a report cannot be written at `path`, or None. Checked before any measuring: the
    nearest existing folder must take a new file (a read-only mount or a root-owned folder
    fails here, not after minutes of measurements)."""
    from validate.writing import path_problem

    impossible = path_problem(path)  # a 300-character name makes every stat below raise
    if impossible:
        return f"cannot write {path}: {impossible}"
    target = Path(path)
    if target.is_dir():
        return f"{path} is a folder: give a file name"
    if target.exists() and not target.is_file():
        return None  # /dev/null, a FIFO, /dev/stdout: written through
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"cannot write {path}: {folder} is not a folder"
    try:
        with tempfile.TemporaryFile(dir=folder, prefix=".validate-check-"):
            pass
    except OSError as err:
        return f"cannot write {path}: {err.strerror or err} in {folder}"
    return None


def preflight(args: argparse.Namespace) -> str | None:
    """Every problem with the options that would otherwise show after the measurements."""
    from validate.envvars import problem as variable_problem

    bad = variable_problem()  # read at import by the probes: an empty one was an "interrupted" run
    if bad:
        return bad
    for flag, value in (
        ("--json", args.json),
        ("--junit", args.junit),
        ("--save-baseline", args.save_baseline),
    ):
        if value:
            problem = unwritable(value)
            if problem:
                return f"{flag}: {problem}"
    if args.baseline:
        from validate.report.baseline import BaselineError, load_baseline

        try:
            load_baseline(args.baseline)
        except BaselineError as err:
            return f"--baseline: {err}"
    if args.replay:
        from validate.host.capture import CaptureError, load_capture

        try:
            load_capture(args.replay, keep=True)  # parsed once: the session takes this one
        except CaptureError as err:
            return f"--replay: {err}"
    if args.record:
        from validate.writing import path_problem

        folder = Path(args.record)
        impossible = path_problem(
            args.record, folder=True
        )  # a 300-character name makes every stat below raise
        if impossible:
            return f"--record: cannot make the folder {args.record}: {impossible}"
        if folder.exists() and not folder.is_dir():
            return f"--record: {args.record} is a file: give a folder for the recording"
        problem = unwritable(str(folder / "gpuenv-recording.json"))
        if problem:
            return f"--record: {problem}"
    from validate.writing import output_clash

    clash = output_clash(
        {"--json": args.json, "--junit": args.junit, "--save-baseline": args.save_baseline},
        {"--baseline": args.baseline, "--replay": args.replay},
    )
    if clash:
        return f"{clash}: give another file name"
    if args.expect_gpus is not None and args.expect_gpus < 0:
        return f"--expect-gpus must be 0 or more, got {args.expect_gpus}"
    return None


def image_suite(stack_file: str | None, running: Path = SUITE_DIR) -> Path | None:
    """The suite baked into the image (beside its stack file), when the one running is another:
    inside the image `python -m validate` in a mounted checkout finds the checkout's validate/
    first, and a server must be judged by the suite the image was built with."""
    if not stack_file:
        return None
    baked = Path(stack_file).resolve().parent / "validate"
    if (baked / "__main__.py").is_file() and baked.resolve() != running.resolve():
        return baked
    return None


class RunOutcome:
    """A pytest plugin that counts the checks that ran, so a run that validated nothing
    (--collect-only, --fixtures, -k matching nothing) never reads as success."""

    def __init__(self) -> None:
        self.ran = 0
        self.write_errors: list[str] = []
        self.not_validated: str | None = None

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or (report.when == "setup" and report.skipped):
            self.ran += 1

    def pytest_unconfigure(self, config: Any) -> None:
        from validate.conftest import SUITE

        suite = config.stash.get(SUITE, None)
        if suite is not None:
            self.write_errors = list(suite.write_errors)
            self.not_validated = suite.not_validated


def verdict(status: int, ran: int, not_validated: str | None = None) -> tuple[int, str]:
    """Our exit status and last line from pytest's status, the number of checks that ran, and why
    the run proves no ready host though its checks passed (validate/judge/evidence.py)."""
    if status == 0 and ran == 0:
        return (
            1,
            "validate: NOT VALIDATED: no check ran (pytest mode that runs none, e.g. "
            "--collect-only)",
        )
    if not_validated:
        from validate.judge.evidence import local_fix

        return (
            1,
            f"validate: NOT VALIDATED: {not_validated.removeprefix('not validated: ')}: "
            f"{local_fix(not_validated)}",
        )
    if status == 0:
        return 0, "validate: every check passed (or skipped with its reason)"
    code = EXIT_STATUS.get(status, 1)
    return code, f"validate: NOT READY: {EXIT_MEANING.get(status, f'pytest exit status {status}')}"


def _move_junit(tmp: str, target: str) -> str | None:
    """Put the finished JUnit file in place through the atomic writer; the reason on failure."""
    from validate.writing import write_text_atomic

    try:
        if Path(tmp).is_file():
            write_text_atomic(target, Path(tmp).read_text(encoding="utf-8"))
        return None
    except OSError as err:
        return f"cannot write the JUnit report {target}: {err.strerror or err}"
    finally:
        Path(tmp).unlink(missing_ok=True)


def _stop_on_sigterm() -> None:
    """SIGTERM (`timeout`, a scheduler's or container's stop) ends the run as Ctrl-C does: pytest
    stops and reports, and the temporary JUnit file is put in place or removed, never left behind
    (a default SIGTERM kills Python before any `finally` runs)."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (the suite called from a test harness): leave it
        pass


def main(argv: list[str], own_sigterm: bool = True) -> int:
    """`python -m validate ARGV`: its exit status (see the module docstring). `own_sigterm=False`
    leaves SIGTERM to a caller that runs the suite in its own process and already turns it into a
    KeyboardInterrupt (`invoke validate --replay`, gpuenv/cli/replay.py)."""
    baked = image_suite(os.environ.get("GPUENV_STACK_FILE"))
    if baked is not None:
        print(f"validate: running the image's own suite {baked}, not {SUITE_DIR}", flush=True)
        os.execv(sys.executable, [sys.executable, str(baked / "__main__.py"), *argv])
    args, extra = parse_args(argv)
    problem = preflight(args)
    if problem:
        print(
            f"validate: {safe_text(problem, limit=4000)}"
        )  # it may quote a path or a capture's text
        return 2
    try:
        import pytest
    except ImportError:
        print(
            "validate: pytest is not installed in this Python environment: pip install pytest "
            "nvidia-ml-py"
        )
        return 1

    junit_tmp = None
    if args.junit and not (
        Path(args.junit).exists() and not Path(args.junit).is_file()
    ):  # /dev/stdout: direct
        folder = Path(args.junit).resolve().parent
        folder.mkdir(parents=True, exist_ok=True)
        fd, junit_tmp = tempfile.mkstemp(
            prefix=f".{Path(args.junit).name}.", suffix=".tmp", dir=folder
        )
        os.close(fd)
    outcome = RunOutcome()
    if own_sigterm:
        _stop_on_sigterm()
    try:
        status = int(pytest.main(pytest_args(args, extra, junit_tmp), plugins=[outcome]))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while pytest starts, before its session catches
        status = int(pytest.ExitCode.INTERRUPTED)
    finally:
        junit_problem = _move_junit(junit_tmp, args.junit) if junit_tmp else None
    code, line = verdict(status, outcome.ran, outcome.not_validated)
    print(line)
    problems = outcome.write_errors + ([junit_problem] if junit_problem else [])
    for problem in problems:
        print(f"validate: {problem}")
    return 2 if problems and code == 0 else code
