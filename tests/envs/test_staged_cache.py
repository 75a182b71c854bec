"""The conda environment staged in the build cache (condalock.stage_for_image) is checked
against its manifest before it is reused: before, one that lost a file failed every later build
of that lock and staging again never repaired it, and one that lost a package built an image
without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from lockcases import TORCH_CPU

from gpuenv.envs import condalock, lockdir
from gpuenv.envs.locking import ensure_lock


def test_a_lost_added_or_changed_entry_is_named(tmp_path):
    staged = tmp_path / "abc-linux-64"
    (staged / "conda-meta").mkdir(parents=True)
    (staged / "conda-meta" / "zlib-1.3-0.json").write_text("{}")
    (staged / "bin").mkdir()
    (staged / "bin" / "python").write_text("#!")
    (staged / "bin" / "python3").symlink_to("python")
    manifest = tmp_path / "abc-linux-64.manifest.json"
    manifest.write_text(json.dumps(condalock.tree_manifest(staged)))
    assert condalock.staged_damage(staged, manifest) is None
    (staged / "conda-meta" / "zlib-1.3-0.json").unlink()
    assert condalock.staged_damage(staged, manifest) == "conda-meta/zlib-1.3-0.json is missing"
    (staged / "conda-meta" / "zlib-1.3-0.json").write_text("{} ")
    assert condalock.staged_damage(staged, manifest) == "conda-meta/zlib-1.3-0.json changed"
    (staged / "conda-meta" / "zlib-1.3-0.json").write_text("{}")
    (staged / "stray").write_text("x")
    assert condalock.staged_damage(staged, manifest) == "stray was added"
    manifest.unlink()
    assert condalock.staged_damage(staged, manifest).startswith(
        "its manifest abc-linux-64.manifest.json: it does not exist"
    )


@pytest.fixture
def staged_lock(conda_channel, standin_wheels, locks_dir, pypi, tmp_path):
    team = tmp_path / "team.yml"
    team.write_text(yaml.safe_dump({"conda": ["gpuenv-probe", "gpuenv-hello"], "pip": []}))
    mirrors = {"https://conda.anaconda.org/conda-forge": conda_channel.as_uri()}
    lock = ensure_lock(
        TORCH_CPU,
        backend="conda-lock",
        wheelhouse=standin_wheels,
        mirrors={"conda-forge": conda_channel.as_uri()},
        team_file=team,
    )
    path = lock.directory / condalock.CONDA_LOCK_FILE
    return path, lockdir.file_sha256(path), mirrors, standin_wheels


@pytest.mark.parametrize("damage", ["lost-file", "lost-package"])
def test_a_damaged_staged_environment_is_staged_again(staged_lock, tmp_path, damage):
    lock_path, lock_sha256, mirrors, wheels = staged_lock
    said: list[str] = []

    def stage() -> Path:
        return condalock.stage_for_image(
            lock_path,
            stack=TORCH_CPU,
            lock_sha256=lock_sha256,
            platform="linux-64",
            target="the base image",
            mirrors=mirrors,
            wheelhouse=wheels,
            offline=False,
            cache_root=tmp_path / "cache",
            say=said.append,
        )

    staged = stage()
    whole = condalock.tree_manifest(staged)
    meta = sorted((staged / "conda-meta").glob("gpuenv-hello-*.json"))
    assert meta, "the lock's gpuenv-hello package is staged"
    if damage == "lost-file":
        (staged / "bin" / "python").unlink()
    else:  # the package's files and its record, as a cleaner would remove them
        for entry in json.loads(meta[0].read_text())["files"]:
            (staged / entry).unlink(missing_ok=True)
        meta[0].unlink()
    said.clear()
    assert stage() == staged
    assert any("is damaged" in line and "staging it again" in line for line in said), said
    assert condalock.tree_manifest(staged) == whole, "staged again whole"
    said.clear()
    stage()
    assert any("is staged already" in line for line in said), said
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")], (
        "nothing left beside it"
    )
