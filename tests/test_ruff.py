"""The whole repository is ruff-formatted and lint-clean (pyproject.toml's [tool.ruff]: line length
100, a complexity bound per function in place of a bare line wall), and the check can fail: a
planted badly formatted, unused-import or over-complex module is caught."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ruff() -> str:
    """The ruff of gpuenv's own lock (requirements/dev.lock.txt), beside this interpreter."""
    found = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(
            "ruff is not in this venv: it is in requirements/dev.lock.txt; "
            "run `GPUENV_SETUP_STEPS=venv bash scripts/setup.sh`"
        )
    return found


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([ruff(), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_repository_is_formatted():
    proc = run("format", "--check", ".")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_repository_is_lint_clean():
    proc = run("check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_checks_fail_on_a_planted_module(tmp_path):
    """The same configuration, on a copy of pyproject.toml beside one bad module per rule."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "unformatted.py").write_text("x = {  'a':1 }\n")
    (tmp_path / "unused.py").write_text("import os\n")
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(20))
    (tmp_path / "tangled.py").write_text(f"def tangled(x):\n{branches}\n    return -1\n")
    (tmp_path / "long.py").write_text(f"NAME = {'a' * 120!r}\n")

    formatted = run("format", "--check", "unformatted.py", cwd=tmp_path)
    assert formatted.returncode == 1 and "unformatted.py" in formatted.stdout

    linted = run("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert linted.returncode == 1
    assert "unused.py" in linted.stdout and "F401" in linted.stdout
    assert "tangled.py" in linted.stdout and "C901" in linted.stdout
    assert "long.py" in linted.stdout and "E501" in linted.stdout
