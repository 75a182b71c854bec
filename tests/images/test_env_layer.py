"""The environment layer from its inputs alone (issue 36, item 3), the pure parts: the archive a
conda lock's environment travels in, the Dockerfile line that ADDs it, which layer is the
environment's, and what `verify --image` makes of the label io.gpuenv.env_layer. The builds
themselves: tests/images/test_conda_image.py and tests/images/test_verify_image.py."""

from __future__ import annotations

import dataclasses
import io
import os
import tarfile
from pathlib import Path

import pytest
from imagecases import CPU_LOCK_TEXT, ROOT, write_uv_lock
from stackcases import TORCH_CPU

from gpuenv.envs.buildtools import BuildTools
from gpuenv.errors import DataError, GpuenvError
from gpuenv.images import context
from gpuenv.images import plan as images
from gpuenv.images.verify import env_layer_finding

EPOCH = 1700000000


def _tree(root: Path, *, reverse: bool, hardlink: bool, mtime: int, private: bool) -> Path:
    """The same files written in another order, at another time, with other permissions, and
    one file as a hard link of another (as a package cache links them) or as a copy."""
    files = {"bin/tool": b"#!/bin/sh\n", "lib/a.py": b"a = 1\n", "lib/b.py": b"a = 1\n"}
    same = None  # the first written of the two files with the same bytes
    for rel, data in sorted(files.items(), reverse=reverse):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel.startswith("lib/") and hardlink and same is not None:
            os.link(same, path)
            continue
        same = path if rel.startswith("lib/") else same
        path.write_bytes(data)
        path.chmod(0o700 if rel.startswith("bin/") else (0o600 if private else 0o644))
    (root / "bin" / "python").symlink_to("python3.11")
    for path in [*root.rglob("*"), root]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def _archive(root: Path) -> bytes:
    out = io.BytesIO()
    context.write_env_archive(context.EnvArchive(root, "opt/gpuenv/env", EPOCH), out)
    return out.getvalue()


def test_the_environment_archive_depends_only_on_the_files(tmp_path):
    first = _tree(tmp_path / "a", reverse=False, hardlink=False, mtime=1, private=False)
    second = _tree(tmp_path / "b", reverse=True, hardlink=True, mtime=2_000_000_000, private=True)
    assert _archive(first) == _archive(second)
    with tarfile.open(fileobj=io.BytesIO(_archive(first))) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        "opt",
        "opt/gpuenv",
        "opt/gpuenv/env",
        "opt/gpuenv/env/bin",
        "opt/gpuenv/env/bin/python",
        "opt/gpuenv/env/bin/tool",
        "opt/gpuenv/env/lib",
        "opt/gpuenv/env/lib/a.py",
        "opt/gpuenv/env/lib/b.py",
    ], "the parent folders first (their times are the archive's), then by path"
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(EPOCH, 0, 0, "", "")}
    modes = {m.name.rsplit("/", 1)[-1]: (m.type, m.mode) for m in members}
    assert modes["tool"] == (tarfile.REGTYPE, 0o755) and modes["a.py"] == (tarfile.REGTYPE, 0o644)
    assert modes["b.py"] == (tarfile.REGTYPE, 0o644), "a hard link is written as a file"
    assert modes["python"][0] == tarfile.SYMTYPE and modes["env"] == (tarfile.DIRTYPE, 0o755)


def test_the_environment_archive_refuses_what_is_no_file_folder_or_link(tmp_path):
    root = _tree(tmp_path / "a", reverse=False, hardlink=False, mtime=1, private=False)
    os.mkfifo(root / "lib" / "pipe")
    with pytest.raises(DataError, match="pipe is neither a file"):
        _archive(root)


@pytest.fixture
def conda_plan(tmp_path):
    """A plan whose environment the host installed (a conda lock's, as supply_tools leaves it)."""
    lock = write_uv_lock(tmp_path / "lock", TORCH_CPU, CPU_LOCK_TEXT)
    env = _tree(tmp_path / "env", reverse=False, hardlink=False, mtime=1, private=False)
    uv = tmp_path / "uv"
    uv.write_bytes(b"a 38 MB binary")
    plan = images.plan_build(TORCH_CPU, lock, base_image="local/base:1")
    return dataclasses.replace(plan, tools=BuildTools(uv=uv, conda_env=env), epoch=EPOCH)


def test_a_host_installed_environment_travels_as_one_archive_with_no_installer(conda_plan):
    out = io.BytesIO()
    images.write_context(conda_plan, out)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        data = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert "install/tools/uv" not in data, "the install stage installs nothing: no uv is sent"
    assert data[context.ENV_ARCHIVE] == _archive(conda_plan.tools.conda_env)
    dockerfile = data["docker/Dockerfile"].decode().splitlines()
    assert context.ENV_FROM_HOST in dockerfile and context.ENV_FROM_INSTALL not in dockerfile
    # and the identity follows the archive's time
    later = dataclasses.replace(conda_plan, epoch=EPOCH + 1)
    assert (
        images.identify(conda_plan, "sha256:b").labels[images.INPUTS_LABEL]
        != (images.identify(later, "sha256:b").labels[images.INPUTS_LABEL])
    )


