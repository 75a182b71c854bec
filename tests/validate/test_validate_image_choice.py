"""`invoke run` and `invoke validate` use the image built from the current lock (issue 11 item
11b): chosen by the io.gpuenv.lock_hash label, never silently an image of an older lock."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from stackcases import TORCH_CPU

from gpuenv.engine import Engine, ImageInfo
from gpuenv.errors import GpuenvError
from gpuenv.images.plan import LOCK_HASH_LABEL, STACK_LABEL, image_for_stack, pick_image

CURRENT, OLDER = "a" * 64, "b" * 64


def _image(id_: str, lock_hash: str, created: str) -> ImageInfo:
    return ImageInfo(
        id_, [], 1, created, {STACK_LABEL: TORCH_CPU.stack_id, LOCK_HASH_LABEL: lock_hash}
    )


def _engine_answers(find_images) -> SimpleNamespace:
    """An engine for image_for_stack that answers find_images with the recorded list."""
    return SimpleNamespace(find_images=find_images)


def test_the_image_of_the_current_lock_wins_over_a_newer_one_of_an_older_lock():
    found = [
        _image("sha256:current-old", CURRENT, "2026-11-01T10:00:00Z"),
        _image("sha256:older-lock-newest", OLDER, "2026-11-20T10:00:00Z"),
        _image("sha256:current-new", CURRENT, "2026-11-02T10:00:00Z"),
    ]
    assert pick_image(found, TORCH_CPU, CURRENT) == "sha256:current-new"


def test_no_image_of_the_current_lock_says_so_and_how_to_build_it():
    with pytest.raises(GpuenvError) as err:
        pick_image([_image("sha256:x", OLDER, "2026-11-20T10:00:00Z")], TORCH_CPU, CURRENT)
    text = str(err.value)
    assert (
        f"no image of stack {TORCH_CPU.stack_id} was built from the current lock {CURRENT[:12]}"
        in text
    )
    assert f"built from locks {OLDER[:12]}" in text
    assert "invoke build" in text


def test_without_a_lock_the_newest_image_of_the_stack_is_used():
    found = [
        _image("sha256:a", OLDER, "2026-11-01T10:00:00Z"),
        _image("sha256:b", CURRENT, "2026-11-02T10:00:00Z"),
    ]
    assert pick_image(found, TORCH_CPU, None) == "sha256:b"
    with pytest.raises(GpuenvError, match="no gpuenv image for stack"):
        pick_image([], TORCH_CPU, None)


def test_image_for_stack_hashes_the_lock_it_is_given(tmp_path):
    """The real lock file is read and hashed; the engine's answer is the recorded image list."""
    import hashlib

    from gpuenv.envs import lockdir

    (tmp_path / lockdir.UV_LOCK_FILE).write_text("torch==2.13.0+cpu --hash=sha256:00\\n")
    current = hashlib.sha256((tmp_path / lockdir.UV_LOCK_FILE).read_bytes()).hexdigest()
    lockdir.write_metadata(
        tmp_path,
        lockdir.LockMetadata(
            stack=TORCH_CPU,
            backend="uv",
            input_hash="0" * 64,
            lock_sha256=current,
            platforms=("linux-64",),
            source="written by the test",
        ),
    )
    found = [
        _image("sha256:older", OLDER, "2026-11-20T10:00:00Z"),
        _image("sha256:mine", current, "2026-11-01T10:00:00Z"),
    ]
    engine = _engine_answers(
        lambda labels: found if labels == {STACK_LABEL: TORCH_CPU.stack_id} else []
    )
    assert image_for_stack(engine, TORCH_CPU, tmp_path) == "sha256:mine"


def test_image_for_stack_refuses_a_lock_of_another_stack(tmp_path):
    """A lock copied under this stack's folder is refused, as build, install and push refuse it:
    never an image chosen by the hash of another stack's lock."""
    import hashlib

    from stackcases import TF_CPU

    from gpuenv.envs import lockdir
    from gpuenv.errors import GpuenvError

    (tmp_path / lockdir.UV_LOCK_FILE).write_text("tensorflow-cpu==2.15.1 --hash=sha256:00\\n")
    digest = hashlib.sha256((tmp_path / lockdir.UV_LOCK_FILE).read_bytes()).hexdigest()
    lockdir.write_metadata(
        tmp_path,
        lockdir.LockMetadata(
            stack=TF_CPU,
            backend="uv",
            input_hash="0" * 64,
            lock_sha256=digest,
            platforms=("linux-64",),
            source="written by the test",
        ),
    )
    engine = _engine_answers(lambda labels: [_image("sha256:any", digest, "2026-11-01T10:00:00Z")])
    with pytest.raises(GpuenvError) as err:
        image_for_stack(engine, TORCH_CPU, tmp_path)
    assert TF_CPU.stack_id in str(err.value) and TORCH_CPU.stack_id in str(err.value)


@pytest.mark.parametrize(
    "carried, warned", [("this checkout's", False), ("another checkout's", True)]
)
def test_run_and_validate_say_when_the_image_carries_another_suite(
    monkeypatch, capsys, carried, warned
):
    """An image of the current lock built with another suite (another checkout, or before the suite
    changed here) is still used, but never silently: one line says whose suite will judge."""
    from gpuenv.cli import settings
    from gpuenv.images import identity, plan

    ours = identity.checkout_suite()
    labels = {
        STACK_LABEL: TORCH_CPU.stack_id,
        plan.SUITE_LABEL: ours if warned is False else "0" * 64,
    }
    image = ImageInfo("sha256:only", [], 1, "2026-11-01T10:00:00Z", labels)
    recorded = SimpleNamespace(image_info=lambda ref: image, image_name=lambda ref: "gpuenv/x:y")
    monkeypatch.setattr(Engine, "local", classmethod(lambda cls, timeout=None: recorded))
    monkeypatch.setattr(settings, "resolve_for_task", lambda settings, options: (None, TORCH_CPU))
    monkeypatch.setattr(plan, "image_for_stack", lambda engine, stack: image.id)
    chosen = settings.image_or_stack(SimpleNamespace(), None, None, {}, False, False)
    assert chosen.ref == "sha256:only" and chosen.engine is recorded
    said = capsys.readouterr().err
    assert ("carries another validation suite than this checkout's" in said) is warned, said
