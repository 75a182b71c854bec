"""invoke export's library side: an environment.yml for conda/mamba, pinned from the lock when there
is one."""

from __future__ import annotations

import pytest
import yaml
from lockcases import FIXTURES, TORCH_CPU, TORCH_CU121

from gpuenv.envs.export import export_environment
from gpuenv.envs.locking import ensure_lock, read_requirements_lock
from gpuenv.errors import BadInput


def pip_section(data: dict) -> list[str]:
    return next(d["pip"] for d in data["dependencies"] if isinstance(d, dict))


def test_export_without_lock_is_the_spec_with_the_index_in_the_pip_section(locks_dir, tmp_path):
    out = tmp_path / "shared" / "environment.yml"
    out.parent.mkdir()  # export names a missing folder instead of making it
    result = export_environment(
        TORCH_CU121, out, team_file=FIXTURES / "team-basic" / "team.yml", unpinned=True
    )
    assert result.lock is None and result.path == out
    data = yaml.safe_load(out.read_text())
    assert data["channels"] == ["conda-forge", "nodefaults"]
    assert data["dependencies"][:3] == ["python=3.11", "pip", "numpy >=1.26,<3"]
    assert pip_section(data)[0] == "--extra-index-url https://download.pytorch.org/whl/cu121"
    assert "torch==2.5.1+cu121" in pip_section(data)
    assert sorted(p.name for p in out.parent.iterdir()) == ["environment.yml"], (
        "no temporary file left"
    )


def test_export_refuses_an_unpinned_file_unless_asked(locks_dir, tmp_path):
    out = tmp_path / "environment.yml"
    with pytest.raises(BadInput) as err:
        export_environment(TORCH_CU121, out)
    assert "has no lock in" in err.value.render() and "--unpinned" in err.value.render()
    assert not out.exists(), "nothing written"


def test_export_refuses_a_folder_as_output(locks_dir, tmp_path):
    with pytest.raises(BadInput, match="is a folder"):
        export_environment(TORCH_CU121, tmp_path)


@pytest.mark.network
def test_export_is_pinned_from_the_uv_lock_and_locks_again_as_a_received_file(
    pypi, cpu_wheelhouse, locks_dir, tmp_path, monkeypatch
):
    lock = ensure_lock(TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse)
    pins = {f"{p.name}=={p.version}" for p in read_requirements_lock(lock.files)}

    out = tmp_path / "environment.yml"
    result = export_environment(TORCH_CPU, out)
    assert result.lock == lock.files
    data = yaml.safe_load(out.read_text())
    pip = pip_section(data)
    assert pip[0] == "--extra-index-url https://download.pytorch.org/whl/cpu"
    assert set(pip[1:]) == pins and "torch==2.13.0+cpu" in pip
    assert data["dependencies"][:2] == ["python=3.11", "pip"]

    # a colleague receives it and locks it (`invoke lock --file environment.yml`), here into another
    # folder
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path / "colleague-locks"))
    again = ensure_lock(TORCH_CPU, backend="uv", wheelhouse=cpu_wheelhouse, env_file=out)
    assert {f"{p.name}=={p.version}" for p in read_requirements_lock(again.files)} == pins
