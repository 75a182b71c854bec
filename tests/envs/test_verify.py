"""`invoke verify --prefix`: a fresh prefix of the conda path and of the uv path is intact, and each
of the five changes of issue 36 (an edited file, a removed file, an added module in
site-packages, an extra pip package, a changed entry point) fails it, naming the file.

Each prefix is installed once per module (the local test channel and the STAND-IN torch wheel,
about 20 s each); each change is made in it and undone after its case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from verifycases import CONDA_TAMPERS, TAMPERS, named, tampered

ROOT = Path(__file__).resolve().parents[2]


def _install(backend: str, folder: Path, channel: Path, wheels: Path, stack):
    import os

    from gpuenv.envs import install
    from gpuenv.envs.locking import ensure_lock

    os.environ["GPUENV_LOCKS_DIR"] = str(folder / "locks")
    try:
        team = folder / "team.yml"
        team.write_text(
            yaml.safe_dump(
                {"conda": ["gpuenv-probe", "gpuenv-hello"] if backend != "uv" else [], "pip": []}
            )
        )
        mirrors = {"conda-forge": channel.as_uri()}
        lock = ensure_lock(
            stack, backend=backend, wheelhouse=wheels, team_file=team, mirrors=mirrors
        )
        plan = install.plan_install(
            stack, lock.directory, folder / "prefix", wheelhouse=wheels, mirrors=mirrors
        )
        install.install(plan, say=lambda _l: None, output=lambda _l: None)
    finally:
        os.environ.pop("GPUENV_LOCKS_DIR", None)
    return folder / "prefix"


def _made(
    backend: str, tmp_path_factory, conda_channel, standin_wheels, cpu_stack
) -> tuple[str, Path]:
    folder = tmp_path_factory.mktemp(f"verify-{backend}")
    return backend, _install(backend, folder, conda_channel, standin_wheels, cpu_stack)


@pytest.fixture(scope="module")
def conda_prefix(tmp_path_factory, conda_channel, standin_wheels, cpu_stack, pypi):
    return _made("conda-lock", tmp_path_factory, conda_channel, standin_wheels, cpu_stack)


@pytest.fixture(scope="module")
def uv_prefix(tmp_path_factory, conda_channel, standin_wheels, cpu_stack, pypi):
    return _made("uv", tmp_path_factory, conda_channel, standin_wheels, cpu_stack)


@pytest.fixture(params=["conda-lock", "uv"])
def prefix(request):
    """Each path's prefix, each installed once per module."""
    return request.getfixturevalue("conda_prefix" if request.param == "conda-lock" else "uv_prefix")


def _verify(path: Path):
    from gpuenv.envs.verify import verify_prefix

    return verify_prefix(path, say=lambda _l: None)


def test_a_fresh_prefix_is_intact_and_compared_with_its_lock(prefix):
    backend, path = prefix
    verdict = _verify(path)
    assert verdict.ok, [p.line() for p in verdict.problems]
    assert verdict.files_hashed > 100 and "sha256" in verdict.compared, verdict.compared
    if backend == "conda-lock":
        assert {p.name for p in verdict.packages if p.manager == "conda"} >= {
            "python",
            "gpuenv-hello",
            "gpuenv-probe",
        }


#: Each change on each prefix it applies to: a uv prefix holds no conda package.
CHANGES = [("conda_prefix", t) for t in TAMPERS + CONDA_TAMPERS] + [
    ("uv_prefix", t) for t in TAMPERS
]


@pytest.mark.parametrize(
    "which, tamper", CHANGES, ids=[f"{w} {t.name} {t.path.rsplit('/', 1)[-1]}" for w, t in CHANGES]
)
def test_each_change_fails_the_prefix_naming_the_file(request, which, tamper, tmp_path):
    _backend, path = request.getfixturevalue(which)
    with tampered(path, tamper):
        verdict = _verify(path)
    assert not verdict.ok and named(verdict, tamper), [p.line() for p in verdict.problems]


def test_the_task_exits_1_names_the_file_and_writes_the_json(uv_prefix, tmp_path):
    """On the uv prefix: the task's output is the same for both paths."""
    _backend, path = uv_prefix
    report = tmp_path / "verdict.json"
    with tampered(path, TAMPERS[2]):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "invoke",
                "verify",
                "--prefix",
                str(path),
                "--json",
                str(report),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        f"unowned: {TAMPERS[2].path}" in proc.stdout and "NOT INTACT" in proc.stderr + proc.stdout
    )
    data = json.loads(report.read_text())
    assert data["ok"] is False and [p["path"] for p in data["problems"]] == [TAMPERS[2].path]
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "verify", "--prefix", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "intact:" in proc.stdout, proc.stdout + proc.stderr


def _suite_row(prefix: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """The suite's "environment intact" row alone, run by the prefix's own Python."""
    checks = next(prefix.glob("lib/python3*/site-packages/validate/checks"))
    return subprocess.run(
        [
            str(prefix / "bin" / "python"),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            str(checks / "test_01_environment.py"),
            "-k",
            "environment_intact",
            "-q",
            *extra,
        ],
        cwd=prefix.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_the_suite_row_passes_a_fresh_prefix_and_fails_a_changed_one(uv_prefix, tmp_path, quick):
    """On the uv prefix: the row is the judge the conda prefix's tests above already prove."""
    _backend, path = uv_prefix
    extra = ("--quick",) if quick else ()
    proc = _suite_row(path, *extra)
    assert (
        proc.returncode == 0 and "1 passed" in proc.stdout and "environment intact" in proc.stdout
    ), proc.stdout[-3000:]
    if quick:
        assert "checked by size only" in proc.stdout, proc.stdout[-3000:]
    with tampered(path, TAMPERS[0]):
        proc = _suite_row(path, *extra)
    assert (
        proc.returncode != 0
        and "altered: lib/python3.11/site-packages/packaging/version.py" in proc.stdout
    ), proc.stdout[-3000:]
