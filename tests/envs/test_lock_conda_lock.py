"""The conda-lock solve itself: runs where the conda-forge channel answers, skips (saying so) elsewhere."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuenv.errors import ToolError
from gpuenv.envs.locking import ensure_lock, is_cuda_wheel, read_conda_lock
from lockcases import TORCH_CPU, TORCH_CU121, unreachable

pytestmark = pytest.mark.network

CHANNEL_PROBE = "https://conda.anaconda.org/conda-forge/noarch/repodata.json"


@pytest.fixture(scope="module")
def conda_channel() -> None:
    why = unreachable(CHANNEL_PROBE)
    if why:
        pytest.skip(f"the conda channel conda-forge was unreachable, so conda-lock cannot solve here: {why}")
    why = unreachable("https://download.pytorch.org/whl/cu121/torch/")
    if why:
        pytest.skip(f"the PyTorch wheel index was unreachable, so conda-lock cannot solve the pip part: {why}")


def test_gpu_torch_stack_locks_cuda_build_with_conda_lock(conda_channel, pypi, locks_dir):
    result = ensure_lock(TORCH_CU121, backend="conda-lock", platforms=["linux-64"])
    assert result.files == locks_dir / TORCH_CU121.stack_id / "conda-lock.yml"
    packages = read_conda_lock(result.files)  # raises if an entry has no hash
    by_name = {(p.manager, p.name): p for p in packages}
    assert by_name[("conda", "python")].version.startswith("3.11.")
    assert by_name[("pip", "torch")].version == "2.5.1+cu121"
    assert any(p.manager == "pip" and is_cuda_wheel(p.name) for p in packages)
    lock = yaml.safe_load(result.files.read_text())
    assert lock["metadata"]["platforms"] == ["linux-64"]
    meta = json.loads((result.directory / "stack.json").read_text())
    assert meta["backend"] == "conda-lock" and "conda-lock" in meta["tool_versions"]

    again = ensure_lock(TORCH_CU121, backend="conda-lock", platforms=["linux-64"])
    assert again.skipped


def test_cpu_torch_stack_with_conda_lock_has_no_cuda(conda_channel, pypi, locks_dir):
    result = ensure_lock(TORCH_CPU, backend="conda-lock")
    packages = read_conda_lock(result.files)
    assert {p.name: p.version for p in packages if p.manager == "pip"}["torch"] == "2.13.0+cpu"
    assert not any(is_cuda_wheel(p.name) for p in packages)


def test_unreachable_channel_fails_fast_in_one_line_and_keeps_the_previous_lock(locks_dir):
    if unreachable(CHANNEL_PROBE) is None:
        pytest.skip("the conda-forge channel answers here; this test is for hosts that cannot reach it")
    previous = locks_dir / TORCH_CU121.stack_id
    previous.mkdir(parents=True)
    (previous / "conda-lock.yml").write_text("version: 1\npackage: []\n")
    with pytest.raises(ToolError) as err:
        ensure_lock(TORCH_CU121, backend="conda-lock")
    message = err.value.render()
    assert message.startswith("the conda channel https://conda.anaconda.org/conda-forge is unreachable")
    assert "--backend uv" in message and "\n" not in message
    assert (previous / "conda-lock.yml").read_text() == "version: 1\npackage: []\n"
    assert sorted(p.name for p in locks_dir.iterdir()) == [TORCH_CU121.stack_id]
