"""Real uv locks against PyPI (network): a CPU stack through the wheelhouse, a TensorFlow GPU stack.

PyPI is reachable from these machines; download.pytorch.org is not, so the CPU PyTorch build
comes from the wheelhouse (/opt/wheels), exactly as on an air-gapped server.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from lockcases import TF_CPU, TF_CUDA, TORCH_CPU

from gpuenv.envs.locking import ensure_lock, is_cuda_wheel, read_requirements_lock
from gpuenv.errors import ToolError

pytestmark = pytest.mark.network


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_cpu_torch_lock_from_wheelhouse_and_pypi_has_hashes_and_skips_when_unchanged(
    pypi, cpu_wheelhouse, locks_dir, tmp_path
):
    steps: list[str] = []
    team = tmp_path / "team.yml"
    team.write_text("pip:\n  - six==1.17.0\n")

    started = time.monotonic()
    first = ensure_lock(
        TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse, team_file=team, progress=steps.append
    )
    cold_s = time.monotonic() - started

    assert not first.skipped
    assert first.directory == locks_dir / "torch2.13.0-cpu-py3.11"
    assert first.files == first.directory / "requirements.lock.txt"
    text = first.files.read_text()
    pins = {
        p.name: p.version for p in read_requirements_lock(first.files)
    }  # raises if a pin has no hash
    assert pins["torch"] == "2.13.0+cpu"
    assert pins["six"] == "1.17.0"
    assert not any(is_cuda_wheel(name) for name in pins), "a CPU lock pulls no CUDA wheels"
    assert "nvidia-ml-py" in pins and "pytest" in pins, (
        "the validation suite's needs are locked too"
    )
    assert text.count("--hash=sha256:") >= len(pins)
    assert "download.pytorch.org" not in text, (
        "the wheelhouse held torch: the unreachable index is not named"
    )
    meta = json.loads((first.directory / "stack.json").read_text())
    assert meta["stack_id"] == TORCH_CPU.stack_id and meta["backend"] == "uv"
    assert meta["input_hash"] == first.input_hash and meta["platforms"] == ["linux-64"]
    assert meta["tool_versions"]["uv"][0].isdigit()
    assert (first.directory / "environment.yml").read_text().count("torch==2.13.0+cpu") == 1
    assert any("locking with uv for Python 3.11 on x86_64-manylinux_2_35" in s for s in steps)

    before = files_under(first.directory)
    started = time.monotonic()
    again = ensure_lock(TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse, team_file=team)
    skip_s = time.monotonic() - started
    assert again.skipped and again.input_hash == first.input_hash
    assert files_under(first.directory) == before
    print(f"\nuv CPU lock: {cold_s:.2f} s; unchanged inputs: {skip_s * 1000:.1f} ms")

    team.write_text("pip:\n  - six==1.16.0\n")
    changed = ensure_lock(TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse, team_file=team)
    assert not changed.skipped and changed.input_hash != first.input_hash
    assert {p.name: p.version for p in read_requirements_lock(changed.files)}["six"] == "1.16.0"

    forced = ensure_lock(
        TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse, team_file=team, force=True
    )
    assert not forced.skipped and forced.input_hash == changed.input_hash
    assert sorted(p.name for p in locks_dir.iterdir()) == [TORCH_CPU.stack_id], (
        "no temporary folders left"
    )


def test_failed_relock_leaves_the_previous_lock_intact(pypi, cpu_wheelhouse, locks_dir, tmp_path):
    team = tmp_path / "team.yml"
    team.write_text("pip: []\n")
    good = ensure_lock(TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse, team_file=team)
    before = files_under(good.directory)

    team.write_text("pip:\n  - six==0.0.0\n")  # no such release: uv finds no solution
    with pytest.raises(ToolError) as err:
        ensure_lock(TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse, team_file=team)
    message = err.value.render()
    assert "\n" not in message and "six==0.0.0" in message and "Traceback" not in message

    assert files_under(good.directory) == before
    assert sorted(p.name for p in locks_dir.iterdir()) == [TORCH_CPU.stack_id]


def test_interrupted_lock_leaves_the_previous_lock_intact(
    pypi, cpu_wheelhouse, locks_dir, tmp_path
):
    good = ensure_lock(TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse)
    before = files_under(good.directory)

    def interrupt(line: str) -> None:
        if line.startswith(
            "checking the lock"
        ):  # after uv wrote the new lock, before it is moved in
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ensure_lock(
            TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse, force=True, progress=interrupt
        )
    assert files_under(good.directory) == before
    assert sorted(p.name for p in locks_dir.iterdir()) == [TORCH_CPU.stack_id]


def test_unreachable_framework_index_is_a_one_line_error_naming_the_wheelhouse(
    pypi, locks_dir, tmp_path
):
    # .invalid never resolves (RFC 2606): the same failure as download.pytorch.org from this
    # machine.
    stack = dataclasses.replace(TORCH_CPU, index_url="https://download.pytorch.invalid/whl/cpu")
    empty = tmp_path / "wheels"
    empty.mkdir()
    with pytest.raises(ToolError) as err:
        ensure_lock(stack, backend="uv", wheelhouse=empty)
    message = err.value.render()
    assert "\n" not in message
    assert "could not reach https://download.pytorch.invalid/whl/cpu/" in message
    assert "pass --wheelhouse DIR" in message and "torch==2.13.0+cpu" in message
    assert not locks_dir.exists() or not any(locks_dir.iterdir())


def test_tensorflow_gpu_stack_locks_cuda_wheels_on_a_gpu_less_machine(pypi, locks_dir):
    result = ensure_lock(TF_CUDA, backend="uv")
    pins = {p.name: p.version for p in read_requirements_lock(result.files)}
    assert pins["tensorflow"] == "2.15.1"
    assert "nvidia-cudnn-cu12" in pins and "nvidia-cublas-cu12" in pins
    assert "tensorflow-cpu" not in pins


def test_gpu_stack_that_resolves_to_cpu_builds_is_an_error_not_a_lock(pypi, locks_dir):
    # A GPU stack whose requirement names the CPU package: the lock succeeds in uv, gpuenv refuses
    # it.
    wrong = dataclasses.replace(TF_CUDA, pip_requirement=TF_CPU.pip_requirement)
    with pytest.raises(ToolError) as err:
        ensure_lock(wrong, backend="uv")
    assert (
        "resolved to CPU-only builds: tensorflow-cpu is in the lock for linux-64"
        in err.value.render()
    )
    assert not (locks_dir / wrong.stack_id).exists()
    assert not any(locks_dir.iterdir())


def test_the_lock_installs_with_require_hashes(pypi, cpu_wheelhouse, locks_dir, tmp_path):
    """What the image build does: pip --require-hashes from the lock, the wheelhouse as
    --find-links."""
    import subprocess
    import sys
    import venv

    if sys.version_info[:2] != (3, 11):
        pytest.skip(
            "the lock is for Python 3.11 and the test runs on "
            f"{sys.version_info[0]}.{sys.version_info[1]}"
        )
    lock = ensure_lock(TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse)
    target = tmp_path / "venv"
    venv.create(target, with_pip=True)
    python = target / "bin" / "python"
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--require-hashes",
            "-r",
            str(lock.files),
            "--find-links",
            str(cpu_wheelhouse),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    version = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert version.stdout.strip() == "2.13.0+cpu"
