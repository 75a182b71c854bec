"""A uv lock's image on the local Debian base (its Python 3.11), built with no network from a
complete wheelhouse (the STAND-IN torch wheel, the rest of the lock downloaded by hash).

The environment is installed in the install stage, every file dated by the lock and copied onto /
(docker/install-env.sh): two cold builds (`--no-cache`) give the same environment layer, which
the label io.gpuenv.env_layer names and `verify --image` finds; a rebuild through the cache gives
the same image, and the copied environment runs its entry points.
"""

from __future__ import annotations

import dataclasses
import os

import dockercases
import pytest
import yaml
from imagecases import download_locked_wheels

pytestmark = [pytest.mark.docker, pytest.mark.network]


def test_a_uv_image_gives_the_same_environment_layer_from_two_cold_builds(
    base_image, standin_wheels, cpu_stack, tmp_path, monkeypatch
):
    from gpuenv.engine import Engine
    from gpuenv.envs.locking import ensure_lock
    from gpuenv.images import plan as images
    from gpuenv.images.verify import verify_image

    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("GPUENV_CACHE_DIR", str(tmp_path / "cache"))
    team = tmp_path / "team.yml"
    team.write_text(yaml.safe_dump({"conda": [], "pip": []}))
    lock = ensure_lock(cpu_stack, backend="uv", wheelhouse=standin_wheels, team_file=team)
    wheels = download_locked_wheels(
        lock.directory / "requirements.lock.txt", standin_wheels, tmp_path / "wheels"
    )
    engine = Engine.local()

    built = []
    try:
        # cold twice (no build cache), then through the cache
        for run in ("first", "second", "cached"):
            plan = images.plan_build(
                cpu_stack,
                lock.directory,
                base_image=base_image,
                wheelhouse=wheels,
                offline=True,
                nocache=run != "cached",
            )
            plan = dataclasses.replace(plan, tags=[f"gpuenv-test/uv-{os.getpid()}:{run}"])
            result = images.build_stack_image(engine, plan, progress=lambda _line: None)
            built.append(result.image.id)
            labels = engine.image_info(result.image.id).labels
            assert labels[images.ENV_LAYER_LABEL] == engine.layer_ids(result.image.id)[-2]
        layers = [engine.image_info(i).labels[images.ENV_LAYER_LABEL] for i in built]
        assert layers[0] == layers[1] == layers[2], "a cold build gave another environment layer"
        assert built[2] == built[1], "a rebuild through the cache gave another image"
        said: list[str] = []
        verdict = verify_image(engine, built[0], say=said.append, lock_dir=lock.directory)
        assert verdict.ok, [p.line() for p in verdict.problems]
        assert "as its io.gpuenv.env_layer label records" in verdict.layer, said
        assert layers[0][:19] in verdict.layer and any(verdict.layer in line for line in said)
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
    finally:
        for image_id in dict.fromkeys(built):
            labels = engine.image_info(image_id).labels if engine.image_info(image_id) else {}
            dockercases.remove_image(engine, image_id)
            dockercases.remove_build_cache(labels)
