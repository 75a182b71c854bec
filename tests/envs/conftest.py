"""Fixtures of the envs tests: a private locks folder, and skips that name what was unreachable."""

from __future__ import annotations

from pathlib import Path

import pytest
from lockcases import CPU_TORCH_WHEEL, WHEELHOUSE, unreachable


@pytest.fixture
def locks_dir(tmp_path, monkeypatch) -> Path:
    """A private GPUENV_LOCKS_DIR: tests never touch envs/locks of the repository."""
    root = tmp_path / "locks"
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(root))
    return root


@pytest.fixture(scope="session")
def pypi() -> None:
    why = unreachable("https://pypi.org/simple/pip/")
    if why:
        pytest.skip(f"PyPI is unreachable: {why}")


@pytest.fixture(scope="session")
def cpu_wheelhouse() -> Path:
    if not CPU_TORCH_WHEEL.is_file():
        pytest.skip(
            f"the CPU PyTorch wheel {CPU_TORCH_WHEEL} is not on this machine (it is the only "
            "source of torch+cpu here)"
        )
    return WHEELHOUSE
