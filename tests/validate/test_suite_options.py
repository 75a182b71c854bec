"""The suite's options are declared once (validate/options.py) and reach all three of its command
lines: `python -m validate`, its pytest plugin and `invoke validate`, which judges a capture
with --replay exactly as `python -m validate --replay` does."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.cli.validation import suite_arguments, validate
from validate.cli import parse_args, pytest_args
from validate.options import SUITE_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
CAPTURES = ROOT / "tests" / "validate" / "captures" / "nvidia-smi-xml"


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


@pytest.mark.parametrize("capture", ["h100x8-580.105.08.xml", "MOCK-gb200-gpu-lost.xml"])
def test_invoke_validate_replay_judges_a_capture_as_python_m_validate_does(capture, invoke_cli):
    path = str(CAPTURES / capture)
    task = invoke_cli("validate", "--replay", path, timeout=300)
    suite = subprocess.run(
        [sys.executable, "-m", "validate", "--replay", path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "No idea what" not in task.stderr
    assert task.returncode == suite.returncode
    assert _without_timing(task.stdout) == _without_timing(suite.stdout)
    assert "validate:" in suite.stdout.splitlines()[-1]


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
