"""The suite's options are declared once (validate/options.py) and reach all three of its command
lines: `python -m validate`, its pytest plugin and `invoke validate`, which judges a capture
with --replay exactly as `python -m validate --replay` does, in its own process where a new one
would run the same suite (gpuenv/cli/replay.py)."""

from __future__ import annotations

import inspect
import json
import os
import pstats
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.cli.replay import judged_here, suite_python_m_imports
from gpuenv.cli.validation import suite_arguments, validate
from validate.cli import parse_args, pytest_args
from validate.options import SUITE_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "tests" / "validate" / "captures" / "nvidia-smi-xml"
H100 = CAPTURES / "h100x8-580.105.08.xml"


def test_every_suite_option_is_a_parameter_of_invoke_validate_with_its_help():
    """Read from the module's help table: Invoke pops a task's `help` entries as it parses the task
    (an earlier in-process run empties `validate.help`)."""
    from gpuenv.cli.validation import _HELP as task_help

    parameters = inspect.signature(validate.body).parameters
    for option in SUITE_OPTIONS:
        assert option.name in parameters, f"invoke validate lacks {option.flag}"
        assert task_help[option.name].startswith(option.help), option.flag


def test_every_suite_option_travels_from_the_command_line_to_pytest():
    """Each option set on `python -m validate` reaches pytest as the plugin's flag, and `invoke
    validate` builds the same command line from the same values."""
    values = {
        o.name: True if o.metavar is None else "3" if o.metavar == "N" else f"x-{o.name}"
        for o in SUITE_OPTIONS
    }
    argv = suite_arguments(**values)
    args, extra = parse_args(argv)
    assert extra == []
    assert {o.name: getattr(args, o.name) for o in SUITE_OPTIONS} == {**values, "expect_gpus": 3}
    out = pytest_args(args, extra)
    for option in SUITE_OPTIONS:
        value = getattr(args, option.name)
        expected = (
            "--junitxml=x-junit"  # --junit is pytest's own option
            if not option.in_plugin
            else option.in_plugin
            if option.metavar is None
            else f"{option.in_plugin}={value}"  # one word: pytest never takes the value for a path
        )
        assert expected in out, option.flag


def test_the_pytest_plugin_declares_each_option_under_its_dest():
    suite = str(ROOT / "validate")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            f"{suite}/pytest.ini",
            "--rootdir",
            suite,
            suite,
            "--help",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for option in SUITE_OPTIONS:
        if option.in_plugin:
            assert option.in_plugin in result.stdout, option.flag


def _without_timing(text: str) -> str:
    return re.sub(r" in \d+\.\d+s", " in Ns", text)


def _json_without_timing(path: Path) -> object:
    """A JSON report with each run's own seconds taken out."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "seconds"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(json.loads(path.read_text(encoding="utf-8")))


def _junit_without_timing(path: Path) -> str:
    return re.sub(r' (time|timestamp)="[^"]*"', "", path.read_text(encoding="utf-8"))


def _damaged(tmp_path: Path) -> Path:
    """The H100 capture cut short mid-file, as a copy interrupted on its way would be."""
    cut = tmp_path / "cut-short.xml"
    cut.write_bytes((CAPTURES / "h100x8-580.105.08.xml").read_bytes()[:3000])
    return cut


@pytest.mark.parametrize("capture", ["h100x8-580.105.08.xml", "MOCK-gb200-gpu-lost.xml", "damaged"])
def test_invoke_validate_replay_judges_a_capture_as_python_m_validate_does(
    capture, invoke_cli, tmp_path
):
    """The task judges a replay in its own process (gpuenv/cli/replay.py), the suite's command in
    a new one: the same table, exit status, JSON and JUnit; a damaged capture the same one line."""
    path = str(_damaged(tmp_path) if capture == "damaged" else CAPTURES / capture)
    out = tmp_path / "out"  # the same report paths both ways: the screen names them
    reports = ["--json", str(out / "r.json"), "--junit", str(out / "r.xml")]
    written = {}
    for way in ("task", "suite"):
        out.mkdir()
        if way == "task":
            done = invoke_cli("validate", "--replay", path, *reports, timeout=300)
        else:
            done = subprocess.run(
                [sys.executable, "-m", "validate", "--replay", path, *reports],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=300,
            )
        files = sorted(p.name for p in out.iterdir())
        if files == ["r.json", "r.xml"]:
            files = [_json_without_timing(out / "r.json"), _junit_without_timing(out / "r.xml")]
        written[way] = (done, files)
        shutil.rmtree(out)
    (task, task_files), (suite, suite_files) = written["task"], written["suite"]
    assert "No idea what" not in task.stderr
    assert task.returncode == suite.returncode == {"damaged": 2}.get(capture, task.returncode)
    assert _without_timing(task.stdout) == _without_timing(suite.stdout)
    assert "validate:" in suite.stdout.splitlines()[-1]
    assert task_files == suite_files
    if capture == "damaged":  # refused in one line, before any check, nothing written
        assert task.stdout.count("\n") == 1 and "not well-formed" in task.stdout
        assert "Traceback" not in task.stderr + task.stdout and task_files == []
    else:
        assert len(task_files) == 2 and task_files[0]["host"]["nvml"]["replayed_from"] == path


def test_invoke_validate_replay_parses_the_capture_once_in_its_own_process(tmp_path):
    """Profiled, the task's process parses the 8-GPU capture once and runs the suite's main
    itself: a replay starts no second Python (whose parse this profile would not see) and the
    session takes the capture the preflight parsed."""
    profile = tmp_path / "invoke.prof"
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "invoke"]
        + ["--search-root", str(ROOT), "validate", "--replay", str(H100)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "validate: every check passed" in done.stdout, done.stdout[-2000:] + done.stderr
    calls = {
        (Path(file).as_posix(), function): count
        for (file, _, function), (_, count, *_) in pstats.Stats(str(profile)).stats.items()
    }
    assert calls.get((f"{ROOT}/validate/host/capture.py", "parse_capture")) == 1
    assert calls.get((f"{ROOT}/validate/cli.py", "main")) == 1


SELF_SIGNAL = """
import os, signal
def pytest_runtest_call(item):  # the first check: a signal to the process running the suite
    os.kill(os.getpid(), int(os.environ["SELF_SIGNAL"]))
