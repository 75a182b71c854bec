"""Files out: atomic writes (readers see the old file or the new one, never half of it), a
folder replaced whole, and the checks on output paths (a name the system takes, an output that
would overwrite an input, a safe file-name component from untrusted text).

In validate/ because the suite runs where only this folder is copied; gpuenv uses it too.

What a destination already is decides how it is written, so that a write never destroys
something it was not asked to replace:
- a regular file: a temporary sibling that is renamed over it, keeping the file's mode (and
  owner, where this process may set it);
- a symbolic link: the link stays, and its final target is written the same way;
- a device node or a FIFO (`--output /dev/null`, `--output /dev/stdout`, a named pipe): opened
  and written in place; it is never replaced, since replacing /dev/null as root deletes it;
- a folder or a socket: refused.
Every failure is a `WriteFailed`, an OSError whose text is one line naming the path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable

from validate.signals import deliver, held_signals


class WriteFailed(OSError):
    """A destination could not be written; `str()` is one line naming the path and the reason.

    `user_fault` is True when the destination itself is wrong (unwritable, read-only, a folder),
    False when the system failed (disk full, I/O error): callers map them to different exit codes.
    """

    def __init__(self, path: Path, reason: str, code: int | None = None) -> None:
        super().__init__(code or 0, reason)
        self.path = path
        self.reason = reason
        self.errno = code

    @property
    def user_fault(self) -> bool:
        return self.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EIO)

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.reason}"


def os_error_reason(err: OSError) -> str:
    """An OSError as the few words a one-line message needs ("permission denied")."""
    if err.errno == errno.ENOSPC:  # the system's own words, whole: people search for them
        return "No space left on device (the previous file, if any, is unchanged)"
    if err.errno == errno.EROFS:
        return "the file system is read-only"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return err.strerror or type(err).__name__


def final_target(path: str | Path) -> Path:
    """The path a write to `path` lands on: symbolic links followed to their end (even dangling)."""
    target = Path(path)
    if target.is_symlink():
        return Path(os.path.realpath(target))
    return target


def write_text_atomic(path: str | Path, text: str | Iterable[str]) -> None:
    """Write `text` to `path` without ever leaving half a file or destroying a special file.
    `text` may come in pieces (an iterable of str), written as they come: a 470 MB fleet report
    is then never held whole, once as text and once more as bytes."""
    given = Path(path)
    try:
        st = os.stat(given)  # follows links, /proc's magic ones too (/dev/stdout into a pipe)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise WriteFailed(given, os_error_reason(err), err.errno) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise WriteFailed(given, "it is a folder", errno.EISDIR)
    if st is not None and stat.S_ISSOCK(st.st_mode):
        raise WriteFailed(given, "it is a socket", errno.ENXIO)
    pieces = (
        (text.encode("utf-8"),)
        if isinstance(text, str)
        else (piece.encode("utf-8") for piece in text)
    )
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_in_place(given, given, pieces)
    else:
        _replace(given, final_target(given), pieces, st)


def _write_in_place(given: Path, target: Path, pieces: Iterable[bytes]) -> None:
    """Device nodes and FIFOs: write through, as `cat > /dev/null` does."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CLOEXEC)
        try:
            for data in pieces:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except OSError as err:
        raise WriteFailed(given, os_error_reason(err), err.errno) from None


