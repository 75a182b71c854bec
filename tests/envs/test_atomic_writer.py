"""validate/writing.py, the one writer of gpuenv and the suite, on real special files and mounts.

Device nodes are made with mknod in a temporary folder; the read-only bind mount and the small
tmpfs are mounted by the test (it runs as root) and unmounted by it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from validate.writing import WriteFailed, write_text_atomic


def test_new_file_follows_the_umask_and_leaves_no_temp_file(tmp_path):
    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "sub" / "a.txt", "new\n")
    finally:
        os.umask(old)
    path = tmp_path / "sub" / "a.txt"
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert [p.name for p in path.parent.iterdir()] == ["a.txt"]


def test_existing_file_keeps_its_mode_and_owner(tmp_path):
    path = tmp_path / "secret.yml"
    path.write_text("old\n")
    path.chmod(0o600)
    if os.getuid() == 0:
        os.chown(path, 4321, 4322)
    write_text_atomic(path, "new\n")
    st = path.stat()
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(st.st_mode) == 0o600
    if os.getuid() == 0:
        assert (st.st_uid, st.st_gid) == (4321, 4322)


def test_symlink_is_kept_and_its_target_written(tmp_path):
    real = tmp_path / "real" / "env.yml"
    real.parent.mkdir()
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link.yml"
    link.symlink_to(Path("real") / "env.yml")
    chain = tmp_path / "chain.yml"
    chain.symlink_to(link)
    write_text_atomic(chain, "through two links\n")
    assert chain.is_symlink() and link.is_symlink()
    assert os.readlink(link) == "real/env.yml"
    assert real.read_text() == "through two links\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in real.parent.iterdir()) == ["env.yml"]


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "out.yml"
    link.symlink_to(tmp_path / "made.yml")
    write_text_atomic(link, "x\n")
    assert link.is_symlink() and (tmp_path / "made.yml").read_text() == "x\n"


def _mknod_char(path: Path, major: int, minor: int) -> None:
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError as err:
        pytest.skip(f"mknod of a character device in {path.parent} is not permitted here: {err}")


def test_device_node_is_written_in_place_never_replaced(tmp_path):
    null = tmp_path / "null"
    _mknod_char(null, 1, 3)  # the same device as /dev/null
    before = null.stat()
    write_text_atomic(null, "into the void\n" * 1000)
    after = null.lstat()
    assert stat.S_ISCHR(after.st_mode), "the device node was replaced by a plain file"
    assert after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    assert [p.name for p in tmp_path.iterdir()] == ["null"]


def test_symlink_to_a_device_writes_through(tmp_path):
    null = tmp_path / "null"
    _mknod_char(null, 1, 3)
    link = tmp_path / "out"
    link.symlink_to(null)
    write_text_atomic(link, "x\n")
    assert link.is_symlink() and stat.S_ISCHR(null.lstat().st_mode)


def test_full_device_gives_one_line(tmp_path):
    full = tmp_path / "full"
    _mknod_char(full, 1, 7)  # /dev/full: every write fails with ENOSPC
    with pytest.raises(WriteFailed) as caught:
        write_text_atomic(full, "x\n")
    assert (
        str(caught.value)
        == f"cannot write {full}: No space left on device (the previous file, if any, is unchanged)"
    )
    assert stat.S_ISCHR(full.lstat().st_mode)


def test_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_text_atomic(fifo, "through the pipe\n")
    reader.join(10)
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_folder_is_refused(tmp_path):
    with pytest.raises(WriteFailed, match="it is a folder"):
        write_text_atomic(tmp_path, "x")


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {proc.stderr.strip()}")


@pytest.fixture
def read_only_dir(tmp_path):
    """A read-only bind mount of a folder that holds old.txt; unmounted afterwards."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "old.txt").write_text("old\n")
    view = tmp_path / "ro"
    view.mkdir()
    _mount("--bind", str(source), str(view))
    try:
        _mount("-o", "remount,ro,bind", str(view))
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs holding old.txt; unmounted afterwards."""
    view = tmp_path / "tiny"
    view.mkdir()
    _mount("-t", "tmpfs", "-o", "size=64k", "tmpfs", str(view))
    try:
        (view / "old.txt").write_text("old\n")
        yield view
    finally:
        subprocess.run(["umount", str(view)], check=True)


def test_read_only_mount_gives_one_line_and_keeps_the_old_file(read_only_dir):
    with pytest.raises(WriteFailed) as caught:
        write_text_atomic(read_only_dir / "old.txt", "new\n")
    assert (
        str(caught.value)
        == f"cannot write {read_only_dir / 'old.txt'}: the file system is read-only"
    )
    assert caught.value.user_fault
    assert (read_only_dir / "old.txt").read_text() == "old\n"


def test_full_tmpfs_gives_one_line_and_keeps_the_old_file(tiny_tmpfs):
    with pytest.raises(WriteFailed) as caught:
        write_text_atomic(tiny_tmpfs / "old.txt", "x" * 1024 * 1024)
    assert "No space left on device" in str(caught.value)
    assert not caught.value.user_fault
    assert (tiny_tmpfs / "old.txt").read_text() == "old\n"
    assert [p.name for p in tiny_tmpfs.iterdir()] == ["old.txt"], (
        "the temporary file was left behind"
    )


def test_dev_stdout_into_a_pipe_is_written_through(tmp_path):
    """`invoke export --output /dev/stdout | less`: /dev/stdout is a link to a pipe, not a path to
    replace."""
    import sys

    code = (
        "import sys; from validate.writing import write_text_atomic; "
        "write_text_atomic('/dev/stdout', 'to the pipe\\n')"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "to the pipe\n"


def test_text_in_pieces_is_written_as_it_comes_and_a_failing_maker_leaves_the_old_file(tmp_path):
    path = tmp_path / "fleet.json"
    path.write_text("old\n")
    made: list[int] = []

    def pieces():
        for n in range(3):
            made.append(n)
            yield f"piece {n}\n"

    write_text_atomic(path, pieces())
    assert path.read_text() == "piece 0\npiece 1\npiece 2\n" and made == [0, 1, 2]

    def broken():
        yield "half of a report\n"
        raise RuntimeError("the renderer failed")

    with pytest.raises(RuntimeError):
        write_text_atomic(path, broken())
    assert path.read_text() == "piece 0\npiece 1\npiece 2\n"  # never half a file
    assert [p.name for p in tmp_path.iterdir()] == ["fleet.json"]  # and no temp file left

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_text_atomic(fifo, iter(["a", "b\n"]))  # a FIFO is written through, piece by piece
    reader.join(10)
    assert got == [b"ab\n"]
