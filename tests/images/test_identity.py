"""Image identity, pure: the tag's hash covers everything in the image, the cache name every input
of the install stage; the same inputs give the same names."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from imagecases import CPU_LOCK_TEXT, ROOT, write_uv_lock
from stackcases import TORCH_CPU as CPU

from gpuenv.images import plan as images

BASE_A = "sha256:" + "a" * 64
BASE_B = "sha256:" + "b" * 64


@pytest.fixture
def inputs(tmp_path: Path):
    """A lock, a copy of the suite and of docker/: each can be changed by a test."""
    lock = write_uv_lock(tmp_path / "lock", CPU, CPU_LOCK_TEXT)
    suite = tmp_path / "validate"
    shutil.copytree(ROOT / "validate", suite, ignore=shutil.ignore_patterns("__pycache__"))
    docker = tmp_path / "docker"
    shutil.copytree(ROOT / "docker", docker)
    return lock, suite, docker


def _named(
    lock: Path, suite: Path, docker: Path, base_id: str = BASE_A, **options
) -> images.BuildPlan:
    plan = images.plan_build(CPU, lock, base_image="local/base:1", validate_dir=suite, **options)
    return images.identify(dataclasses.replace(plan, docker_dir=docker), base_id)


def test_the_same_inputs_give_the_same_names(inputs):
    first, second = _named(*inputs), _named(*inputs)
    assert (
        first.tags == second.tags
        and first.cache_tag == second.cache_tag
        and first.labels == second.labels
    )
    assert first.tags[0] == f"gpuenv/{CPU.stack_id}:{first.labels[images.INPUTS_LABEL][:12]}"
    assert (
        first.cache_tag.startswith(f"gpuenv-cache/{CPU.stack_id}:")
        and first.cache_tag.split(":")[1] != first.tags[0].split(":")[1]
    )
    assert first.labels[images.BASE_ID_LABEL] == BASE_A


@pytest.mark.parametrize("change", ["suite", "dockerfile", "script", "entrypoint", "base"])
def test_anything_in_the_image_changes_its_tag(inputs, change):
    lock, suite, docker = inputs
    before = _named(lock, suite, docker)
    base = BASE_A
    if change == "suite":
        (suite / "checks" / "another_check.py").write_text("# one more check\n")
    elif change == "dockerfile":
        (docker / "Dockerfile").write_text((docker / "Dockerfile").read_text() + "\n# a comment\n")
    elif change == "script":
        (docker / "install-env.sh").write_text(
            (docker / "install-env.sh").read_text() + "\n# a comment\n"
        )
    elif change == "entrypoint":
        (docker / "entrypoint.sh").write_text(
            (docker / "entrypoint.sh").read_text() + "\n# a comment\n"
        )
    else:
        base = BASE_B
    after = _named(lock, suite, docker, base)
    assert after.tags[0] != before.tags[0], f"a changed {change} kept the image's name"
    assert after.tags[1] == before.tags[1] == f"gpuenv/{CPU.stack_id}:latest"
    # the install stage's inputs: scripts, Dockerfile, base; not the suite or the entrypoint
    assert (after.cache_tag != before.cache_tag) == (change not in ("suite", "entrypoint"))


def test_another_lock_is_another_image(inputs, tmp_path):
    lock, suite, docker = inputs
    other = write_uv_lock(
        tmp_path / "other", CPU, CPU_LOCK_TEXT.replace("six==1.17.0", "six==1.16.0")
    )
    assert _named(other, suite, docker).tags[0] != _named(lock, suite, docker).tags[0]
    assert _named(other, suite, docker).cache_tag != _named(lock, suite, docker).cache_tag


def test_a_ca_bundle_keys_the_install_stage_that_the_image_records(inputs, tmp_path):
    """The CA bundle reaches no layer, but the install stage copied it: another cache, and the
    image's io.gpuenv.install_hash label (so its name) says which."""
    lock, suite, docker = inputs
    ca = tmp_path / "corp.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    plain, with_ca = _named(lock, suite, docker), _named(lock, suite, docker, ca_cert=ca)
    assert plain.cache_tag != with_ca.cache_tag
    assert with_ca.labels[images.INSTALL_HASH_LABEL][:12] == with_ca.cache_tag.rsplit(":", 1)[1]
    assert plain.tags[0] != with_ca.tags[0]


