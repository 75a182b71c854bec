"""The engine's side of "nothing silently wrong": tags move together, containers run as the caller,
a CPU stack runs without GPUs, and messages name images by tag. Against the real Docker engine.

The images here are tiny (the test base image plus one LABEL, no RUN step: seconds to build),
named under gpuenv-safety-test/ or labelled for a stack no other test uses, and removed by the test.
"""

from __future__ import annotations

import json
import os
import re
import uuid

import dockercases
import pytest
from dockercases import containers_labelled, dockerfile_context
from imagecases import run_task

pytestmark = pytest.mark.docker

#: A stack no other test builds, so the image labelled for it here is the only one found.
STACK_ARGS = ("--cuda", "cpu", "--framework", "torch", "--torch", "2.13.0", "--python", "3.12")
STACK_ID = "torch2.13.0-cpu-py3.12"


@pytest.fixture
def tiny_build(base_image):
    """Build FROM the base image plus labels; every image and tag made is removed afterwards."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    made: list[str] = []

    def build(tags: list[str], labels: dict[str, str] | None = None):
        lines = [f"FROM {base_image}"] + [
            f"LABEL {k}={json.dumps(v)}" for k, v in (labels or {}).items()
        ]
        lines.append(f'LABEL gpuenv.safety-test="{uuid.uuid4().hex}"')  # a new image each time
        try:
            result = engine.build_image(
                dockerfile_context("\n".join(lines) + "\n"),
                dockerfile="Dockerfile",
                tags=tags,
                buildargs={},
                progress=lambda _t: None,
            )
        finally:
            made.extend(
                info.id
                for info in engine.find_images({"gpuenv.safety-test": None})
                if info.id not in made
            )
        return result

    yield build
    for image_id in made:
        dockercases.remove_image(engine, image_id)


def test_a_tag_the_engine_refuses_moves_no_tag(tiny_build, base_image):
    from gpuenv.engine import Engine
    from gpuenv.errors import ToolError

    engine = Engine.local()

    run = uuid.uuid4().hex[:8]
    moved_before = f"gpuenv-safety-test/stack:{run}"  # names the base image before the build
    new_name = f"gpuenv-safety-test/extra:{run}"  # does not exist before the build
    refused = "a" * 64  # the grammar allows it, the engine refuses it (it is an image id)
    cli = engine.client
    base_id = cli.images.get(base_image).id
    cli.api.tag(base_id, *moved_before.split(":"))
    try:
        with pytest.raises(ToolError) as caught:
            tiny_build([moved_before, new_name, refused])
        message = caught.value.render()
        assert message.startswith(f"the engine refused the tag {refused} after the build: ")
        assert "no tag was moved" in message and "\n" not in message
        assert cli.images.get(moved_before).id == base_id, (
            "a tag moved to the new image although the build's tags failed"
        )
        assert engine.image_info(new_name) is None, "a new tag was left on the new image"
    finally:
        dockercases.remove_image(engine, moved_before) if cli.images.get(
            moved_before
        ).id != base_id else cli.api.remove_image(moved_before, noprune=True)
    assert engine.image_info(base_image) is not None


def test_all_tags_move_when_the_engine_accepts_them(tiny_build):
    from gpuenv.engine import Engine

    engine = Engine.local()

    run = uuid.uuid4().hex[:8]
    tags = [
        f"gpuenv-safety-test/stack:{run}",
        f"gpuenv-safety-test/stack:latest-{run}",
        f"localhost:5000/gpuenv-safety-test/x:Prod{run}",
    ]
    result = tiny_build(tags)
    assert sorted(result.image.tags) == sorted(tags)
    assert all(engine.image_info(t).id == result.image.id for t in tags)


def test_the_container_runs_as_the_caller_and_writes_a_folder_only_the_caller_may(
    tiny_build, tmp_path
):
    """`invoke validate --json` into a root-owned folder: the container's files belong to the
    caller."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    run = uuid.uuid4().hex[:8]
    image = tiny_build([f"gpuenv-safety-test/run:{run}"]).image
    folder = tmp_path / "reports"
    folder.mkdir(mode=0o700)  # private to the caller, as pytest's own tmp_path is: no chmod 0777
    out: list[str] = []
    code = engine.run_container(
        image.id,
        ["sh", "-c", "id -u; id -g; echo report > /workspace/report.json; echo HOME=$HOME"],
        gpus="none",
        workdir_mount=folder,
        stream=out.append,
    )
    text = "".join(out)
    assert code == 0, text
    assert text.split()[:2] == [str(os.getuid()), str(os.getgid())]
    assert "HOME=/tmp" in text
    report = folder / "report.json"
    assert report.read_text() == "report\n"
    assert (report.stat().st_uid, report.stat().st_gid) == (os.getuid(), os.getgid())


