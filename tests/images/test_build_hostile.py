"""Hostile input for the build (issue 29, item 3): the build touches only what it made.

- An image gpuenv did not make, found under the install stage's cache name, survives the build.
- Two bases, one lock: two cache names, so neither build deletes the other's cache.
- A rebuild that replaces an image removes the old one only when gpuenv made it and nothing uses it.
- A wheelhouse with thousands of other wheels sends only the locked ones to the engine.
- `--offline` with a missing base image is one line, exit 2, and the engine pulls nothing (its
  event stream is read for the whole run).

Against the real engine; the images are tiny (the test base plus a step or two), named under
gpuenv-hostile-test/ and removed by the test that made them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
import time
import uuid

import dockercases
import pytest
from dockercases import dockerfile_context
from imagecases import CPU_STACK_ARGS, run_task, write_uv_lock
from stackcases import TORCH_CPU as CPU

pytestmark = pytest.mark.docker


def _two_stages(base: str, run: str) -> str:
    """gpuenv's shape: an install stage that carries the install-stage label, then the image."""
    from gpuenv.images.plan import INSTALL_STAGE_LABEL

    return (
        "\n".join(
            [
                f"FROM {base} AS install",
                f"RUN echo {run} > /made",
                f'LABEL {INSTALL_STAGE_LABEL}="install-stage"',
                f"FROM {base}",
                "COPY --from=install /made /made",
            ]
        )
        + "\n"
    )


def _dangling() -> set[str]:
    from gpuenv.engine import Engine

    engine = Engine.local()
    return {image.id for image in engine.client.images.list(filters={"dangling": True})}


@pytest.fixture
def made():
    """Refs and ids a test made; all removed at the end, whatever happened."""
    from gpuenv.engine import Engine

    engine = Engine.local()
    refs: list[str] = []
    yield refs
    for ref in reversed(refs):
        try:
            dockercases.remove_image(engine, ref)
        except Exception:  # noqa: BLE001 (in use by another of this test's refs: removed with it)
            pass


def test_a_foreign_image_under_the_cache_name_survives_a_classic_build(base_image, made):
    """The cache name is gpuenv's to move only when the image under it is gpuenv's install stage."""
    from gpuenv.engine import Engine

    engine = Engine.local()
    run = uuid.uuid4().hex[:8]
    cache = f"gpuenv-hostile-test/cache:{run}"
    foreign = engine.image_info(base_image)
    engine.client.api.tag(
        foreign.id, *cache.split(":")
    )  # someone else's image, under the name gpuenv would use
    made.append(cache)
    tag = f"gpuenv-hostile-test/image:{run}"
    made.append(tag)
    before = _dangling()
    log: list[str] = []
    result = engine.build_image(
        dockerfile_context(_two_stages(base_image, run)),
        dockerfile="Dockerfile",
        tags=[tag],
        buildargs={},
        cache_tag=cache,
        labels={"gpuenv.hostile-test": run},
        builder="classic",
        owner_prefix="io.gpuenv.",
        progress=log.append,
    )
    assert engine.image_info(cache).id == foreign.id, (
        "the build moved the cache name off an image gpuenv did not make"
    )
    assert engine.image_info(base_image) is not None
    assert any("did not make" in line for line in log), "the build says why it kept no cache"
    left = _dangling() - before
    assert not {i for i in left if i != result.image.id and _made_after(i, run)}, (
        "the install stage gpuenv made is left dangling"
    )


def _made_after(image_id: str, run: str) -> bool:
    """Whether the dangling image `image_id` is one of this run's steps (its history holds
    `run`)."""
    from gpuenv.engine import Engine

    engine = Engine.local()
    return any(
        run in (entry.get("CreatedBy") or "")
        for entry in dockercases.image_history(engine, image_id)
    )


