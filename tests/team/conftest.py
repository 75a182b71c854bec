"""Fixtures for the team-workflow tests: a real registry on loopback and one small CPU image.

The image is PyTorch CPU (from the wheelhouse /opt/wheels) locked with uv, on the local test base
image: the smallest real gpuenv image. It is built once per session through `gpuenv build` from a
wheelhouse holding every locked wheel (no network in the build); an image an earlier session built
from the same inputs is reused (uv locks and gpuenv images are reproducible: the build says
"unchanged: reused"). An image this session built is removed at the end unless
GPUENV_TEST_KEEP_IMAGES=1.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import dockercases
import pytest
from childdeath import die_with
from outsidecauses import cannot_lock, skip_only_if_unreachable
from teamcases import WHEELHOUSE, free_port, run_gpuenv, team_build_args

REGISTRY_BINARY = os.environ.get("GPUENV_TEST_REGISTRY_BINARY", "docker-registry")


@dataclass(frozen=True)
class Registry:
    host: str  # 127.0.0.1:PORT
    root: Path


def _start_registry(tmp: Path, *, readonly: bool = False):
    binary = shutil.which(REGISTRY_BINARY) or (
        REGISTRY_BINARY if Path(REGISTRY_BINARY).is_file() else None
    )
    if binary is None:
        pytest.skip(
            f"no {REGISTRY_BINARY} binary (Debian package docker-registry: run "
            "scripts/install-test-servers.sh as root)"
        )
    port = free_port()
    storage = tmp / "storage"
    storage.mkdir(parents=True)
    maintenance = "\n  maintenance:\n    readonly:\n      enabled: true" if readonly else ""
    config = tmp / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: "
        f"{storage}\n  delete:\n    enabled: true{maintenance}\nhttp:\n  addr: 127.0.0.1:{port}\n"
    )
    log = open(tmp / "registry.log", "w")
    proc = subprocess.Popen(
        [binary, "serve", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with(os.getpid()),  # a killed pytest leaves no registry behind
    )
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1):
                return proc, log, Registry(f"127.0.0.1:{port}", storage)
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    log.close()
    pytest.fail(f"the registry did not start: {(tmp / 'registry.log').read_text()[-800:]}")


def _stop(proc, log) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    """Debian's docker-registry serving on 127.0.0.1:<free port>, storage in a temporary folder."""
    proc, log, reg = _start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    _stop(proc, log)


@pytest.fixture
def readonly_registry(tmp_path):
    """A registry that refuses every push (read-only maintenance mode)."""
    proc, log, reg = _start_registry(tmp_path / "ro", readonly=True)
    yield reg
    _stop(proc, log)


@pytest.fixture(scope="session")
def locks_dir(tmp_path_factory):
    """This session's lock folder; tasks get it as GPUENV_LOCKS_DIR, never envs/locks."""
    return tmp_path_factory.mktemp("team-locks")


@dataclass(frozen=True)
class CpuLock:
    directory: Path
    sha256: str


@pytest.fixture(scope="session")
def cpu_uv_lock(locks_dir, cpu_stack) -> CpuLock:
    """The uv lock of the CPU torch stack (torch from the wheelhouse, the rest from PyPI)."""
    from gpuenv.envs.locking import ensure_lock
    from gpuenv.errors import GpuenvError
    from gpuenv.images import plan as images

    if not any(WHEELHOUSE.glob("torch-2.13.0+cpu-*.whl")):
        pytest.skip(f"no torch-2.13.0+cpu wheel in {WHEELHOUSE}")
    old = os.environ.get("GPUENV_LOCKS_DIR")
    os.environ["GPUENV_LOCKS_DIR"] = str(
        locks_dir
    )  # only for this call: other test folders set their own
    try:
        result = ensure_lock(cpu_stack, backend="uv", wheelhouse=WHEELHOUSE)
    except GpuenvError as err:
        cannot_lock(err)
    finally:
        if old is None:
            os.environ.pop("GPUENV_LOCKS_DIR", None)
        else:
            os.environ["GPUENV_LOCKS_DIR"] = old
    return CpuLock(result.directory, images.read_lock(result.directory).sha256)


@pytest.fixture(scope="session")
def complete_wheelhouse(cpu_uv_lock, tmp_path_factory) -> Path:
    """Every wheel of the CPU lock in one folder (pip download, as the README's air-gapped
    recipe)."""
    import shutil as _shutil

    python = _shutil.which("python3.11")
    if python is None:
        pytest.skip("no python3.11 on PATH to download the lock's wheels for CPython 3.11")
    folder = tmp_path_factory.mktemp("wheelhouse")
    proc = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--require-hashes",
            "--dest",
            str(folder),
            "--find-links",
            str(WHEELHOUSE),
            "-r",
            str(cpu_uv_lock.directory / "requirements.lock.txt"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        skip_only_if_unreachable(
            "downloading the lock's wheels with pip --require-hashes", proc.stderr + proc.stdout
        )
    return folder


@dataclass(frozen=True)
class TeamImage:
    id: str
    tag: str  # gpuenv/<stack>:<inputs-hash>
    built_output: str


@pytest.fixture(scope="session")
def team_image(base_image, cpu_uv_lock, cpu_stack, locks_dir, complete_wheelhouse) -> TeamImage:
    """Built from a wheelhouse that holds every locked wheel: no index, no network in the build."""
    from gpuenv.engine import Engine

    engine = Engine.local()
    # Always through `gpuenv build`: the same inputs give the same image, so when an earlier session
    # left it, the build says "unchanged: reused" in seconds (an image found by its tag alone could
    # be one built otherwise, by another session on a shared engine).
    proc = run_gpuenv(
        *team_build_args(base_image, complete_wheelhouse),
        env={"GPUENV_LOCKS_DIR": str(locks_dir)},
        timeout=1800,
    )
    assert proc.returncode == 0, (
        f"invoke build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    tag = dockercases.stack_image_tag(cpu_stack, cpu_uv_lock.sha256)
    info = engine.image_info(tag)
    assert info is not None, f"{tag} is missing after a successful build"
    yield TeamImage(info.id, tag, proc.stdout)
    if "unchanged: reused" not in proc.stdout and not os.environ.get("GPUENV_TEST_KEEP_IMAGES"):
        dockercases.remove_image(engine, info.id)
        dockercases.remove_build_cache(info.labels)  # the install stage a classic build kept
