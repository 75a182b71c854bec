"""The installers the host supplies to the build (gpuenv/envs/buildtools.py), with real downloads.

The happy paths need github.com (micromamba, python-build-standalone), which these machines do
not reach; the paths that guard the build do not: the pinned checksum, the mirror settings, the
one-line errors, the cache.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpuenv.envs import buildtools, lockers
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


def test_the_pins_are_sourced_and_micromamba_is_at_least_2_3_3():
    from packaging.version import Version

    tools = buildtools.load_tools()
    mamba = tools["micromamba"]
    # 2.1.1 to 2.3.2 write empty `depends` for lockfile installs (mamba#4070).
    assert Version(mamba["version"].split("-")[0]) >= Version("2.3.3")
    assert all(len(sha) == 64 for sha in mamba["sha256"].values())
    assert any("4070" in url for url in mamba["source"])
    assert tools["standalone_python"]["mirror_env"] == "UV_PYTHON_INSTALL_MIRROR"


def test_the_micromamba_mirror_replaces_the_release_host():
    tools = buildtools.load_tools()
    plain = buildtools.micromamba_url(tools, "linux-64", environ={})
    assert plain.startswith("https://github.com/mamba-org/micromamba-releases/releases/download/")
    mirrored = buildtools.micromamba_url(tools, "linux-64", environ={"GPUENV_MICROMAMBA_MIRROR": "https://mirror.example/mm/"})
    assert mirrored == f"https://mirror.example/mm/{tools['micromamba']['version']}/micromamba-linux-64"


def test_a_micromamba_with_the_wrong_checksum_is_refused_and_not_cached(cache, tmp_path, monkeypatch):
    version = buildtools.load_tools()["micromamba"]["version"]
    mirror = tmp_path / "mirror"
    (mirror / version).mkdir(parents=True)
    (mirror / version / "micromamba-linux-64").write_bytes(b"#!/bin/sh\necho not micromamba\n")
    monkeypatch.setenv("GPUENV_MICROMAMBA_MIRROR", mirror.as_uri())
    with pytest.raises(ToolError) as caught:
        buildtools.micromamba("linux-64")
    assert "has sha256" in caught.value.message and "expected 9496f94a" in caught.value.message
    assert "GPUENV_MICROMAMBA_MIRROR" in caught.value.fix
    assert not any((cache / "tools").glob("*")), "a file that failed its checksum stayed in the cache"


def test_an_unreachable_micromamba_source_is_one_line_naming_the_url_and_the_setting(cache, monkeypatch):
    url = f"http://127.0.0.1:{_closed_port()}/releases"
    monkeypatch.setenv("GPUENV_MICROMAMBA_MIRROR", url)
    with pytest.raises(ToolError) as caught:
        buildtools.micromamba("linux-64")
    text = caught.value.render()
    assert "\n" not in text
    assert f"{url}/" in text and "micromamba-linux-64" in text
    assert "GPUENV_MICROMAMBA_MIRROR" in text


def test_a_platform_without_a_pinned_checksum_is_refused_before_any_download(cache):
    with pytest.raises(ToolError) as caught:
        buildtools.micromamba("linux-ppc64le")
    assert "no verified micromamba" in caught.value.message and "linux-ppc64le" in caught.value.message


def test_the_standalone_python_download_honours_the_mirror_setting(cache, monkeypatch):
    """uv fetches from UV_PYTHON_INSTALL_MIRROR, and its failure is one line naming that URL."""
    mirror = f"http://127.0.0.1:{_closed_port()}/pbs"
    monkeypatch.setenv("UV_PYTHON_INSTALL_MIRROR", mirror)
    with pytest.raises(ToolError) as caught:
        lockers.install_standalone_python("3.11", "x86_64", cache / "python")
    text = caught.value.render()
    assert "\n" not in text
    assert f"from {mirror}/" in text and "cpython-3.11" in text
    assert "UV_PYTHON_INSTALL_MIRROR" in text


def test_a_base_with_python_needs_no_standalone_python_and_conda_locks_need_micromamba(cache, monkeypatch):
    import platform

    arch = buildtools.normalise_arch(platform.machine())
    tools = buildtools.gather(backend="uv", python="3.11", arch=arch, base_has_python=True)
    assert tools.uv.is_file() and tools.python is None and tools.micromamba is None
    monkeypatch.setenv("GPUENV_MICROMAMBA_MIRROR", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(ToolError, match="micromamba"):
        buildtools.gather(backend="conda-lock", python="3.11", arch=arch, base_has_python=False)


def test_an_engine_of_another_architecture_is_refused():
    with pytest.raises(ToolError, match="builds riscv64 images but this host is"):
        buildtools.gather(backend="uv", python="3.11", arch="riscv64", base_has_python=True)