"""


@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [
        (signal.SIGTERM, 143, "gpuenv: terminated (SIGTERM); nothing half-written was left"),
        (signal.SIGINT, 130, "gpuenv: interrupted"),
    ],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_ends_a_replay_in_the_tasks_process_as_it_ended_the_task(
    signum, code, said, invoke_cli, tmp_path
):
    """SIGTERM to the task's process ended it 143 (its child killed), Ctrl-C 130 "interrupted":
    judged in that process, the suite stops and reports first, then the task ends the same way,
    and no temporary JUnit file is left behind."""
    (tmp_path / "selfsignal.py").write_text(SELF_SIGNAL, encoding="utf-8")
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    done = invoke_cli(
        "validate",
        "--replay",
        str(H100),
        "--junit",
        str(junit),
        env={
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]),
            "PYTEST_ADDOPTS": "-p selfsignal",
            "SELF_SIGNAL": str(int(signum)),
        },
        timeout=300,
    )
    assert done.returncode == code, done.stdout[-2000:] + done.stderr
    assert done.stderr.strip().splitlines()[-1] == said
    assert "validate: NOT READY: the run was interrupted" in done.stdout
    assert [p.name for p in junit.parent.iterdir() if p.name != "junit.xml"] == []


def test_a_replay_in_this_process_leaves_it_as_it_found_it():
    """After the suite ran in the task's process: the same environment (the session sets
    CUDA_DEVICE_ORDER), sys.path (pytest puts the suite's root first) and SIGTERM handler, as a
    child that ended would have left them. In a new Python of its own, so that this test's process
    keeps its handlers."""
    script = f"""
import os, signal, sys
os.environ.pop("CUDA_DEVICE_ORDER", None)
before = (dict(os.environ), list(sys.path), signal.getsignal(signal.SIGTERM))
from gpuenv.cli.replay import judge_replay_here
code = judge_replay_here(["--replay", {str(H100)!r}])
after = (dict(os.environ), list(sys.path), signal.getsignal(signal.SIGTERM))
print("exit", code, "left as found:", before == after)
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.splitlines()[-1] == "exit 0 left as found: True", done.stdout + done.stderr
    assert "validate: every check passed" in done.stdout


def test_a_folder_with_its_own_validate_keeps_the_new_python(invoke_cli, tmp_path):
    """`python -m validate` imports the current folder's validate/ first: where that is another
    suite than the task's, the replay still runs in a new Python, which runs that one."""
    own = tmp_path / "validate"
    own.mkdir()
    (own / "__init__.py").write_text("", encoding="utf-8")
    (own / "__main__.py").write_text(
        "import sys\nprint('this folder s own suite', sys.argv[1:])\nsys.exit(7)\n",
        encoding="utf-8",
    )
    assert suite_python_m_imports(tmp_path, {}) == (own / "__init__.py").resolve()
    done = invoke_cli("validate", "--replay", str(H100), cwd=tmp_path, timeout=300)
    assert done.returncode == 7 and "this folder s own suite" in done.stdout, done.stderr


def test_the_suite_a_new_python_would_import_is_found_as_python_finds_it(tmp_path):
    """The current folder first (not under PYTHONSAFEPATH), then PYTHONPATH, then this
    interpreter's own path: here, the checkout's validate/."""
    ours = (ROOT / "validate" / "__init__.py").resolve()
    assert suite_python_m_imports(ROOT, {}) == ours
    other = tmp_path / "elsewhere" / "validate"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("", encoding="utf-8")
    assert suite_python_m_imports(ROOT, {"PYTHONPATH": str(other.parent)}) == ours
    assert (
        suite_python_m_imports(tmp_path, {"PYTHONPATH": "elsewhere"})
        == (other / "__init__.py").resolve()
    )
    assert (
        suite_python_m_imports(other.parent, {"PYTHONSAFEPATH": "1", "PYTHONPATH": str(ROOT)})
        == ours
    )
    assert judged_here(ROOT, {}) is True
    assert judged_here(other.parent, {}) is False


def test_the_session_reads_each_option_under_the_dest_the_plugin_declared():
    from validate.options import suite_option

    class Config:  # pytest's Config.getoption, by dest
        def getoption(self, dest: str) -> str:
            return dest

    assert suite_option(Config(), "verbose") == "validate_full_report"
    assert suite_option(Config(), "expect_gpus") == "validate_expect_gpus"
    for name in ("junit", "no_such_option"):  # pytest's own --junitxml; a typo
        with pytest.raises(KeyError):
            suite_option(Config(), name)
