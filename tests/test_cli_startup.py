"""What a command's start loads: the few modules that keep `invoke --list` and `invoke resolve`
fast (benchmarks/cli_startup.py times them), and gpuenv's bytecode cached although Invoke turns
that off.

A real `invoke` process each time; the modules are read from its sys.modules when it ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Runs Invoke as `python -m invoke ARGS` does, then prints the gpuenv and validate modules loaded.
_MODULES_AFTER = """
import sys
import invoke.main

sys.argv = ["invoke", *sys.argv[1:]]
try:
    invoke.main.program.run()
finally:
    sys.stdout = sys.__stdout__
    print("MODULES", *sorted(n for n in sys.modules if n.split(".")[0] in ("gpuenv", "validate")))
"""


def modules_after(*args: str, tmp_path: Path) -> set[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "GPUENV_LOCKS_DIR": str(tmp_path / "locks"),
        "GPUENV_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-c", _MODULES_AFTER, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("MODULES"))
    return set(line.split()[1:])


def test_list_loads_the_task_layer_only(tmp_path):
    """`invoke --list` needs the tasks' signatures and the config files' reader: not the settings'
    checks (gpuenv.cli.config and its dataclasses), the resolver or the host."""
    loaded = modules_after("--list", tmp_path=tmp_path)
    assert "gpuenv.cli.configfiles" in loaded  # the project invoke.yaml was read
    heavy = {"gpuenv.cli.config", "gpuenv.cli.config_values", "gpuenv.stack"}
    assert not loaded & heavy, sorted(loaded & heavy)
    assert not {m for m in loaded if m.startswith(("gpuenv.compat", "validate.host"))}


def test_resolve_loads_no_other_task_s_machinery(tmp_path):
    """`invoke resolve` reads the settings, the data and the host: not locking, images, the
    engine, the fleet, doctor or the suite's report."""
    loaded = modules_after("resolve", "--cuda", "12.1", "--json", tmp_path=tmp_path)
    assert {"gpuenv.compat.resolve", "gpuenv.cli.config", "validate.host.nvml"} <= loaded
    others = (
        "gpuenv.engine",
        "gpuenv.images",
        "gpuenv.fleet",
        "gpuenv.envs.",
        "gpuenv.cli.doctor",
        "gpuenv.cli.fleet",
        "gpuenv.compat.drift",
        "gpuenv.compat.pypi",
        "validate.report",
        "validate.judge",
    )
    assert not {m for m in loaded if m.startswith(others)}
    # the wheels' reader comes with a wheelhouse only
    assert "gpuenv.compat.rules.wheels" not in loaded


def _pyc_written(tmp_path: Path, **env_change: str | None) -> list[str]:
    """The .pyc files of this checkout that `invoke --list` writes (under PYTHONPYCACHEPREFIX)."""
    prefix = tmp_path / "pycache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": str(prefix)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for key, value in env_change.items():
        if value is not None:
            env[key] = value
    subprocess.run(
        [sys.executable, "-m", "invoke", "--list"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    mine = prefix / ROOT.relative_to(ROOT.anchor)
    return sorted(p.relative_to(mine).as_posix() for p in mine.rglob("*.pyc"))


def test_invoke_caches_gpuenv_bytecode_but_not_tasks_py(tmp_path):
    """Invoke turns off writing .pyc files (for tasks.py's sake); gpuenv's modules are cached
    anyway, else each command compiles them again."""
    written = _pyc_written(tmp_path)
    assert any(p.startswith("gpuenv/cli/compat.") for p in written), written
    assert not any(p.startswith("tasks.") for p in written), written


def test_pythondontwritebytecode_still_turns_caching_off(tmp_path):
    assert _pyc_written(tmp_path, PYTHONDONTWRITEBYTECODE="1") == []


def test_the_host_reader_loads_the_health_readers_only_to_read_a_gpu():
    """`invoke resolve` on a host without NVIDIA GPUs imports the NVML reader to find none: the
    health readings' module (a dataclass and its readers) comes with the first GPU read, and a
    GpuInfo made without them still holds unread ones."""
    code = (
        "import sys, validate.host.nvml as n; before = 'validate.host.nvml_health' in sys.modules;"
        "gpu = n.GpuInfo(0, 'g', 'u', '0000:01:00.0', '9.0', None, None);"
        "from validate.host.nvml_health import HealthReadings;"
        "print(before, gpu.health == HealthReadings(), gpu.health is not n.GpuInfo(0, 'g', 'u', "
        "'b', None, None, None).health)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]
