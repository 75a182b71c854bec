"""`invoke export --output X` for every kind of X people give: devices, links, read-only and full
mounts.

A real invoke process each time; devices are made with mknod in a temporary folder, mounts are
made by the test (as root) and unmounted by it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CPU_ARGS = ("--cuda", "cpu", "--framework", "torch", "--torch", "2.13.0", "--python", "3.11")


def export(output: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUENV_LOCKS_DIR": str(tmp_path / "locks"), "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "invoke",
        "--search-root",
        str(ROOT),
        "export",
        *CPU_ARGS,
        "--unpinned",
        "--output",
        str(output),
    ]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {proc.stderr.strip()}")


def test_export_to_a_device_node_writes_through_and_keeps_it(tmp_path):
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError as err:
        pytest.skip(f"mknod is not permitted here: {err}")
    done = export(null, tmp_path)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISCHR(null.lstat().st_mode), "the device node was replaced by a plain file"


def test_export_through_a_symlink_keeps_the_link_and_the_mode(tmp_path):
    real = tmp_path / "shared" / "environment.yml"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o600)
    link = tmp_path / "environment.yml"
    link.symlink_to(real)
    done = export(link, tmp_path)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and "torch==2.13.0+cpu" in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o600


def test_export_to_a_read_only_mount_is_one_line_exit_2(tmp_path):
    source, view = tmp_path / "source", tmp_path / "ro"
    source.mkdir()
    view.mkdir()
    (source / "environment.yml").write_text("old\n")
    _mount("--bind", str(source), str(view))
    try:
        _mount("-o", "remount,ro,bind", str(view))
        done = export(view / "environment.yml", tmp_path)
    finally:
        subprocess.run(["umount", str(view)], check=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"gpuenv: --output cannot write {view / 'environment.yml'}: the file system is "
        "read-only: give a path in a folder you can write"
    ]
    assert (source / "environment.yml").read_text() == "old\n"


def test_export_to_a_full_mount_is_one_line_and_keeps_the_old_file(tmp_path):
    view = tmp_path / "tiny"
    view.mkdir()
    _mount("-t", "tmpfs", "-o", "size=4k", "tmpfs", str(view))
    try:
        (view / "environment.yml").write_text("old\n")
        with open(view / "filler", "wb") as fh:  # fill the rest of the mount
            try:
                fh.write(b"x" * 65536)
            except OSError:
                pass
        done = export(view / "environment.yml", tmp_path)
        assert done.returncode == 1, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
        assert "No space left on device" in done.stderr
        assert (view / "environment.yml").read_text() == "old\n"
        assert sorted(p.name for p in view.iterdir()) == ["environment.yml", "filler"]
    finally:
        subprocess.run(["umount", str(view)], check=True)
