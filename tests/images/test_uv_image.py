"""A uv lock's image on the local Debian base (its Python 3.11), built with no network from a
complete wheelhouse (the STAND-IN torch wheel, the rest of the lock downloaded by hash).

The environment is installed in the install stage, every file dated by the lock and copied onto /
(docker/install-env.sh): two cold builds (`--no-cache`) give the same environment layer, which
the label io.gpuenv.env_layer names and `verify --image` finds; a rebuild through the cache gives
the same image, and the copied environment runs its entry points. The first cold build is the
session's uv image (tests/images/conftest.py: standin_uv_image), which the verify tests share.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from imagecases import rebuilt_cold_then_cached

pytestmark = [pytest.mark.docker, pytest.mark.network]


def test_a_uv_image_gives_the_same_environment_layer_from_two_cold_builds(
    standin_uv_image, base_image, cpu_stack, tmp_path, monkeypatch
):
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images
    from gpuenv.images.verify import verify_image

    # The first cold build is the session's uv image (tests/images/conftest.py), which the verify
    # tests check too.
    lock_dir = standin_uv_image.lock_dir
    monkeypatch.setenv("GPUENV_CACHE_DIR", str(tmp_path / "cache"))
    wheels = standin_uv_image.wheelhouse  # every wheel of the lock: the builds ask no index
    engine = Engine.local()

    def build(run: str) -> str:
        plan = images.plan_build(
            cpu_stack,
            lock_dir,
            base_image=base_image,
            wheelhouse=wheels,
            offline=True,
            nocache=run != "cached",
        )
        plan = dataclasses.replace(plan, tags=[f"gpuenv-test/uv-{os.getpid()}:{run}"])
        return images.build_stack_image(engine, plan, progress=lambda _line: None).image.id

    # cold again (no build cache), then through the cache
    with rebuilt_cold_then_cached(engine, standin_uv_image.id, build) as built:
        layer = engine.image_info(built[0]).labels[images.ENV_LAYER_LABEL]
        said: list[str] = []
        verdict = verify_image(engine, built[0], say=said.append, lock_dir=lock_dir)
        assert verdict.ok, [p.line() for p in verdict.problems]
        assert "as its io.gpuenv.env_layer label records" in verdict.layer, said
        assert layer[:19] in verdict.layer and any(verdict.layer in line for line in said)
        # the environment moved after its install still runs: its scripts name /opt/gpuenv/env
        out: list[str] = []
        code = engine.run_container(
            built[0],
            ["pytest", "--version"],
            gpus="none",
            workdir_mount=tmp_path,
            stream=out.append,
        )
        assert code == 0 and "pytest" in "".join(out), out
        out.clear()
        code = engine.run_container(
            built[0],
            ["python", "-c", "import torch, sys; print(torch.__version__, sys.prefix)"],
            gpus="none",
            workdir_mount=tmp_path,
            stream=out.append,
        )
        assert code == 0 and "2.13.0+cpu /opt/gpuenv/env" in "".join(out), out
