"""The conda path against the real conda-forge: runs where conda.anaconda.org answers, skips (naming
the host) elsewhere. Everything else of the conda path runs against the local test channel
(test_lock_conda.py)."""

from __future__ import annotations

import pytest
from lockcases import TORCH_CPU, unreachable

from gpuenv.envs.locking import ensure_lock, read_conda_lock

pytestmark = pytest.mark.network

CHANNEL_PROBE = "https://conda.anaconda.org/conda-forge/noarch/repodata.json"


def test_the_cpu_stack_locks_against_the_real_conda_forge(pypi, cpu_wheelhouse, locks_dir):
    why = unreachable(CHANNEL_PROBE)
    if why:
        pytest.skip(
            f"conda.anaconda.org is unreachable, so conda-forge cannot be solved here: {why}"
        )
    result = ensure_lock(TORCH_CPU, backend="conda-lock", wheelhouse=cpu_wheelhouse)
    packages = read_conda_lock(result.files)
    python = next(p for p in packages if p.manager == "conda" and p.name == "python")
    assert python.version.startswith("3.11.") and python.build != "gpuenv_standin_0"
    assert {p.name: p.version for p in packages if p.manager == "pip"}["torch"] == "2.13.0+cpu"


def test_an_unreachable_conda_forge_fails_fast_in_one_line_and_keeps_the_previous_lock(
    locks_dir, cpu_wheelhouse
):
    if unreachable(CHANNEL_PROBE) is None:
        pytest.skip("conda.anaconda.org answers here; this test is for hosts that cannot reach it")
    previous = locks_dir / TORCH_CPU.stack_id
    previous.mkdir(parents=True)
    (previous / "conda-lock.yml").write_text("version: 1\npackage: []\n")
    with pytest.raises(Exception) as err:
        ensure_lock(TORCH_CPU, backend="conda-lock", wheelhouse=cpu_wheelhouse)
    message = err.value.render()
    assert message.startswith(
        "cannot read the conda channel https://conda.anaconda.org/conda-forge"
    )
    assert "gpuenv.conda_mirrors" in message and "\n" not in message
    assert (previous / "conda-lock.yml").read_text() == "version: 1\npackage: []\n"
    assert sorted(p.name for p in locks_dir.iterdir()) == [TORCH_CPU.stack_id]
