"""The installers an image build needs, supplied by the host so the base image needs no downloader.

Real `nvidia/cuda` and `ubuntu` base images ship no curl, wget or python3 (NVIDIA's own
Dockerfile purges curl after fetching its apt key). So the host puts into the build context:
  - uv: the binary of the pinned `uv` package gpuenv depends on (installs the uv lock);
  - a standalone CPython (uv's managed python-build-standalone), only for a uv lock when the base
    image has no Python of the stack's version, cached on the host by version.
A conda lock needs no installer in the image at all: its environment is installed on the host by
py-rattler into a staging folder for the image's prefix (gpuenv.envs.condalock) and copied in.
docker/tools.yaml documents the sources for people (no code reads it). A download that fails is
one line naming the URL and the setting that points elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpuenv.datacache import cache_dir
from gpuenv.envs import uv
from gpuenv.errors import ToolError
from gpuenv.progress import Say

if TYPE_CHECKING:
    from gpuenv.envs.fromhost import PrefixForImage

#: conda's platform names for the engine architectures `docker info` reports.
CONDA_PLATFORMS = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}
#: `uname -m` spellings of the same architectures (the SDK reports x86_64/aarch64).
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True)
class BuildTools:
    """Host files that go into the build context under tools/ (None: not needed for this build)."""

    uv: Path
    python: Path | None = None  # root of a relocatable CPython tree (bin/, lib/)
    #: a conda lock's environment, installed on the host for the image's /opt/gpuenv/env (staged,
    #: or read from a prefix `invoke install` made of the lock)
    conda_env: Path | PrefixForImage | None = None


def normalise_arch(arch: str) -> str:
    return _ARCH_ALIASES.get(arch, arch)


# ---------------------------------------------------------------- the whole set


def gather(
    *,
    backend: str,
    python: str,
    arch: str,
    base_has_python: bool,
    ca_cert: Path | None = None,
    progress: Say | None = None,
) -> BuildTools:
    """Collect what the install stage of one build needs, fetching into the cache what is missing.

    `arch` is the engine's architecture (the image's); the host's uv binary must match it.
    """
    import platform as host_platform

    arch = normalise_arch(arch)
    host_arch = normalise_arch(host_platform.machine())
    if arch != host_arch:
        raise ToolError(
            f"the Docker engine builds {arch} images but this host is {host_arch}",
            fix="run invoke build on a host of the engine's architecture",
        )
    if backend == "conda-lock" and arch not in CONDA_PLATFORMS:
        raise ToolError(
            f"gpuenv locks no conda platform for the engine architecture {arch}",
            fix="build on an x86_64 or aarch64 engine",
        )
    standalone = None
    if backend != "conda-lock" and not base_has_python:
        # conda locks carry their own Python; the uv lock needs one of the stack's version.
        if progress:
            progress(
                f"the base image has no Python {python}: using uv's standalone CPython {python} "
                f"({arch})"
            )
        standalone = uv.install_standalone_python(
            python, arch, cache_dir() / "python", ca_cert=ca_cert
        )
    return BuildTools(uv=Path(uv.uv_binary()), python=standalone)