def test_two_bases_with_one_lock_never_share_a_cache_name(base_image, tmp_path, made):
    """Same lock, two bases: two cache names and two image names. A classic build on each keeps its
    own install stage; the second leaves the first's cache where it was."""
    from gpuenv.engine import Engine

    engine = Engine.local()
    from imagecases import CPU_LOCK_TEXT

    from gpuenv.images import plan as images

    run = uuid.uuid4().hex[:8]
    second = (
        f"gpuenv-hostile-test/other-base:{run}"  # another base: the test base with one more label
    )
    made.append(second)
    engine.build_image(
        dockerfile_context(f"FROM {base_image}\nLABEL gpuenv.hostile-test={run}\n"),
        dockerfile="Dockerfile",
        tags=[second],
        buildargs={},
        builder="classic",
        progress=lambda _t: None,
    )
    lock = write_uv_lock(tmp_path / "lock", CPU, CPU_LOCK_TEXT)
    bases = (base_image, second)
    plans = [
        images.identify(images.plan_build(CPU, lock, base_image=ref), engine.image_info(ref).id)
        for ref in bases
    ]
    assert plans[0].cache_tag != plans[1].cache_tag and plans[0].tags[0] != plans[1].tags[0]
    kept = []
    for plan, ref in zip(plans, bases):
        cache = f"gpuenv-hostile-test/{plan.cache_tag.split('/', 1)[1]}"
        tag = f"gpuenv-hostile-test/image:{run}-{len(kept)}"
        made.extend([tag, cache])
        engine.build_image(
            dockerfile_context(_two_stages(ref, run)),
            dockerfile="Dockerfile",
            tags=[tag],
            buildargs={},
            cache_tag=cache,
            builder="classic",
            progress=lambda _t: None,
        )
        kept.append((cache, engine.image_info(cache)))
    for cache, info in kept:
        assert info is not None and engine.image_info(cache).id == info.id, (
            f"{cache} was moved or removed by the other base's build"
        )


@pytest.mark.parametrize(
    "old", ["gpuenv's, unused", "gpuenv's, used by a container", "not gpuenv's"]
)
def test_a_rebuild_removes_the_image_it_replaced_only_if_gpuenv_made_it_and_nothing_uses_it(
    base_image, made, old
):
    from gpuenv.engine import Engine

    engine = Engine.local()
    run = uuid.uuid4().hex[:8]
    tag = f"gpuenv-hostile-test/rebuilt:{run}"
    made.append(tag)
    owned = (
        {"io.gpuenv.stack": f"hostile-{run}"} if old != "not gpuenv's" else {"someone.else": run}
    )
    first = engine.build_image(
        dockerfile_context(f"FROM {base_image}\nRUN echo first-{run} > /x\n"),
        dockerfile="Dockerfile",
        tags=[tag],
        buildargs={},
        labels=owned,
        builder="classic",
        progress=lambda _t: None,
    ).image
    made.append(first.id)
    container = None
    if old == "gpuenv's, used by a container":
        container = engine.client.containers.create(
            first.id, ["true"], labels={"gpuenv.hostile-test": run}
        )
    try:
        second = engine.build_image(
            dockerfile_context(f"FROM {base_image}\nRUN echo second-{run} > /x\n"),
            dockerfile="Dockerfile",
            tags=[tag],
            buildargs={},
            labels={"io.gpuenv.stack": f"hostile-{run}"},
            owner_prefix="io.gpuenv.",
            builder="classic",
            progress=lambda _t: None,
        ).image
        made.append(second.id)
        assert engine.image_info(tag).id == second.id
        still_there = engine.image_info(first.id) is not None
        assert still_there == (old != "gpuenv's, unused"), (
            f"the replaced image ({old}) was {'kept' if still_there else 'removed'}"
        )
    finally:
        if container is not None:
            container.remove(force=True)


