"""The access an installed prefix gets follows its parent folder, not the installer's umask
(gpuenv.envs.install.share_like_parent): real files and folders made under `umask 077`. And what a
killed install leaves beside a prefix is named, never removed (gpuenv.envs.install.leftovers)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuenv.envs.install import _make_parents, share_like_parent


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def private_tree(root: Path) -> None:
    """What uv makes under `umask 077`: 0700 folders, 0600 files, 0700 programs, and a link."""
    old = os.umask(0o077)
    try:
        (root / "bin").mkdir(parents=True)
        (root / "lib").mkdir()
        (root / "bin" / "python3.11").write_text("#!/bin/sh\n")
        (root / "bin" / "python3.11").chmod(0o700)
        (root / "lib" / "module.py").write_text("x = 1\n")
        (root / "bin" / "python").symlink_to("python3.11")
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    "parent_mode, folder, data, program",
    [
        (0o755, 0o755, 0o644, 0o755),  # a world-readable shared path: everyone may use it
        (0o750, 0o750, 0o640, 0o750),  # a group's folder: the group may
        (0o711, 0o755, 0o644, 0o755),  # others may reach in (not list): they may use the prefix
        (0o700, 0o700, 0o600, 0o700),  # a private folder stays private
        (
            0o2775,
            0o775,
            0o664,
            0o775,
        ),  # a team folder (setgid, group-writable): the team may reinstall
        (0o1777, 0o755, 0o644, 0o755),  # /tmp-like: world-writable, but nobody else ever gets write
    ],
)
def test_modes_follow_the_parent(tmp_path, parent_mode, folder, data, program):
    parent = tmp_path / "parent"
    parent.mkdir()
    parent.chmod(parent_mode)
    root = parent / "prefix"
    private_tree(root)
    share_like_parent(root, parent)
    assert mode(root) == folder and mode(root / "bin") == folder and mode(root / "lib") == folder
    assert mode(root / "lib" / "module.py") == data
    assert mode(root / "bin" / "python3.11") == program
    assert (root / "bin" / "python").is_symlink()


def test_missing_parents_are_made_with_their_parents_access_not_the_umask(tmp_path):
    top = tmp_path / "shared"
    top.mkdir()
    top.chmod(0o755)
    old = os.umask(0o077)
    try:
        made = _make_parents(top / "envs" / "team")
    finally:
        os.umask(old)
    assert made == [top / "envs", top / "envs" / "team"]
    assert mode(top / "envs") == 0o755 and mode(top / "envs" / "team") == 0o755


def test_leftovers_of_killed_installs_are_named_never_removed(tmp_path):
    """SIGKILL cannot be held: what it leaves beside a prefix is named at the next install (the
    process may be another host's on a shared file system, so nothing is removed)."""
    import subprocess

    from gpuenv.envs.install import leftovers

    gone = subprocess.Popen(["true"])
    gone.wait()
    prefix = tmp_path / "torch"
    names = [
        f".torch.{gone.pid}.abcd1234.tmp",
        f".torch.old-{gone.pid}",
        f".torch.{os.getpid()}.efgh5678.tmp",
        f".other.{gone.pid}.abcd1234.tmp",
        ".torch.notapid.tmp",
    ]
    for name in names:
        (tmp_path / name).mkdir()
    found = leftovers(prefix)
    assert [p.name for p in found] == sorted(
        [f".torch.{gone.pid}.abcd1234.tmp", f".torch.old-{gone.pid}"]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    assert leftovers(tmp_path / "missing" / "torch") == []
