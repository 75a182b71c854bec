"""Fixtures for the image tests: a real Docker engine, a local base image, one real CPU image.

No registry is reachable from CI, so the base image is a debootstrapped Debian bookworm
(scripts/make-test-base-image.sh), cached by name. The CPU image (PyTorch CPU from the wheelhouse
plus TensorFlow CPU from PyPI) is built once per session through `invoke build` and removed at the
end, and so are the two STAND-IN images of the conda and the uv path (standin_conda_image,
standin_uv_image), which the conda, uv and verify tests share; every other image or container a
test makes is removed by that test.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import dockercases
import pytest
import yaml
from imagecases import (
    CA_MARKER,
    FIXTURES,
    HOST_CA_BUNDLE,
    ROOT,
    WHEELHOUSE,
    build_args,
    download_locked_wheels,
    run_task,
)
from outsidecauses import cannot_lock, skip_only_if_unreachable


@pytest.fixture(scope="session")
def locks_root(tmp_path_factory):
    """Locks go to a temporary folder (GPUENV_LOCKS_DIR), never into the repository's envs/locks."""
    root = tmp_path_factory.mktemp("locks")
    old = os.environ.get("GPUENV_LOCKS_DIR")
    os.environ["GPUENV_LOCKS_DIR"] = str(root)
    yield root
    if old is None:
        os.environ.pop("GPUENV_LOCKS_DIR", None)
    else:
        os.environ["GPUENV_LOCKS_DIR"] = old


@dataclass(frozen=True)
class Lock:
    directory: Path
    sha256: str


@pytest.fixture(scope="session")
def cpu_lock(locks_root, cpu_stack) -> Lock:
    """The uv lock of the CPU stack with TensorFlow CPU added (fixtures/environment.yml)."""
    from gpuenv.envs.locking import ensure_lock
    from gpuenv.errors import GpuenvError
    from gpuenv.images import plan as images

    if not any(WHEELHOUSE.glob("torch-2.13.0+cpu-*.whl")):
        pytest.skip(
            f"no torch-2.13.0+cpu wheel in {WHEELHOUSE} (the CPU image installs it from there)"
        )
    try:
        result = ensure_lock(
            cpu_stack, backend="uv", env_file=FIXTURES / "environment.yml", wheelhouse=WHEELHOUSE
        )
    except GpuenvError as err:
        cannot_lock(err)
    return Lock(result.directory, images.read_lock(result.directory).sha256)


@pytest.fixture(scope="session")
def ca_bundle(tmp_path_factory) -> Path:
    """The host's CA bundle (HTTPS to PyPI from inside the build needs it) plus a marker line."""
    if not HOST_CA_BUNDLE.is_file():
        pytest.skip(f"no system CA bundle at {HOST_CA_BUNDLE}")
    path = tmp_path_factory.mktemp("ca") / "ca-bundle.crt"
    path.write_text(f"# {CA_MARKER}\n" + HOST_CA_BUNDLE.read_text())
    return path


@dataclass(frozen=True)
class BuiltImage:
    id: str
    tags: list[str]
    labels: dict[str, str]
    output: str


@pytest.fixture(scope="session")
def cpu_image(cpu_lock, base_image, cpu_stack, ca_bundle, locks_root):
    """One real CPU image for the whole session, built with `invoke build`; removed at the end.
    The lock comes first: a lock that fails says so before the engine is asked anything."""
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images

    engine = Engine.local()
    proc = run_task(
        *build_args(base_image, ca_bundle), env={"GPUENV_LOCKS_DIR": str(locks_root)}, timeout=1800
    )
    assert proc.returncode == 0, (
        f"invoke build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    tags = images.image_tags(
        cpu_stack, dockercases.stack_image_tag(cpu_stack, cpu_lock.sha256).rsplit(":", 1)[1]
    )
    info = engine.image_info(tags[0])
    assert info is not None, f"{tags[0]} is missing after a successful build"
    yield BuiltImage(info.id, tags, info.labels, proc.stdout)
    dockercases.remove_image(engine, info.id)
    if not os.environ.get("GPUENV_TEST_KEEP_BUILD_CACHE"):
        # The install stage the build kept as gpuenv-cache/<stack>:<lock-hash>: kept only when
        # asked, for fast reruns.
        dockercases.remove_build_cache(info.labels)


