"""gpuenv/images/build.py, the library side of `invoke build`: the --dry plan with and without a
lock, the refusals made before the engine is asked, and the summary the task prints. The build
itself, through a real engine, is tests/images/test_build_run.py (`invoke build`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from stackcases import TORCH_CPU

from gpuenv.engine import BuildResult, ImageInfo
from gpuenv.envs import lockdir
from gpuenv.errors import BadInput
from gpuenv.images import plan as images
from gpuenv.images.build import (
    BuildOrder,
    StackBuild,
    build_stack,
    describe_build,
    describe_plan,
    plan_stack_build,
)

LOCK_TEXT = "torch==2.13.0+cpu \\\n    --hash=sha256:" + "b" * 64 + "\n"


@pytest.fixture
def locks(tmp_path, monkeypatch) -> Path:
    """An empty envs/locks of this test (GPUENV_LOCKS_DIR, as CI sets it)."""
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path / "locks"))
    return tmp_path / "locks"


def write_uv_lock(folder: Path) -> None:
    """A uv lock folder as `invoke lock` leaves it: the lock and the metadata vouching for it."""
    folder.mkdir(parents=True)
    (folder / "requirements.lock.txt").write_text(LOCK_TEXT)
    lockdir.write_metadata(
        folder,
        lockdir.LockMetadata(
            stack=TORCH_CPU,
            backend="uv",
            input_hash="i" * 64,
            lock_sha256=lockdir.file_sha256(folder / "requirements.lock.txt"),
            platforms=("linux-64",),
            source="rendered from the stack",
        ),
    )


class NoEngine:
    """An engine no step may reach: every attribute fails the test."""

    def __getattr__(self, name: str):
        raise AssertionError(f"the engine was asked ({name}) before the refusal")


def test_without_a_lock_the_dry_plan_says_it_would_lock_first(locks):
    plan, missing = plan_stack_build(BuildOrder(stack=TORCH_CPU))
    assert missing and plan.lock.backend == "conda-lock"
    text = describe_plan(plan, missing)
    lines = text.splitlines()
    assert lines[0] == f"stack: {TORCH_CPU.stack_id}"
    assert lines[1] == f"lock: none in {locks / TORCH_CPU.stack_id}: it would be locked first"
    assert f"  {images.LABEL_PREFIX}lock_backend=conda-lock" in lines
    assert lines[-1] == "nothing was built (--dry)"


def test_a_wheelhouse_without_a_backend_locks_with_uv(locks, tmp_path):
    order = BuildOrder(stack=TORCH_CPU, wheelhouse=tmp_path)
    assert order.lock_backend == "uv"
    assert BuildOrder(stack=TORCH_CPU, wheelhouse=tmp_path, backend="conda-lock").lock_backend == (
        "conda-lock"
    )
    plan, _missing = plan_stack_build(order)
    assert plan.labels[images.LABEL_PREFIX + "lock_backend"] == "uv"


def test_with_a_lock_the_dry_plan_reads_and_names_it(locks):
    write_uv_lock(locks / TORCH_CPU.stack_id)
    plan, missing = plan_stack_build(BuildOrder(stack=TORCH_CPU, tag="team/torch:prod"))
    assert not missing
    sha = lockdir.file_sha256(locks / TORCH_CPU.stack_id / "requirements.lock.txt")
    text = describe_plan(plan, missing)
    assert f"lock: {plan.lock.path} (uv, sha256 {sha[:12]})" in text
    assert "team/torch:prod" in text.splitlines()[3]


def test_offline_without_a_lock_is_refused_before_anything_is_asked(locks):
    order = BuildOrder(stack=TORCH_CPU, offline=True)
    for attempt in (lambda: plan_stack_build(order), lambda: build_stack(NoEngine(), order)):
        with pytest.raises(BadInput) as err:
            attempt()
        assert err.value.message == (
            f"--offline: there is no lock in {locks / TORCH_CPU.stack_id}, "
            "and locking needs an index"
        )
        assert "invoke lock" in err.value.fix


def test_the_summary_names_the_image_its_tags_size_builder_and_labels(locks):
    write_uv_lock(locks / TORCH_CPU.stack_id)
    plan, _missing = plan_stack_build(BuildOrder(stack=TORCH_CPU))
    plan = replace(plan, tags=["gpuenv/x:abc", "gpuenv/x:latest"])
    labels = {images.STACK_LABEL: TORCH_CPU.stack_id, images.LABEL_PREFIX + "stack_json": "{}"}
    image = ImageInfo("sha256:" + "f" * 64, plan.tags, 1_930_000_000, "2026-11-27", labels)
    removed = ["sha256:" + "1" * 64]
    built = BuildResult(image, [], reused=False, builder="buildkit", removed=removed)
    assert describe_build(StackBuild(plan, built, locked_first=False)).splitlines() == [
        f"built sha256:{'f' * 64}",
        "tags: gpuenv/x:abc, gpuenv/x:latest",
        "size: 1.93 GB",
        "builder: buildkit",
        "removed the image the tags replaced: 111111111111",
        "labels:",
        f"  {images.STACK_LABEL}={TORCH_CPU.stack_id}",
    ]
    reused = BuildResult(image, [], reused=True, builder="classic")
    first = describe_build(StackBuild(plan, reused, locked_first=False)).splitlines()[0]
    assert first.startswith("unchanged: reused sha256:")
