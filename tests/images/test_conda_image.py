"""A conda lock's image on the bare base (no python3, curl or wget), built with no network.

The environment is installed on the host by py-rattler from the local test channel (a mirror of
conda-forge here) into a staging folder for /opt/gpuenv/env, or read from a prefix `invoke
install` made of the same lock, then ADDed as an archive with fixed times: no installer is
fetched. Two cold builds (`--no-cache`: one staged from an empty staging cache, one read from such
a prefix) give the same environment layer, which the label io.gpuenv.env_layer names and `verify
--image` finds; a staged rebuild through the build cache gives the same image as the one read
from the prefix. The first cold build is the session's conda image (tests/images/conftest.py:
standin_conda_image), which the verify tests share. The framework wheel is a STAND-IN
(tests/conftest.py: standin_wheels).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from imagecases import rebuilt_cold_then_cached

pytestmark = [pytest.mark.docker, pytest.mark.network]


def test_a_conda_image_on_the_bare_base_builds_offline_runs_its_entry_point_and_is_reproducible(
    standin_conda_image,
    bare_base_image,
    conda_channel,
    standin_wheels,
    cpu_stack,
    tmp_path,
    monkeypatch,
):
    from gpuenv.engine import Engine
    from gpuenv.envs import install as installer
    from gpuenv.images import plan as images
    from gpuenv.images.verify import verify_image

    # The first cold build is the session's conda image (tests/images/conftest.py), which the
    # verify tests check too: built as the second is, it said what it did as it went.
    lock_dir = standin_conda_image.lock_dir
    mirrors = {"conda-forge": conda_channel.as_uri()}
    engine = Engine.local()

    def check_progress(run: str, said: list[str]) -> None:
        cache = images.CACHE_REPOSITORY + "/" + cpu_stack.stack_id.lower()
        kept = [t for i in engine.client.images.list(name=cache) for t in i.tags]
        assert not [t for t in kept if t.endswith("-unlabelled")], "the first build's name"
        if run == "second":  # from the prefix `invoke install` made: nothing installed again
            assert any(line.startswith("taking the environment ") for line in said), said
            assert not any(line.startswith(("fetching ", "linking ")) for line in said), said
            return
        # staging for the image is a long step: each part is said as it starts (empty caches)
        for start in (
            "fetching ",
            "linking ",
            "installing ",
            "compiling the bytecode (each file once",
        ):
            assert any(line.startswith(start) for line in said), (run, start, said)
        assert any(
            line.startswith("linking ") and "(for /opt/gpuenv/env)" in line for line in said
        ), said

    def build(run: str) -> str:
        monkeypatch.setenv("GPUENV_CACHE_DIR", str(tmp_path / f"cache-{run}"))
        if run == "second":  # the lock installed into a prefix first: the image reads it
            plan = installer.plan_install(
                cpu_stack, lock_dir, tmp_path / "prefix", wheelhouse=standin_wheels, mirrors=mirrors
            )
            installer.install(plan, say=lambda _m: None, output=lambda _m: None)
        plan = images.plan_build(
            cpu_stack,
            lock_dir,
            base_image=bare_base_image,
            wheelhouse=standin_wheels,
            mirrors=mirrors,
            nocache=run != "cached",
        )
        plan = dataclasses.replace(plan, tags=[f"gpuenv-test/conda-{os.getpid()}:{run}"])
        said.clear()
        image_id = images.build_stack_image(engine, plan, progress=said.append).image.id
        check_progress(run, said)
        return image_id

    check_progress("first", list(standin_conda_image.said))
    said: list[str] = []
    # cold again: no build cache, read from the prefix the lock was installed into; then from an
    # empty staging cache through the build cache (the same image: the archives' bytes agree)
    with rebuilt_cold_then_cached(engine, standin_conda_image.id, build) as built:
        layer = engine.image_info(built[1]).labels[images.ENV_LAYER_LABEL]
        said.clear()
        verdict = verify_image(engine, built[1], say=said.append, lock_dir=lock_dir)
        assert verdict.ok and "as its io.gpuenv.env_layer label records" in verdict.layer, said
        assert layer[:19] in verdict.layer and any(verdict.layer in line for line in said)
        out: list[str] = []
        code = engine.run_container(
            built[0], ["gpuenv-probe"], gpus="none", workdir_mount=tmp_path, stream=out.append
        )
        assert code == 0 and "gpuenv-probe ok /opt/gpuenv/env" in "".join(out)
        out.clear()
        code = engine.run_container(
            built[0], ["gpuenv-hello"], gpus="none", workdir_mount=tmp_path, stream=out.append
        )
        assert code == 0 and "hello from /opt/gpuenv/env" in "".join(out)
        out.clear()
        code = engine.run_container(
            built[0],
            ["python", "-c", "import torch; print(torch.__version__)"],
            gpus="none",
            workdir_mount=tmp_path,
            stream=out.append,
        )
        assert code == 0 and "2.13.0+cpu" in "".join(out)