def _replace(
    given: Path, target: Path, pieces: Iterable[bytes], old: os.stat_result | None
) -> None:
    """Temp file in the same folder, then os.replace; the temp file is removed on any failure
    (an exception while the pieces are made too)."""
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as handle:
            for data in pieces:
                handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
            if (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
                try:
                    os.chown(tmp, old.st_uid, old.st_gid)
                except PermissionError:
                    pass  # only root may give a file away; the content is still right
        else:
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it 0600; a new file follows the umask
        os.replace(tmp, target)
        tmp = None
    except OSError as err:
        raise WriteFailed(given, os_error_reason(err), err.errno) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _lock_folder(folder: Path) -> int:
    """An exclusive fcntl lock on a folder itself, as an open descriptor (closing it releases the
    lock): concurrent writers take turns at a swap. Held for two renames only, and it leaves no
    lock file behind."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace_dir(new: Path, target: Path, *, redeliver: bool = True) -> list[int]:
    """Put the finished folder `new` in place of `target` (a lock, an installed prefix).

    Readers see the old folder or the new one, never a mix: the old one is renamed aside, the new
    one renamed in, the old one removed last (and put back if the second rename fails). Writers
    that finish together take turns under a lock on the parent folder.

    Once the lock is taken (Ctrl-C may stop the wait for it), interrupts are held until the swap
    and the removal of the old folder are done, so none leaves an `.old` folder or a missing
    target. They are then delivered (`redeliver`), or returned for a caller that reports the
    finished swap itself. The lock is released after the renames: the removal needs none.
    """
    old = None
    lock = _lock_folder(target.parent)
    with held_signals() as arrived:
        try:
            if target.exists():
                old = target.with_name(f".{target.name}.old-{os.getpid()}")
                if old.exists():
                    shutil.rmtree(old)
                os.replace(target, old)
            try:
                os.replace(new, target)
            except BaseException:
                if old is not None:
                    os.replace(old, target)
                raise
        finally:
            os.close(lock)  # the other writers' turn
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    if redeliver:
        deliver(arrived)
        return []
    return arrived


def path_problem(path: str | Path, *, folder: bool = False) -> str | None:
    """Why `path` can never be written by this program, or None: a NUL byte, a name longer than
    the file system allows (255 bytes on Linux) or a path past PATH_MAX. For a folder to make
    (`folder`), also a place under /proc, /sys or /dev (but /dev/shm), the kernel's pseudo file
    systems: a file there (/dev/stdout, /proc/self/fd/1) may be written, a folder never made."""
    text = os.fspath(path)
    if "\0" in text:
        return "it contains a NUL byte"
    absolute = os.path.abspath(text)
    if len(os.fsencode(absolute)) >= PATH_MAX:
        return f"the path is {len(os.fsencode(absolute))} bytes long; Linux allows {PATH_MAX - 1}"
    for part in Path(absolute).parts[1:]:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            return (
                f"the name {part[:24]}... is {size} bytes long; a file or folder name is at most "
                f"{NAME_MAX}"
            )
    if folder:
        for candidate in (absolute, os.path.realpath(absolute)):
            parts = Path(candidate).parts[1:3]
            if parts and parts[0] in KERNEL_PLACES and parts[:2] != ("dev", "shm"):
                return (
                    f"it is under /{parts[0]}, which the kernel provides: no folder can be made "
                    "there"
                )
    return None


#: The longest file name Linux file systems take (ext4, xfs, btrfs, tmpfs: NAME_MAX).
NAME_MAX = 255
#: The longest path Linux takes, with its final NUL (PATH_MAX).
PATH_MAX = 4096
#: Top-level folders that are the kernel's pseudo file systems, not storage.
KERNEL_PLACES = ("proc", "sys", "dev")


# --- outputs that must not touch inputs -----------------------------------------------------


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether writing `a` would land on the file `b` names: links followed, hard links too."""
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
        return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def output_clash(
    outputs: dict[str, str | Path | None], inputs: dict[str, str | Path | None]
) -> str | None:
    """Why one of these outputs (option -> path) would overwrite an input or another output, in
    words naming both options, or None. A run must never destroy what it reads or writes twice."""
    given_outputs = [(flag, path) for flag, path in outputs.items() if path]
    for flag, path in given_outputs:
        for source, read in inputs.items():
            if read and same_file(path, read):
                return f"{flag} {path} is {source}, which this run reads: it would be overwritten"
    for n, (flag, path) in enumerate(given_outputs):
        for other, other_path in given_outputs[n + 1 :]:
            if same_file(path, other_path):
                return f"{flag} and {other} name the same file {path}: each report needs its own"
    return None


def path_component(text: str, fallback: str = "host", limit: int = 64) -> str:
    """Untrusted text (a host or node name) as one safe file-name component: letters, digits,
    '.', '_' and '-' only, no leading dot, at most `limit` characters; `fallback` when nothing is
    left. A name with '/', '..', a newline or ESC can then never leave its folder or reach a
    terminal through a file name."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", text).lstrip(".-_")[:limit].rstrip(".")
    return cleaned or fallback