BARE_BASE = os.environ.get("GPUENV_TEST_BARE_BASE_IMAGE", "gpuenv-test-base:bookworm-bare")


@pytest.fixture(scope="session")
def bare_base_image(docker_engine) -> str:
    """debootstrap --variant=minbase with ca-certificates only, made once and kept by name."""
    from gpuenv.engine import Engine

    if Engine.local().image_info(BARE_BASE) is None:
        proc = subprocess.run(
            [str(ROOT / "scripts" / "make-test-base-image.sh"), "--bare", BARE_BASE],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if proc.returncode != 0:
            skip_only_if_unreachable(
                f"making the bare base image {BARE_BASE}", proc.stderr + proc.stdout
            )
    return BARE_BASE


@dataclass(frozen=True)
class StandinImage:
    backend: str  # conda-lock or uv
    id: str
    lock_dir: Path
    wheelhouse: Path  # the build's: the uv path's holds every wheel of the lock
    said: tuple[str, ...]  # what the build said as it went


def _standin_image(
    backend: str, folder: Path, base: str, standin_wheels: Path, cpu_stack, mirrors: dict[str, str]
) -> Iterator[StandinImage]:
    """A cold build (no build cache, an empty staging cache, no network) of the CPU stack's image
    on `backend`'s path, with the STAND-IN torch wheel; removed, with its kept install stage, at
    the end of the session."""
    from gpuenv.engine import Engine
    from gpuenv.envs.locking import ensure_lock
    from gpuenv.images import plan as images

    team = folder / "team.yml"
    conda = ["gpuenv-probe", "gpuenv-hello"] if backend == "conda-lock" else []
    team.write_text(yaml.safe_dump({"conda": conda, "pip": []}))
    engine = Engine.local()
    said: list[str] = []
    with pytest.MonkeyPatch.context() as env:  # a session's fixture: no test's monkeypatch
        env.setenv("GPUENV_LOCKS_DIR", str(folder / "locks"))
        env.setenv("GPUENV_CACHE_DIR", str(folder / "cache"))
        lock = ensure_lock(
            cpu_stack, backend=backend, wheelhouse=standin_wheels, team_file=team, mirrors=mirrors
        )
        wheels = standin_wheels
        if backend == "uv":  # every wheel of the lock on the host: the build asks no index
            wheels = download_locked_wheels(
                lock.directory / "requirements.lock.txt", standin_wheels, folder / "wheels"
            )
        plan = images.plan_build(
            cpu_stack,
            lock.directory,
            base_image=base,
            wheelhouse=wheels,
            mirrors=mirrors,
            offline=backend == "uv",
            nocache=True,
        )
        tag = f"gpuenv-test/standin-{backend}-{os.getpid()}:fresh"
        result = images.build_stack_image(
            engine, dataclasses.replace(plan, tags=[tag]), progress=said.append
        )
    yield StandinImage(backend, result.image.id, lock.directory, wheels, tuple(said))
    info = engine.image_info(result.image.id)
    dockercases.remove_image(engine, result.image.id)
    dockercases.remove_build_cache(info.labels if info else {})


@pytest.fixture(scope="session")
def standin_conda_image(
    tmp_path_factory, bare_base_image, conda_channel, standin_wheels, cpu_stack
) -> Iterator[StandinImage]:
    """The conda path's image (a conda lock of the CPU stack with the test channel's gpuenv-probe
    and gpuenv-hello, staged on the host) on the bare base, built cold once per session."""
    folder = tmp_path_factory.mktemp("standin-conda-image")
    mirrors = {"conda-forge": conda_channel.as_uri()}
    yield from _standin_image(
        "conda-lock", folder, bare_base_image, standin_wheels, cpu_stack, mirrors
    )


@pytest.fixture(scope="session")
def standin_uv_image(
    tmp_path_factory, base_image, standin_wheels, cpu_stack
) -> Iterator[StandinImage]:
    """The uv path's image (a uv lock of the CPU stack, installed from a complete wheelhouse) on
    the Debian base's Python, built cold once per session."""
    folder = tmp_path_factory.mktemp("standin-uv-image")
    yield from _standin_image("uv", folder, base_image, standin_wheels, cpu_stack, {})