def test_a_callers_tags_are_kept_and_the_extra_tag_added(inputs):
    lock, suite, docker = inputs
    named = _named(lock, suite, docker, tag="team/torch:prod")
    assert named.tags[2:] == ["team/torch:prod"]
    plan = dataclasses.replace(images.plan_build(CPU, lock, validate_dir=suite), tags=["x/y:1"])
    assert images.identify(plan, BASE_A).tags == ["x/y:1"]


def test_before_the_base_is_known_tags_are_pending(inputs):
    lock, suite, _docker = inputs
    plan = images.plan_build(CPU, lock, validate_dir=suite)
    assert plan.tags == [] and plan.cache_tag is None
    assert images.pending_tags(plan)[0] == f"gpuenv/{CPU.stack_id}:<inputs-hash>"


def test_the_suite_label_prefers_this_checkouts_image():
    from gpuenv.engine import ImageInfo

    lock_hash = "c" * 64
    mine = ImageInfo(
        "sha256:mine",
        [],
        1,
        "2026-01-01T00:00:00Z",
        {images.LOCK_HASH_LABEL: lock_hash, images.SUITE_LABEL: "s1"},
    )
    theirs = ImageInfo(
        "sha256:theirs",
        [],
        1,
        "2026-02-01T00:00:00Z",
        {images.LOCK_HASH_LABEL: lock_hash, images.SUITE_LABEL: "s2"},
    )
    assert images.pick_image([mine, theirs], CPU, lock_hash, "s1") == "sha256:mine"
    assert images.pick_image([mine, theirs], CPU, lock_hash, None) == "sha256:theirs"


def test_the_context_dockerfile_ends_with_one_label_instruction_of_every_label(inputs):
    import io
    import re
    import tarfile

    named = _named(*inputs)
    buf = io.BytesIO()
    images.write_context(named, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        text = tar.extractfile("docker/Dockerfile").read().decode()
    final_stage = text.split("\nFROM ")[-1]
    assert len(re.findall(r"^LABEL ", final_stage, re.M)) == 1 and text.rstrip().splitlines()[
        -1
    ].strip().startswith('"')
    for key, value in named.labels.items():
        assert f'"{key}"=' in final_stage, key
    assert f'"{images.INPUTS_LABEL}"="{named.labels[images.INPUTS_LABEL]}"' in final_stage


def test_a_standalone_python_tree_is_named_by_its_paths_links_modes_and_bytes(tmp_path):
    """tools/python goes into the image (/opt/gpuenv/python): any change to it is another image."""
    from gpuenv.images.context import Tree
    from gpuenv.images.identity import entry_digest

    root = tmp_path / "python"
    (root / "bin").mkdir(parents=True)
    binary = root / "bin" / "python3.11"
    binary.write_bytes(b"\x7fELF one")
    binary.chmod(0o755)
    (root / "bin" / "python3").symlink_to("python3.11")
    digests = [entry_digest("install/tools/python", Tree(root))]
    assert entry_digest("install/tools/python", Tree(root)) == digests[0], (
        "the same tree, the same name"
    )
    binary.write_bytes(b"\x7fELF two")
    digests.append(entry_digest("install/tools/python", Tree(root)))
    binary.chmod(0o644)
    digests.append(entry_digest("install/tools/python", Tree(root)))
    (root / "bin" / "python3").unlink()
    (root / "bin" / "python3").symlink_to("python3.12")
    digests.append(entry_digest("install/tools/python", Tree(root)))
    assert len(set(digests)) == 4, "a change of bytes, mode or link target kept the name"
