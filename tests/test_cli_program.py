"""The command line as users type it: parse errors and bad option values are one line, exit 2,
and they come before any slow work (resolving, locking, building, the engine).

A real `invoke` process each time. DOCKER_HOST points at a socket that does not exist and
GPUENV_LOCKS_DIR at a fresh folder, so a check that came too late would show as an engine error
or a lock folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.cli.doctor import format_report

ROOT = Path(__file__).resolve().parent.parent
CPU = ("--cuda", "cpu", "--framework", "torch", "--torch", "2.13.0", "--python", "3.11")


def invoke(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "GPUENV_LOCKS_DIR": str(tmp_path / "locks"),
        "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
    }
    return subprocess.run(
        [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args, expected",
    [
        (("lock", "--bogus"), "gpuenv: No idea what '--bogus' is: see `invoke lock --help`"),
        (("lock", "--cuda"), "gpuenv: --cuda needs a value: see `invoke lock --help`"),
        (("run", "--shm-size"), "gpuenv: --shm-size needs a value: see `invoke run --help`"),
        (("nosuchtask",), "gpuenv: No idea what 'nosuchtask' is: see `invoke --list`"),
    ],
    ids=["unknown-option", "missing-value", "missing-value-dashed", "unknown-task"],
)
def test_invoke_parse_errors_exit_2_in_one_line(tmp_path, args, expected):
    done = invoke(*args, tmp_path=tmp_path)
    assert done.returncode == 2
    assert one_line(done) == expected


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("build", *CPU, "--tag", "Bad Tag!"),
            "gpuenv: --tag 'Bad Tag!' is not a valid image reference",
        ),
        (
            ("build", *CPU, "--tag", "foo:bar:baz"),
            "gpuenv: --tag 'foo:bar:baz' is not a valid image reference",
        ),
        (
            ("build", *CPU, "--ca-cert", "missing.pem"),
            "gpuenv: --ca-cert missing.pem: no such file",
        ),
        (("build", *CPU, "--backend", "pip"), "gpuenv: --backend 'pip' is not known"),
        (("run", *CPU, "--gpus", "0,,1", "--", "true"), "gpuenv: --gpus '0,,1' has an empty entry"),
        (
            ("run", *CPU, "--shm-size", "lots", "--", "true"),
            "gpuenv: --shm-size 'lots' is not a size",
        ),
        (("validate", *CPU, "--gpus", "1,1"), "gpuenv: --gpus '1,1' names a GPU twice"),
    ],
    ids=["bad-tag", "tag-two-colons", "ca-cert", "backend", "gpus", "shm-size", "validate-gpus"],
)
def test_bad_option_values_stop_before_locking_or_the_engine(tmp_path, args, expected):
    done = invoke(*args, tmp_path=tmp_path)
    assert done.returncode == 2, done.stderr
    assert one_line(done).startswith(expected)
    assert "Docker engine" not in done.stderr
    assert not (tmp_path / "locks").exists(), "a lock was started before the options were checked"
    assert "locking" not in done.stdout


def test_a_valid_upper_case_tag_gets_past_the_option_checks(tmp_path):
    done = invoke("build", *CPU, "--tag", "x:Prod", "--backend", "pip", tmp_path=tmp_path)
    assert one_line(done).startswith("gpuenv: --backend 'pip'"), (
        "x:Prod must pass; the next option fails"
    )


def test_doctor_labels_never_run_into_their_values():
    report = {
        "host": {"hostname": "node1", "os": "Linux", "python": "3.11.7"},
        "nvml": {"available": False, "why": "no driver"},
        "docker": {"available": False, "why": "no engine"},
        "recommended": {
            "torch": {
                "available": True,
                "stack_id": "torch2.13.0-cpu-py3.11",
                "base_image": "ubuntu:22.04",
                "pip_requirement": "torch==2.13.0+cpu",
            },
            "tensorflow": {
                "available": True,
                "stack_id": "tensorflow2.21.0-cuda12.5-py3.13",
                "base_image": "b",
                "pip_requirement": "t",
            },
        },
    }
    lines = format_report(report).splitlines()
    column = len("tensorflow") + 2
    for label, line in zip(("host", "driver", "docker", "torch", "tensorflow"), lines):
        assert line[:column] == f"{label:<{column}}", f"{line!r}: the label column is not padded"
        assert line[column] != " ", f"{line!r}: the value does not start in the value column"
    assert lines[4].startswith("tensorflow  tensorflow2.21.0-cuda12.5-py3.13")


BROKEN_YAML = "gpuenv:\n  python: [3.11\n"


def test_a_runtime_config_that_is_not_yaml_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "team.yaml"
    bad.write_text(BROKEN_YAML)
    done = invoke("-f", str(bad), "resolve", *CPU, tmp_path=tmp_path)
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(f"gpuenv: {bad}:3: not valid YAML")


def test_a_project_invoke_yaml_that_is_not_yaml_is_one_line_exit_2(tmp_path):
    """Invoke loads the invoke.yaml beside tasks.py from code gpuenv cannot wrap: tasks.py checks it
    first."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "tasks.py").write_text((ROOT / "tasks.py").read_text())
    (project / "invoke.yaml").write_text(BROKEN_YAML)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUENV_LOCKS_DIR": str(tmp_path / "locks")}
    done = subprocess.run(
        [sys.executable, "-m", "invoke", "resolve", *CPU],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert one_line(done).startswith(f"gpuenv: {project / 'invoke.yaml'}:3: not valid YAML")
