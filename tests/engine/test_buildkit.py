"""BuildKit through the engine's API (gpuenv/engine/buildkit.py): the trace read as BuildKit wrote
it, and real builds on this engine: labels in no step, the same inputs give the same image id,
a failure names its step and leaves nothing, `network_mode="none"` holds.

The images are tiny (the test base plus a step), named under gpuenv-buildkit-test/ and removed.
"""

from __future__ import annotations

import uuid

import dockercases
import pytest
from dockercases import dockerfile_context

from gpuenv.engine import buildkit

#: Two `moby.buildkit.trace` records as this engine (Docker 20.10.24, BuildKit 0.8) sent them.
STARTED = "Cm8KR3NoYTI1Njo5NTExODM0NDRjYTQ2MmZiMzdlMjg0MjU1YmZhODEyZTlhNDZmYjFkMDU5MjllYzJkYTJkNTAwZGM4Mjg5MDY0GiRbaW50ZXJuYWxdIGxvYWQgcmVtb3RlIGJ1aWxkIGNvbnRleHQ="  # noqa: E501
DONE = (
    "CosBCkdzaGEyNTY6OTUxMTgzNDQ0Y2E0NjJmYjM3ZTI4NDI1NWJmYTgxMmU5YTQ2ZmIxZDA1OTI5ZWMyZGEyZDUwMGRjODI4OTA2NBokW2ludGVybmFsXSBsb2FkIHJl"
    "bW90ZSBidWlsZCBjb250ZXh0KgwIttGd2AYQu/zmuwMyDAi20Z3YBhCi9+XDAw=="
)


def test_a_recorded_trace_reads_as_its_step_and_times():
    (vertex,), logs = buildkit.decode_status(STARTED)
    assert (
        vertex.digest.startswith("sha256:9511834")
        and vertex.name == "[internal] load remote build context"
    )
    assert (vertex.started, vertex.completed, vertex.cached, logs) == (None, None, False, [])
    (done,), _ = buildkit.decode_status(DONE)
    assert (
        done.started is not None
        and done.completed is not None
        and 0 <= done.completed - done.started < 1
    )


@pytest.mark.parametrize("aux", ["not base64 at all!", "CgX/", "//8="])
def test_a_broken_trace_record_is_one_error_not_a_traceback(aux):
    with pytest.raises(buildkit.TraceError):
        buildkit.decode_status(aux)


def test_the_trace_prints_steps_once_with_their_logs():
    shown: list[str] = []
    trace = buildkit.Trace(shown.append)
    trace.record(STARTED)
    trace.record(DONE)
    assert shown == ["#1 [internal] load remote build context\n", "#1 DONE 0.0s\n"]


@pytest.fixture
def local(docker_engine):
    from gpuenv.engine import Engine

    engine = Engine.local()
    if not engine.offers_buildkit():
        pytest.skip(
            f"this engine (API {engine.client.api.api_version}) offers no BuildKit through its API"
        )
    return engine


@pytest.fixture
def cleanup(local):
    refs: list[str] = []
    yield refs
    for ref in reversed(refs):
        dockercases.remove_image(local, ref)


def test_buildkit_steps_and_gpuenv_install_lines_show_as_progress():
    import io as _io

    from gpuenv.progress import PLAIN, Reporter, build_step

    assert (
        build_step("#7 [install 2/3] COPY install/ /opt/gpuenv-build/")
        == "step install 2/3: COPY install/ /opt/gpuenv-build/"
    )
    assert build_step("#5 [2/2] RUN echo hi") == "step 2/2: RUN echo hi"
    assert (
        build_step("#7 CACHED") is None
        and build_step("#1 [internal] load remote build context") is None
    )
    out = _io.StringIO()
    with Reporter(PLAIN, out=out) as report:
        report.output(
            "#8 [install 3/3] RUN /opt/gpuenv-build/install-env.sh\n"
            "#8 gpuenv-install: Python 3.11 from the base image\n#8 Downloading torch\n"
            "#8 DONE 12.0s\n"
        )
    text = out.getvalue()
    assert "step install 3/3: RUN /opt/gpuenv-build/install-env.sh" in text
    assert (
        "gpuenv-install: Python 3.11 from the base image" in text
        and "#8 gpuenv-install" not in text
    )
    assert "Downloading torch" not in text


def _marked(local, run: str) -> list[str]:
    """Untagged images whose history holds `run`: what a build of this test left dangling."""
    found = []
    for image in local.client.images.list(filters={"dangling": True}):
        if any(
            run in (h.get("CreatedBy") or "") for h in dockercases.image_history(local, image.id)
        ):
            found.append(image.id)
    return found


def test_the_same_inputs_give_the_same_image_id_and_labels_take_no_step(local, base_image, cleanup):
    run = uuid.uuid4().hex[:8]
    tag = f"gpuenv-buildkit-test/same:{run}"
    cleanup.append(tag)
    dockerfile = f"FROM {base_image}\nRUN echo {run} > /made\n"
    labels = {"io.gpuenv.buildkit-test": run, "io.gpuenv.other": "x"}
    log: list[str] = []
    first = local.build_image(
        dockerfile_context(dockerfile),
        dockerfile="Dockerfile",
        tags=[tag],
        buildargs={},
        labels=labels,
        builder="buildkit",
        owner_prefix="io.gpuenv.",
        progress=log.append,
    )
    assert first.builder == "buildkit" and first.image.labels["io.gpuenv.buildkit-test"] == run
    assert not [
        h
        for h in dockercases.image_history(local, first.image.id)
        if "LABEL" in (h.get("CreatedBy") or "")
    ], "a LABEL step"
    second = local.build_image(
        dockerfile_context(dockerfile),
        dockerfile="Dockerfile",
        tags=[tag],
        buildargs={},
        labels=labels,
        builder="buildkit",
        owner_prefix="io.gpuenv.",
        progress=log.append,
    )
    assert second.image.id == first.image.id, "the same inputs gave another image"
    assert any(line.endswith(" CACHED") for line in second.log)
    assert _marked(local, run) == [], "the second build's copy is left dangling"


def test_a_failed_step_is_named_and_leaves_no_image(local, base_image, cleanup):
    from gpuenv.errors import ToolError

    run = uuid.uuid4().hex[:8]
    tag = f"gpuenv-buildkit-test/fails:{run}"
    cleanup.append(tag)
    with pytest.raises(ToolError) as caught:
        local.build_image(
            dockerfile_context(f"FROM {base_image}\nRUN echo {run} && exit 3\n"),
            dockerfile="Dockerfile",
            tags=[tag],
            buildargs={},
            builder="buildkit",
            progress=lambda _t: None,
        )
    message = caught.value.render()
    assert message.startswith(f"docker build failed at [2/2] RUN echo {run} && exit 3: "), message
    assert "exit code: 3" in message and local.image_info(tag) is None and _marked(local, run) == []


def test_network_none_holds_under_buildkit(local, base_image, cleanup):
    run = uuid.uuid4().hex[:8]
    tag = f"gpuenv-buildkit-test/net:{run}"
    cleanup.append(tag)
    result = local.build_image(
        dockerfile_context(f"FROM {base_image}\nRUN echo {run}; ls /sys/class/net\n"),
        dockerfile="Dockerfile",
        tags=[tag],
        buildargs={},
        network_mode="none",
        builder="buildkit",
        progress=lambda _t: None,
    )
    interfaces = [
        line.split(" ", 1)[1]
        for line in result.log
        if line.startswith("#") and line.split(" ", 1)[1] in ("lo", "eth0")
    ]
    assert interfaces == ["lo"], result.log