def test_a_wheelhouse_of_many_other_wheels_sends_only_the_locked_ones(tmp_path):
    from gpuenv.images import plan as images

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    six = b"PK\x03\x04six"
    (wheels / "six-1.17.0-py2.py3-none-any.whl").write_bytes(six)
    torch = b"PK\x03\x04torch"
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(torch)
    for n in range(5000):  # other projects, and other versions of the locked ones
        (wheels / f"other{n}-1.0-py3-none-any.whl").write_bytes(b"PK")
    (wheels / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"PK")
    (wheels / "torch-2.13.0+cpu-cp310-cp310-manylinux_2_28_x86_64.whl").write_bytes(b"PK")
    text = (
        f"six==1.17.0 \\\n    --hash=sha256:{hashlib.sha256(six).hexdigest()}\n"
        f"torch==2.13.0+cpu \\\n    --hash=sha256:{hashlib.sha256(torch).hexdigest()}\n"
    )
    lock = write_uv_lock(tmp_path / "lock", CPU, text)
    plan = images.plan_build(
        CPU, lock, wheelhouse=wheels, arch="x86_64"
    )  # its time: benchmarks/build_context.py
    buf = io.BytesIO()
    images.write_context(plan, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        sent = sorted(m.name for m in tar.getmembers() if m.name.endswith(".whl"))
    assert sent == [
        "install/wheels/six-1.17.0-py2.py3-none-any.whl",
        "install/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    ]
    assert plan.no_index, "the two locked wheels are the whole lock"


def test_offline_with_a_missing_base_is_one_line_and_the_engine_pulls_nothing(
    docker_engine, tmp_path
):
    """The engine's own event stream is the witness: no pull of the missing base, during the whole
    run."""
    from gpuenv.engine import Engine

    engine = Engine.local()
    six, torch = b"PK\x03\x04six", b"PK\x03\x04torch"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "six-1.17.0-py2.py3-none-any.whl").write_bytes(six)
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(torch)
    text = (
        f"six==1.17.0 \\\n    --hash=sha256:{hashlib.sha256(six).hexdigest()}\n"
        f"torch==2.13.0+cpu \\\n    --hash=sha256:{hashlib.sha256(torch).hexdigest()}\n"
    )
    locks = tmp_path / "locks"
    write_uv_lock(locks / CPU.stack_id, CPU, text)
    missing = f"gpuenv-hostile-test/missing-base:{uuid.uuid4().hex[:8]}"
    assert engine.image_info(missing) is None
    since = int(time.time()) - 1
    proc = run_task(
        "build",
        *CPU_STACK_ARGS,
        "--offline",
        "--wheelhouse",
        str(wheels),
        "--base-image",
        missing,
        env={"GPUENV_LOCKS_DIR": str(locks)},
        timeout=300,
    )
    until = int(time.time()) + 1
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and missing in lines[0] and "never pulls" in lines[0], proc.stderr
    events = engine.client.api.events(
        since=since, until=until, decode=True, filters={"type": "image"}
    )
    pulls = [e for e in events if e.get("Action") == "pull" or e.get("status") == "pull"]
    assert not [e for e in pulls if "missing-base" in str(e)], f"the engine pulled: {pulls}"
    assert engine.image_info(missing) is None


def test_the_plan_never_names_two_different_images_alike(tmp_path, base_image):
    """Hostile to the names: a plan whose tags a caller overrode keeps them; any other plan is named
    from its own inputs, so a changed suite never takes another build's tag."""
    from gpuenv.engine import Engine

    engine = Engine.local()
    from imagecases import CPU_LOCK_TEXT

    from gpuenv.images import plan as images

    lock = write_uv_lock(tmp_path / "lock", CPU, CPU_LOCK_TEXT)
    suite = tmp_path / "validate"
    (suite / "checks").mkdir(parents=True)
    (suite / "__main__.py").write_text("print('one')\n")
    base_id = engine.image_info(base_image).id
    one = images.identify(
        images.plan_build(CPU, lock, base_image=base_image, validate_dir=suite), base_id
    )
    (suite / "__main__.py").write_text("print('two')\n")
    two = images.identify(
        images.plan_build(CPU, lock, base_image=base_image, validate_dir=suite), base_id
    )
    assert (
        one.tags[0] != two.tags[0]
        and one.labels[images.SUITE_LABEL] != two.labels[images.SUITE_LABEL]
    )
    assert one.cache_tag == two.cache_tag, "the suite is no input of the install stage"
    assert dataclasses.replace(one, tags=["x/y:1"]).tags == ["x/y:1"]


HOSTILE_LABELS = {
    "io.gpuenv.quotes": "say \"hi\" and 'bye'",
    "io.gpuenv.dollar": "$HOME ${PATH} $$",
    "io.gpuenv.backslash": "C:\\temp\\ \\",
    "io.gpuenv.json": '{"a": [1, "b\\"c"], "$x": null}',
    "io.gpuenv.unicode": "Größe – 世界",
    "io.gpuenv.spaces": "  two  spaces  ",
    "io.gpuenv.empty": "",
    "io.gpuenv.equals": "a=b c=d",
    "io.gpuenv.hash": "# not a comment",
}


@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_labels_in_one_instruction_reach_the_image_exactly(base_image, made, builder):
    """The labels are rendered into the Dockerfile as one LABEL: whatever their text, the image
    carries exactly it, in one step, under either builder."""
    from gpuenv.engine import Engine
    from gpuenv.images.context import render_dockerfile

    engine = Engine.local()
    run = uuid.uuid4().hex[:8]
    tag = f"gpuenv-hostile-test/labels:{run}-{builder}"
    made.append(tag)
    labels = {**HOSTILE_LABELS, "io.gpuenv.run": run}
    dockerfile = render_dockerfile(
        f"FROM {base_image}\nARG HOME=/nowhere\n".encode(), labels
    ).decode()
    result = engine.build_image(
        dockerfile_context(dockerfile),
        dockerfile="Dockerfile",
        tags=[tag],
        buildargs={},
        builder=builder,
        progress=lambda _t: None,
    )
    assert {k: result.image.labels.get(k) for k in labels} == labels
    steps = [
        h
        for h in dockercases.image_history(engine, result.image.id)
        if "LABEL" in (h.get("CreatedBy") or "")
    ]
    assert len(steps) == 1, f"{len(steps)} LABEL steps"