def test_errors_name_the_image_by_its_tag_not_its_sha256(tiny_build, tmp_path):
    from gpuenv.engine import Engine
    from gpuenv.errors import ToolError

    engine = Engine.local()

    if "nvidia" in engine.runtimes():
        pytest.skip(
            "this engine has the NVIDIA runtime: the GPU request that fails here would be granted"
        )
    tag = f"gpuenv-safety-test/run:{uuid.uuid4().hex[:8]}"
    image = tiny_build([tag]).image
    mine = image.labels[
        "gpuenv.safety-test"
    ]  # this image's own: its containers carry it, no one else's do
    with pytest.raises(ToolError) as caught:  # the engine cannot give GPUs: the run fails at start
        engine.run_container(
            image.id, ["true"], gpus="0", workdir_mount=tmp_path, stream=lambda _t: None
        )
    assert caught.value.render().startswith(f"could not run {tag}: "), caught.value.render()
    assert "sha256" not in caught.value.render()
    assert containers_labelled("gpuenv.safety-test", mine) == [], (
        "the failed run left its container"
    )


def test_invoke_run_on_a_cpu_stack_asks_for_no_gpu_by_default(tiny_build, tmp_path):
    """On this engine there is no NVIDIA runtime: asking for GPUs would fail the run."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    if "nvidia" in engine.runtimes():
        pytest.skip(
            "this engine has the NVIDIA runtime: a GPU request would be granted, which proves "
            "nothing here"
        )
    mine = tiny_build(
        [f"gpuenv-safety-test/{STACK_ID}:{uuid.uuid4().hex[:8]}"],
        labels={"io.gpuenv.stack": STACK_ID},
    ).image.labels["gpuenv.safety-test"]
    done = run_task(
        "run",
        *STACK_ARGS,
        "--",
        "sh",
        "-c",
        "echo visible=$NVIDIA_VISIBLE_DEVICES",
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "visible=void" in done.stdout
    # and asking explicitly still asks, and says why the engine cannot
    done = run_task("run", *STACK_ARGS, "--gpus", "all", "--", "true", cwd=tmp_path, timeout=300)
    assert done.returncode == 1 and "NVIDIA Container Toolkit" in done.stderr
    assert containers_labelled("gpuenv.safety-test", mine) == []


def _holds(image_id: str, run: str) -> bool:
    """Whether an image's history holds `run` (one of this test's steps made it)."""
    from gpuenv.engine import Engine

    try:
        return any(
            run in (h.get("CreatedBy") or "")
            for h in dockercases.image_history(Engine.local(), image_id)
        )
    except Exception:  # noqa: BLE001 (removed meanwhile)
        return False


def _dangling() -> set[str]:
    from gpuenv.engine import Engine

    return {image.id for image in Engine.local().client.images.list(filters={"dangling": True})}


@pytest.mark.parametrize("builder", ["classic", "buildkit"])
@pytest.mark.parametrize("fails_in", [None, "install", "final"])
def test_a_build_leaves_no_dangling_image_failed_or_not(base_image, fails_in, builder):
    """Two stages like gpuenv's Dockerfile. Classic: the install stage is kept under its cache tag,
    every other untagged image the build made is removed, whether the build succeeds or fails.
    BuildKit makes no image of a stage or step: none is left, and no cache tag is made."""
    from gpuenv.engine import Engine
    from gpuenv.errors import ToolError

    engine = Engine.local()

    run = uuid.uuid4().hex[:8]
    dockerfile = (
        "\n".join(
            [
                f"FROM {base_image} AS install",
                f"RUN echo {run} > /made",
                "RUN false" if fails_in == "install" else "RUN true",
                f"FROM {base_image}",
                "COPY --from=install /made /made",
                "RUN false" if fails_in == "final" else "RUN cat /made",
            ]
        )
        + "\n"
    )
    cache_tag = f"gpuenv-safety-test/cache:{run}"
    tag = f"gpuenv-safety-test/two-stage:{run}"
    before = _dangling()
    log: list[str] = []
    try:
        if fails_in:
            with pytest.raises(ToolError):
                engine.build_image(
                    dockerfile_context(dockerfile),
                    dockerfile="Dockerfile",
                    tags=[tag],
                    buildargs={},
                    cache_tag=cache_tag,
                    labels={"gpuenv.safety-test": run},
                    builder=builder,
                    progress=log.append,
                )
        else:
            result = engine.build_image(
                dockerfile_context(dockerfile),
                dockerfile="Dockerfile",
                tags=[tag],
                buildargs={},
                cache_tag=cache_tag,
                labels={"gpuenv.safety-test": run},
                builder=builder,
                progress=log.append,
            )
            assert result.image.labels["gpuenv.safety-test"] == run, "labels= reaches the image"
            assert result.builder == builder
        made = set(re.findall(r"^ ---> ([0-9a-f]{12})$", "".join(log), re.M))
        left = {
            i
            for i in _dangling() - before
            if i.removeprefix("sha256:")[:12] in made or _holds(i, run)
        }
        assert not left, f"the build left dangling images {left}"
        kept = engine.image_info(cache_tag)
        assert (kept is not None) == (builder == "classic" and fails_in != "install"), (
            "the install stage is kept (tagged) once it was built"
        )
    finally:
        for ref in (tag, cache_tag):
            dockercases.remove_image(engine, ref)
