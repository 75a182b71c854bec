"""`invoke lock` and `invoke export` as a user runs them (a real invoke process through tasks.py,
the real resolver)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from lockcases import FIXTURES

ROOT = Path(__file__).resolve().parents[2]


def run_task(
    *args: str, locks: Path, cwd: Path = ROOT, timeout: float = 300
) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUENV_LOCKS_DIR": str(locks), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_lock_help_explains_every_option(tmp_path):
    done = run_task("lock", "--help", locks=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in (
        "--cuda",
        "--framework",
        "--torch",
        "--tensorflow",
        "--python",
        "--driver",
        "--gpu-arch",
        "--platform",
        "--backend",
        "--wheelhouse",
        "--file",
        "--force",
        "--team-file",
    ):
        line = next(
            (
                shown
                for shown in done.stdout.splitlines()
                if shown.strip().startswith(name.split("=")[0]) or f", {name}" in shown
            ),
            None,
        )
        assert line is not None and len(line.split(None, 1)) == 2, f"{name} has no help text"


def test_export_help_explains_output(tmp_path):
    done = run_task("export", "--help", locks=tmp_path)
    assert done.returncode == 0 and "--output" in done.stdout and "environment.yml" in done.stdout


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["--cuda", "12.1", "--platform", "linux-32"],
            "gpuenv: --platform: unknown platform 'linux-32': use one of linux-64, linux-aarch64",
        ),
        (["--cuda", "12.1", "--backend", "pip"], "gpuenv: --backend 'pip' is not known"),
        (
            [
                "--cuda",
                "12.1",
                "--file",
                str(FIXTURES / "malformed" / "file-bad-pip" / "environment.yml"),
            ],
            "environment.yml:8: 'numpy>>1.26' is not a pip requirement",
        ),
        (
            [
                "--cuda",
                "12.1",
                "--team-file",
                str(FIXTURES / "malformed" / "team-bad-yaml" / "team.yml"),
            ],
            "team.yml:4: bad YAML",
        ),
    ],
)
def test_lock_user_mistakes_are_one_line_exit_2_and_write_nothing(args, fragment, tmp_path):
    locks = tmp_path / "locks"
    done = run_task("lock", *args, locks=locks)
    assert done.returncode == 2, done.stderr
    assert fragment in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1
    assert not locks.exists()


def test_export_into_a_missing_folder_names_it_and_makes_nothing(tmp_path):
    out = tmp_path / "missing" / "dir" / "environment.yml"
    done = run_task(
        "export",
        "--cuda",
        "12.1",
        "--torch",
        "2.5",
        "--python",
        "3.11",
        "-o",
        str(out),
        locks=tmp_path / "locks",
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        f"gpuenv: --output {out}: the folder {out.parent} does not exist: "
        "create it first, or give a path in an existing folder"
    )
    assert not (tmp_path / "missing").exists()


def test_export_without_a_lock_is_refused_unless_unpinned_is_asked(tmp_path):
    out = tmp_path / "environment.yml"
    options = ("--cuda", "12.1", "--torch", "2.5", "--python", "3.11", "--output", str(out))
    done = run_task("export", *options, locks=tmp_path / "locks")
    assert done.returncode == 2 and not out.exists(), done.stderr
    assert (
        done.stderr.count("\n") == 1
        and "the environment.yml would not be pinned" in done.stderr
        and "--unpinned" in done.stderr
    )
    assert run_task("export", *options, "--lock", locks=tmp_path / "locks").returncode == 2, (
        "no lock: no hashed form either"
    )
    done = run_task("export", *options, "--unpinned", locks=tmp_path / "locks")
    assert done.returncode == 0, done.stderr
    assert "NOT pinned" in done.stdout
    data = yaml.safe_load(out.read_text())
    pip = next(d["pip"] for d in data["dependencies"] if isinstance(d, dict))
    assert pip[0] == "--extra-index-url https://download.pytorch.org/whl/cu121"
    assert pip[1].startswith("torch==2.5.") and pip[1].endswith("+cu121")


@pytest.mark.network
def test_lock_cpu_stack_with_uv_from_the_wheelhouse_then_skip(pypi, cpu_wheelhouse, tmp_path):
    locks = tmp_path / "locks"
    args = [
        "lock",
        "--cuda",
        "cpu",
        "--torch",
        "2.13.0",
        "--python",
        "3.11",
        "--backend",
        "uv",
        "--wheelhouse",
        str(cpu_wheelhouse),
    ]
    started = time.monotonic()
    first = run_task(*args, locks=locks)
    cold_s = time.monotonic() - started
    assert first.returncode == 0, first.stderr
    assert "stack: torch2.13.0-cpu-py3.11" in first.stdout
    assert (
        "locking with uv for Python 3.11" in first.stdout
    )  # a progress step (plain lines when piped)
    assert "locked: " in first.stdout
    lock = locks / "torch2.13.0-cpu-py3.11" / "requirements.lock.txt"
    assert "torch==2.13.0+cpu" in lock.read_text()

    started = time.monotonic()
    second = run_task(*args, locks=locks)
    skip_s = time.monotonic() - started
    assert second.returncode == 0 and "unchanged: " in second.stdout
    print(f"\ninvoke lock (uv, CPU): {cold_s:.2f} s; unchanged: {skip_s:.2f} s")

    forced = run_task(*args, "--force", locks=locks)
    assert forced.returncode == 0 and "locked: " in forced.stdout


@pytest.mark.network
def test_lock_without_wheelhouse_names_the_unreachable_index_in_one_line(pypi, tmp_path):
    why_ok = subprocess.run(
        [
            sys.executable,
            "-c",
            "import urllib.request; "
            "urllib.request.urlopen('https://download.pytorch.org/whl/cpu/', timeout=10)",
        ],
        capture_output=True,
    )
    if why_ok.returncode == 0:
        pytest.skip(
            "download.pytorch.org answers here; this test is for hosts that cannot reach it"
        )
    done = run_task(
        "lock",
        "--cuda",
        "cpu",
        "--torch",
        "2.13.0",
        "--python",
        "3.11",
        "--backend",
        "uv",
        locks=tmp_path / "locks",
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (
        "could not reach https://download.pytorch.org/whl/cpu/" in done.stderr
        and "--wheelhouse DIR" in done.stderr
    )
