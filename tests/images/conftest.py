"""Fixtures for the image tests: a real Docker engine, a local base image, one real CPU image.

No registry is reachable from CI, so the base image is a debootstrapped Debian bookworm
(scripts/make-test-base-image.sh), cached by name. The CPU image (PyTorch CPU from the wheelhouse
plus TensorFlow CPU from PyPI) is built once per session through `invoke build` and removed at the
end; every other image or container a test makes is removed by that test.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import dockercases
import pytest
from imagecases import (
    CA_MARKER,
    FIXTURES,
    HOST_CA_BUNDLE,
    ROOT,
    WHEELHOUSE,
    build_args,
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
