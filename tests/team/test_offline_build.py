"""Same inputs, same image; a complete wheelhouse builds with no network (issue 19 items 1 and 2).

`team_image` is built by `gpuenv build` from a wheelhouse that holds every wheel of the lock: the
build asks no index and the engine runs it with `network_mode="none"` (a RUN step that needed
the network would fail). Built again with nothing changed, and an empty uv cache on the host, it
is the very same image, the build says so, and neither build leaves a dangling image.
"""

from __future__ import annotations

import re

import pytest
from teamcases import run_gpuenv, team_build_args

pytestmark = [pytest.mark.docker, pytest.mark.network]


def dangling_ids() -> set[str]:
    from gpuenv.engine import Engine

    return {image.id for image in Engine.local().client.images.list(filters={"dangling": True})}


def test_a_rebuild_with_nothing_changed_is_the_same_image_and_says_so(
    team_image, base_image, complete_wheelhouse, locks_dir, cpu_stack, cpu_uv_lock, tmp_path
):
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images

    engine = Engine.local()

    cache = tmp_path / "empty-uv-cache"
    cache.mkdir()
    env = {"GPUENV_LOCKS_DIR": str(locks_dir), "UV_CACHE_DIR": str(cache)}
    first_id, first_output = team_image.id, team_image.built_output
    assert (
        "holds every wheel of the lock: no index, and no network during the build" in first_output
    )
    before = dangling_ids()
    proc = run_gpuenv(
        *team_build_args(base_image, complete_wheelhouse), "--verbose", env=env, timeout=1800
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"unchanged: reused {first_id}" in proc.stdout, proc.stdout[-2000:]
    assert engine.image_info(team_image.tag).id == first_id, "the same inputs gave another image"
    assert "no network during the build" in proc.stdout
    # nothing the builds made is left untagged: the install stage is kept under its cache tag
    made = {m for m in re.findall(r"^ ---> ([0-9a-f]{12})$", proc.stdout, re.M)}
    assert not {i for i in dangling_ids() - before if i.removeprefix("sha256:")[:12] in made}
    labels = engine.image_info(first_id).labels
    if (
        "builder: classic" in first_output
    ):  # BuildKit keeps its cache in the builder, not as an image
        assert (
            engine.image_info(images.build_cache_tag(cpu_stack, labels[images.INSTALL_HASH_LABEL]))
            is not None
        )
    # labels carry the lock's date, not the build's
    labels = engine.image_info(first_id).labels
    assert "BUILD_DATE" not in str(labels)
    listing = run_gpuenv("images")
    assert listing.returncode == 0 and "<untagged>" not in listing.stdout


def test_offline_build_names_every_missing_wheel_first(
    team_image, base_image, cpu_uv_lock, locks_dir, complete_wheelhouse, tmp_path
):
    import shutil

    partial = tmp_path / "partial"
    partial.mkdir()
    for wheel in complete_wheelhouse.glob("torch-*.whl"):
        shutil.copy(wheel, partial)
    proc = run_gpuenv(
        *team_build_args(base_image, partial),
        "--offline",
        env={"GPUENV_LOCKS_DIR": str(locks_dir)},
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    line = proc.stderr.strip()
    assert (
        "\n" not in line
        and line.startswith("gpuenv: --offline: ")
        and f"wheels are not in {partial}: " in line
    )
    assert "numpy==" in line and "torch==" not in line
    assert "sending the build context" not in proc.stdout, "the check must come before the build"