def test_a_uv_plan_keeps_the_install_stage_line():
    template = (ROOT / "docker" / "Dockerfile").read_bytes()
    lines = template.decode().splitlines()
    assert lines.count(context.ENV_FROM_INSTALL) == 1, "the line gpuenv rewrites for a conda lock"
    assert context.render_dockerfile(template, {}) == template


def test_a_uv_environment_is_dated_by_its_lock_and_copied_from_its_fixed_folder(
    tmp_path, monkeypatch
):
    """The uv path's environment layer: the install stage dates every file ENV_EPOCH (the lock's
    date, as a conda lock's archive) under the folder the final stage copies onto /, which a COPY
    dates itself (a folder it fills would take the build's time). Built: test_uv_image.py."""
    lock = write_uv_lock(tmp_path / "lock", TORCH_CPU, CPU_LOCK_TEXT)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH))
    plan = images.plan_build(TORCH_CPU, lock, base_image="local/base:1")
    assert plan.buildargs["ENV_EPOCH"] == str(EPOCH) == str(plan.epoch)
    assert "SOURCE_DATE_EPOCH" not in plan.buildargs, "given only to an engine that reads it"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH + 1))
    later = images.plan_build(TORCH_CPU, lock, base_image="local/base:1")
    assert later.buildargs["ENV_EPOCH"] == str(EPOCH + 1)
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    install_stage = dockerfile.split("\nFROM ${BASE_IMAGE}\n")[0]
    assert "ARG ENV_EPOCH" in install_stage
    copied = context.ENV_FROM_INSTALL.split()[2].rstrip("/")
    assert context.ENV_FROM_INSTALL.split()[3] == "/", "copied onto /: no folder it fills"
    script = (ROOT / "docker" / "install-env.sh").read_text()
    assert f"LAYER={copied}\n" in script and 'mv "$PREFIX" "$LAYER/opt/"' in script


@pytest.mark.parametrize(
    "version, builder, given",
    [
        ("20.10.24+dfsg1", "buildkit", False),  # this engine: BuildKit before v0.11
        ("23.0.6", "buildkit", False),
        ("24.0.0", "buildkit", True),
        ("27.3.1", "buildkit", True),
        ("27.3.1", "classic", False),  # the classic builder never reads it
        ("", "buildkit", False),  # not reported: not given
    ],
)
def test_source_date_epoch_goes_only_to_a_buildkit_that_reads_it(version, builder, given):
    arg = images.source_date_epoch_arg(version, builder, EPOCH)
    assert arg == ({"SOURCE_DATE_EPOCH": str(EPOCH)} if given else {})


def test_a_dockerfile_without_the_environment_line_is_refused_for_a_host_environment():
    with pytest.raises(DataError, match="must hold the line"):
        context.render_dockerfile(b"FROM x\nCOPY image/ /opt/gpuenv/\n", {}, env_from_host=True)


def test_the_environment_layer_is_the_second_to_last_and_never_in_the_base():
    layers = [f"sha256:{n}" for n in "abcdef"]
    assert images.env_layer(layers, base_layers=2) == "sha256:e"
    with pytest.raises(GpuenvError, match="no environment layer"):
        images.env_layer(layers[:3], base_layers=2)


def test_the_label_is_checked_against_the_engines_layers():
    layers = ["sha256:" + c * 64 for c in "abc"]
    said, wrong = env_layer_finding({images.ENV_LAYER_LABEL: layers[1]}, layers)
    assert not wrong and "layer 2 of 3" in said and "not run" in said
    said, wrong = env_layer_finding({images.ENV_LAYER_LABEL: "sha256:" + "f" * 64}, layers)
    assert wrong and "do not include the environment layer sha256:ffffffffffff" in said
    said, wrong = env_layer_finding({}, layers)
    assert not wrong and "not recorded" in said


def test_the_archive_streams_what_tarfile_writes_in_the_size_said_before(tmp_path):
    """Sent as it is read (no copy of the environment written on the way), so its size is
    computed first: both must match tarfile's own PAX writing, long names included."""
    root = _tree(tmp_path / "a", reverse=False, hardlink=False, mtime=1, private=False)
    deep = root / "lib" / ("d" * 90) / ("n" * 120 + "-é.py")
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"x" * 1000)
    members = context.env_archive_members(context.EnvArchive(root, "opt/gpuenv/env", EPOCH))
    data = _archive(root)
    assert len(data) == context.env_archive_size(members)
    expected = io.BytesIO()
    with tarfile.open(fileobj=expected, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, path in members:
            if path is None:
                tar.addfile(info)
            else:
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
    assert data == expected.getvalue()


def test_the_context_reads_every_chunk_even_past_an_empty_one():
    reader = context.ChunkReader(iter([b"ab", b"", b"cde", b"", b"f"]))
    assert [reader.read(4), reader.read(4), reader.read(4)] == [b"abcd", b"ef", b""]
