"""The installers an image build needs, supplied by the host so the base image needs no downloader.

Real `nvidia/cuda` and `ubuntu` base images ship no curl, wget or python3 (NVIDIA's own
Dockerfile purges curl after fetching its apt key). So the host puts into the build context:
  - uv: the binary of the pinned `uv` package gpuenv depends on (installs the uv lock);
  - micromamba: a checksum-verified static binary (installs the conda lock), cached on the host;
  - a standalone CPython (uv's managed python-build-standalone), only when the base image has no
    Python of the stack's version, cached on the host by version.
The pins and sources live in docker/tools.yaml. Downloads go through the host's network settings
(and --ca-cert); a download that fails is one line naming the URL and the setting that points
elsewhere.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

from gpuenv import PROJECT_ROOT
from gpuenv.envs import lockers
from gpuenv.errors import DataError, ToolError

TOOLS_FILE = PROJECT_ROOT / "docker" / "tools.yaml"
#: conda's platform names for the engine architectures `docker info` reports.
CONDA_PLATFORMS = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}
#: `uname -m` spellings of the same architectures (the SDK reports x86_64/aarch64).
_ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BuildTools:
    """Host files that go into the build context under tools/ (None: not needed for this build)."""

    uv: Path
    micromamba: Path | None = None
    python: Path | None = None  # root of a relocatable CPython tree (bin/, lib/)


def cache_dir() -> Path:
    """Where downloaded tools are kept between builds (GPUENV_CACHE_DIR, else XDG's cache)."""
    if os.environ.get("GPUENV_CACHE_DIR"):
        return Path(os.environ["GPUENV_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuenv"


def normalise_arch(arch: str) -> str:
    return _ARCH_ALIASES.get(arch, arch)


def load_tools(path: Path = TOOLS_FILE) -> dict[str, Any]:
    """docker/tools.yaml, checked for the keys this module reads."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise DataError(f"cannot read {path}: {err}", fix="restore docker/tools.yaml from the repository") from None
    mamba = (data or {}).get("micromamba") if isinstance(data, dict) else None
    if not isinstance(mamba, dict) or not all(k in mamba for k in ("version", "url", "mirror_env", "sha256", "source")):
        raise DataError(f"{path}: micromamba needs version, url, mirror_env, sha256 and source", fix="restore docker/tools.yaml")
    return data


# ---------------------------------------------------------------- micromamba


def micromamba_url(tools: dict[str, Any], platform: str, environ: dict[str, str] | None = None) -> str:
    """The download URL of the pinned micromamba, through the mirror setting when it is set."""
    mamba = tools["micromamba"]
    url = str(mamba["url"]).format(version=mamba["version"], platform=platform)
    mirror = (environ if environ is not None else os.environ).get(mamba["mirror_env"], "").rstrip("/")
    if mirror:
        url = mirror + url.split("/download", 1)[1]
    return url


def micromamba(platform: str, *, ca_cert: Path | None = None, progress: Progress | None = None) -> Path:
    """The pinned micromamba for `platform`, verified by sha256; downloaded once, then cached."""
    tools = load_tools()
    mamba = tools["micromamba"]
    sha = (mamba["sha256"] or {}).get(platform)
    if not sha:
        raise ToolError(
            f"no verified micromamba {mamba['version']} checksum for {platform} in {TOOLS_FILE}",
            fix="build conda-lock stacks on linux-64 engines, or use --backend uv",
        )
    cached = cache_dir() / "tools" / f"micromamba-{mamba['version']}-{platform}"
    if cached.is_file() and _sha256(cached) == sha:
        return cached
    url = micromamba_url(tools, platform)
    if progress:
        progress(f"downloading micromamba {mamba['version']} ({platform}) from {url}")
    cached.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".micromamba-", dir=cached.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            _download(url, out, ca_cert=ca_cert, fix=f"set {mamba['mirror_env']} to a mirror of the micromamba releases")
        got = _sha256(tmp)
        if got != sha:
            raise ToolError(
                f"micromamba from {url} has sha256 {got}, expected {sha}",
                fix=f"check {mamba['mirror_env']} (it must serve the official micromamba {mamba['version']} binary)",
            )
        tmp.chmod(0o755)
        os.replace(tmp, cached)
    finally:
        tmp.unlink(missing_ok=True)
    return cached


def _download(url: str, out: Any, *, ca_cert: Path | None, fix: str, timeout: float = 60) -> None:
    import ssl

    context = ssl.create_default_context(cafile=str(ca_cert)) if ca_cert else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        raise ToolError(f"cannot download {url} ({reason})", fix=fix) from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------- the whole set


def gather(
    *,
    backend: str,
    python: str,
    arch: str,
    base_has_python: bool,
    ca_cert: Path | None = None,
    progress: Progress | None = None,
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
    mamba = None
    if backend == "conda-lock":
        conda_platform = CONDA_PLATFORMS.get(arch)
        if conda_platform is None:
            raise ToolError(f"no micromamba build for the engine architecture {arch}", fix="use --backend uv")
        mamba = micromamba(conda_platform, ca_cert=ca_cert, progress=progress)
    standalone = None
    if backend != "conda-lock" and not base_has_python:
        # conda locks carry their own Python; the uv lock needs one of the stack's version.
        if progress:
            progress(f"the base image has no Python {python}: using uv's standalone CPython {python} ({arch})")
        standalone = lockers.install_standalone_python(python, arch, cache_dir() / "python", ca_cert=ca_cert)
    return BuildTools(uv=Path(lockers.uv_binary()), micromamba=mamba, python=standalone)
