"""The main job on a base as bare as the real ones: no python3, no curl, no wget.

`nvidia/cuda:*-base-*` and `ubuntu:*` ship none of them, so the image build must need no
downloader in the base: the host supplies uv and a standalone CPython (gpuenv/envs/buildtools.py)
for a uv lock, and a conda lock's whole environment (tests/images/test_conda_image.py).
Where the standalone Python can be fetched, the image builds and `invoke run` works in it. Where
github.com cannot be reached (these machines reach PyPI but not github.com), the build must stop
before the engine builds anything, with one line naming the Python download and the setting that
points elsewhere: then, and only then, the test skips; any other cause of that line fails it.
"""

from __future__ import annotations

import time

import dockercases
import pytest
from imagecases import CPU_STACK_ARGS, WHEELHOUSE, run_task
from outsidecauses import PYTHON_BUILD_STANDALONE_HOST, python_download_unreachable

pytestmark = [pytest.mark.docker, pytest.mark.network]


@pytest.mark.parametrize("tool", ["python3", "python", "curl", "wget"])
def test_the_bare_test_base_is_as_bare_as_nvidia_cuda(bare_base_image, tool):
    from gpuenv.engine import Engine

    engine = Engine.local()

    client = engine.client
    with pytest.raises(Exception) as caught:
        client.containers.run(
            bare_base_image, ["-c", f"command -v {tool}"], entrypoint=["/bin/sh"], remove=True
        )
    assert "returned non-zero exit status" in str(caught.value)


def test_the_engine_probe_finds_python_only_where_there_is_one(bare_base_image, base_image):
    from gpuenv.engine import Engine

    engine = Engine.local()

    assert engine.image_python(bare_base_image, "3.11") is None
    assert engine.image_python(base_image, "3.11") == "/usr/bin/python3.11"
    assert engine.image_python(base_image, "3.12") is None  # bookworm's python3 is 3.11


def test_the_cpu_stack_builds_on_a_bare_base_or_names_the_python_download(
    bare_base_image, ca_bundle, tmp_path
):
    from gpuenv.engine import Engine

    engine = Engine.local()

    team = tmp_path / "team.yml"
    team.write_text("pip: []\n")  # torch only: the lock needs just PyPI and the wheelhouse
    env = {"GPUENV_LOCKS_DIR": str(tmp_path / "locks"), "GPUENV_CACHE_DIR": str(tmp_path / "cache")}
    since = time.time()
    build = [
        "build",
        *CPU_STACK_ARGS,
        "--base-image",
        bare_base_image,
        "--backend",
        "uv",
        "--team-file",
        str(team),
        "--wheelhouse",
        str(WHEELHOUSE),
        "--ca-cert",
        str(ca_bundle),
    ]
    proc = run_task(*build, env=env, timeout=1800)
    if proc.returncode != 0:
        err = proc.stderr.strip()
        assert "Traceback" not in proc.stdout + proc.stderr
        cause = python_download_unreachable(err)
        if (
            cause is None
        ):  # gpuenv's own download error for any reason but an unreachable host is a failure too
            pytest.fail(
                f"the build on the bare base failed, and not for want of a route to "
                f"{PYTHON_BUILD_STANDALONE_HOST}:\n{proc.stdout[-3000:]}\n{err[-3000:]}"
            )
        assert len(err.splitlines()) == 1, err
        assert "python-build-standalone" in err, (
            "the line must name the URL that could not be fetched"
        )
        assert "UV_PYTHON_INSTALL_MIRROR" in err, (
            "the line must name the setting that points elsewhere"
        )
        assert dockercases.build_step_containers_since(since) == []
        pytest.skip(
            f"no route from this machine to {PYTHON_BUILD_STANDALONE_HOST} for the standalone "
            f"Python, so no image was built (checked the one-line error): {err}"
        )

    # This build's image: the stack on the bare base (another image of the stack may share the
    # engine)
    built = engine.find_images(
        {
            "io.gpuenv.stack": "torch2.13.0-cpu-py3.11",
            "org.opencontainers.image.base.name": bare_base_image,
        }
    )
    assert built, (
        "the build reported success, but no image of the stack on the bare base is on the engine"
    )
    image = max(built, key=lambda img: img.created)
    try:
        tmp_path.chmod(0o755)
        probe = (
            "import sys, torch; print('PY', sys.version_info[:2], sys.base_prefix, "
            "torch.__version__)"
        )
        proc = run_task(
            "run",
            *CPU_STACK_ARGS,
            "--gpus",
            "none",
            "--",
            "python",
            "-c",
            probe,
            cwd=tmp_path,
            env=env,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        line = next(line for line in proc.stdout.splitlines() if line.startswith("PY "))
        assert "(3, 11)" in line and "/opt/gpuenv/python" in line and "2.13.0+cpu" in line
    finally:
        dockercases.remove_image(engine, image.id)
        dockercases.remove_build_cache(image.labels)


def test_the_real_nvidia_cuda_base_is_pulled_or_named_in_one_line(docker_engine):
    """The production default stays the real nvidia/cuda tag; where no registry answers, one line
    says so."""
    from gpuenv.compat.resolve import resolve_stack
    from gpuenv.compat.rules.request import Request
    from gpuenv.engine import Engine
    from gpuenv.errors import ToolError
    from gpuenv.images import plan as images

    engine = Engine.local()

    stack = resolve_stack(Request(cuda="12.1", framework="torch", python="3.11"))
    assert stack.base_image.startswith("nvidia/cuda:12.1") and "-base-ubuntu" in stack.base_image
    if engine.image_info(stack.base_image) is not None:
        pytest.skip(f"{stack.base_image} is already on this engine: nothing to pull")
    try:
        images.ensure_base_image(engine, stack.base_image, progress=lambda _: None)
    except ToolError as err:
        text = err.render()
        assert "\n" not in text
        assert (
            f"the base image {stack.base_image} is not on this engine and cannot be pulled" in text
        )
        assert "--base-image" in text
        pytest.skip(f"no image registry reachable here (checked the one-line error): {text}")
    try:
        assert engine.image_python(stack.base_image, stack.python) is None, (
            "nvidia/cuda base images ship no Python"
        )
    finally:
        dockercases.remove_image(engine, stack.base_image)
