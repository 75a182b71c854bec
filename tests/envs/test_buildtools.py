"""The installers the host supplies to the build (gpuenv/envs/buildtools.py), with real downloads.

The standalone Python's happy path needs github.com (python-build-standalone), which these
machines do not reach; the paths that guard the build do not: the mirror setting, the one-line
errors. A conda lock needs no installer at all (tests/images/test_conda_image.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpuenv.envs import buildtools, uv
from gpuenv.errors import ToolError


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("GPUENV_CACHE_DIR", str(root))
    return root


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_standalone_python_download_honours_the_mirror_setting(cache, monkeypatch):
    """uv fetches from UV_PYTHON_INSTALL_MIRROR, and its failure is one line naming that URL."""
    mirror = f"http://127.0.0.1:{_closed_port()}/pbs"
    monkeypatch.setenv("UV_PYTHON_INSTALL_MIRROR", mirror)
    with pytest.raises(ToolError) as caught:
        uv.install_standalone_python("3.11", "x86_64", cache / "python")
    text = caught.value.render()
    assert "\n" not in text
    assert f"from {mirror}/" in text and "cpython-3.11" in text
    assert "UV_PYTHON_INSTALL_MIRROR" in text


def test_a_base_with_python_needs_no_standalone_python_and_a_conda_lock_needs_no_installer(
    cache, monkeypatch
):
    import platform

    arch = buildtools.normalise_arch(platform.machine())
    tools = buildtools.gather(backend="uv", python="3.11", arch=arch, base_has_python=True)
    assert tools.uv.is_file() and tools.python is None and tools.conda_env is None
    monkeypatch.setenv(
        "UV_PYTHON_INSTALL_MIRROR", f"http://127.0.0.1:{_closed_port()}"
    )  # any download would fail
    tools = buildtools.gather(backend="conda-lock", python="3.11", arch=arch, base_has_python=False)
    assert (
        tools.python is None and tools.conda_env is None
    )  # the environment is staged later, from the lock
    assert not cache.exists(), "nothing was downloaded"


def test_an_engine_of_another_architecture_is_refused():
    with pytest.raises(ToolError, match="builds riscv64 images but this host is"):
        buildtools.gather(backend="uv", python="3.11", arch="riscv64", base_has_python=True)
