"""invoke install (a lock into a folder, no Docker) and Invoke's --dry (print the plan, change
nothing)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from teamcases import CPU_STACK_ARGS, WHEELHOUSE, run_invoke


def siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------- --dry


def test_dry_export_writes_nothing(tmp_path):
    out = tmp_path / "environment.yml"
    proc = run_invoke("--dry", "export", *CPU_STACK_ARGS, "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "nothing written (--dry)" in proc.stdout
    assert not out.exists()


def test_dry_lock_prints_the_spec_and_makes_no_lock(tmp_path):
    proc = run_invoke(
        "--dry", "lock", *CPU_STACK_ARGS, "--backend", "uv", env={"GPUENV_LOCKS_DIR": str(tmp_path)}
    )
    assert proc.returncode == 0, proc.stderr
    assert "stack: torch2.13.0-cpu-py3.11" in proc.stdout
    assert "would be (re)locked" in proc.stdout and "torch==2.13.0+cpu" in proc.stdout
    assert list(tmp_path.iterdir()) == []


def test_dry_build_prints_stack_build_arguments_and_dockerfile(tmp_path):
    proc = run_invoke(
        "--dry",
        "build",
        *CPU_STACK_ARGS,
        "--base-image",
        "local/base:1",
        env={"GPUENV_LOCKS_DIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "lock: none in" in out and "it would be locked first" in out
    assert "  BASE_IMAGE=local/base:1" in out and "  PYTHON_VERSION=3.11" in out
    assert re.search(r"^  FROM \$\{BASE_IMAGE\} AS install$", out, re.M), (
        "the Dockerfile is printed"
    )
    assert out.rstrip().endswith("nothing was built (--dry)")
    assert list(tmp_path.iterdir()) == []


def test_dry_run_and_validate_run_nothing(tmp_path):
    ref = "127.0.0.1:1/gpuenv/x@sha256:" + "a" * 64  # nothing listens there: a pull would fail
    proc = run_invoke("--dry", "run", "--image", ref, "--", "touch", "made", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"would run touch made in {ref}" in proc.stdout and not (tmp_path / "made").exists()
    proc = run_invoke("--dry", "validate", "--image", ref, cwd=tmp_path)
    assert proc.returncode == 0 and "nothing run (--dry)" in proc.stdout, proc.stderr
    proc = run_invoke(
        "--dry", "validate", "--local", "--json", str(tmp_path / "r.json"), cwd=tmp_path
    )
    assert (
        proc.returncode == 0
        and "-m validate --json" in proc.stdout
        and not (tmp_path / "r.json").exists()
    )


def test_dry_push_names_what_it_would_push(team_image, cpu_stack, locks_dir, monkeypatch):
    """The names come from the image push would send (its inputs hash), which must exist: push never
    builds."""
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images

    proc = run_invoke(
        "--dry",
        "push",
        *CPU_STACK_ARGS,
        "-r",
        "127.0.0.1:1",
        env={"GPUENV_LOCKS_DIR": str(locks_dir)},
    )
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(locks_dir))
    chosen = Engine.local().image_info(images.image_for_stack(Engine.local(), cpu_stack))
    repo = "127.0.0.1:1/gpuenv/torch2.13.0-cpu-py3.11"
    assert (
        f"would push: {repo}:{chosen.labels[images.INPUTS_LABEL][:12]}, {repo}:latest"
        in proc.stdout
    )
    assert "nothing pushed (--dry)" in proc.stdout


# ---------------------------------------------------------------- install


def install(
    prefix: Path, locks_dir: Path, *extra: str, timeout: float = 1200, env: dict | None = None
) -> subprocess.CompletedProcess:
    return run_invoke(
        "install",
        *CPU_STACK_ARGS,
        "--prefix",
        str(prefix),
        *extra,
        env={"GPUENV_LOCKS_DIR": str(locks_dir), **(env or {})},
        timeout=timeout,
    )


@pytest.mark.network
def test_install_then_validate_from_the_prefix_then_nothing_to_do(cpu_uv_lock, locks_dir, tmp_path):
    prefix = tmp_path / "envs" / "torch-cpu"
    dry = run_invoke(
        "--dry",
        "install",
        *CPU_STACK_ARGS,
        "--prefix",
        str(prefix),
        env={"GPUENV_LOCKS_DIR": str(locks_dir)},
    )
    assert dry.returncode == 0 and "would be (re)installed" in dry.stdout and not prefix.exists(), (
        dry.stdout + dry.stderr
    )

    proc = install(prefix, locks_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "\x1b" not in proc.stdout
    assert f"installed torch2.13.0-cpu-py3.11 into {prefix}" in proc.stdout
    assert siblings(prefix.parent) == ["torch-cpu"], "nothing left beside the prefix"
    record = json.loads((prefix / "gpuenv-prefix.json").read_text())
    assert record["lock_sha256"] == cpu_uv_lock.sha256 and record["lock_backend"] == "uv"

    python = prefix / "bin" / "python"
    done = subprocess.run(
        [str(python), "-c", "import torch, sys; print(torch.__version__, sys.prefix)"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.13.0+cpu", str(prefix)], (
        "built beside, renamed into place, and it still knows where it is"
    )

    # The suite, from the prefix, on this (GPU-less) host: the stack file says CPU, so it is ready.
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "GPUENV_STACK_FILE"}
    done = subprocess.run(
        [str(python), "-m", "validate", "--quick", "--json", str(report)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert json.loads(report.read_text())

    # Unchanged lock: nothing happens, the prefix is the same folder.
    inode = prefix.stat().st_ino
    again = install(prefix, locks_dir, timeout=120)
    assert again.returncode == 0, again.stderr
    assert f"unchanged: {prefix} holds lock {cpu_uv_lock.sha256[:12]}" in again.stdout
    assert prefix.stat().st_ino == inode

    # A lock that fails to install (a hash that does not match) leaves the prefix as it was.
    broken = tmp_path / "broken-locks"
    shutil.copytree(cpu_uv_lock.directory, broken / cpu_uv_lock.directory.name)
    lock_file = broken / cpu_uv_lock.directory.name / "requirements.lock.txt"
    text = lock_file.read_text()
    first_hash = re.search(r"--hash=sha256:([0-9a-f]{64})", text).group(1)
    lock_file.write_text(text.replace(first_hash, "0" * 64))
    failed = install(prefix, broken, "--wheelhouse", str(WHEELHOUSE))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stderr and failed.stderr.strip().count("\n") == 0
    assert (
        json.loads((prefix / "gpuenv-prefix.json").read_text())["lock_sha256"] == cpu_uv_lock.sha256
    )
    assert prefix.stat().st_ino == inode and siblings(prefix.parent) == ["torch-cpu"]


def test_install_refuses_a_folder_it_did_not_make(cpu_uv_lock, locks_dir, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep me")
    proc = install(tmp_path / "data", locks_dir, timeout=60)
    assert proc.returncode == 2
    assert "is a folder gpuenv did not make" in proc.stderr
    assert (tmp_path / "data" / "precious.txt").read_text() == "keep me"


def test_install_without_prefix_or_lock_is_one_line(tmp_path):
    proc = run_invoke("install", *CPU_STACK_ARGS, env={"GPUENV_LOCKS_DIR": str(tmp_path)})
    assert proc.returncode == 2 and "--prefix is missing" in proc.stderr
    proc = run_invoke(
        "install",
        *CPU_STACK_ARGS,
        "--prefix",
        str(tmp_path / "p"),
        env={"GPUENV_LOCKS_DIR": str(tmp_path)},
    )
    assert (
        proc.returncode == 1 and "run invoke lock" in proc.stderr and "Traceback" not in proc.stderr
    )


def test_offline_install_names_every_missing_wheel_before_installing(
    cpu_uv_lock, locks_dir, tmp_path
):
    """--offline without every wheel: one line naming each missing one, before anything is made.
    (The whole recipe, offline install included, is tests/team/test_airgapped_recipe.py.)"""
    partial = tmp_path / "partial"
    partial.mkdir()
    for wheel in WHEELHOUSE.glob("torch-2.13.0+cpu-*.whl"):
        (partial / wheel.name).symlink_to(wheel)
    proc = install(
        tmp_path / "other",
        locks_dir,
        "--wheelhouse",
        str(partial),
        "--offline",
        "--force",
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and line.startswith(
        f"gpuenv: --offline: 16 of the lock's 17 wheels are not in {partial}: "
    )
    assert "numpy==" in line and "torch==" not in line
    assert not (tmp_path / "other").exists()
    assert "installing" not in proc.stdout
