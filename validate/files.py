"""Atomic file writes: readers see the old file or the new one, never half of it.

In validate/ because the suite runs where only this folder is copied; gpuenv's exports use it too.

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
import shutil
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


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


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` without ever leaving half a file or destroying a special file."""
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
    data = text.encode("utf-8")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_in_place(given, given, data)
    else:
        _replace(given, final_target(given), data, st)


def _write_in_place(given: Path, target: Path, data: bytes) -> None:
    """Device nodes and FIFOs: write through, as `cat > /dev/null` does."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    except OSError as err:
        raise WriteFailed(given, os_error_reason(err), err.errno) from None


def _replace(given: Path, target: Path, data: bytes, old: os.stat_result | None) -> None:
    """Temp file in the same folder, then os.replace; the temp file is removed on any failure."""
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as handle:
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


#: The signals that end a run from outside (Ctrl-C, kill, a closed terminal).
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def held_signals() -> Iterator[list[int]]:
    """Hold Ctrl-C, SIGTERM and SIGHUP while a few steps must finish together (a swap and its
    cleanup); yields the list of those that arrived, for the caller to act on afterwards.

    Python runs signal handlers between bytecodes, so an interrupt could otherwise land between
    two renames, or halfway through removing the old folder, and leave it behind. Only the main
    thread can set handlers (signals are delivered there): elsewhere nothing is held.
    """
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return
    # A signal the program ignores (nohup, a background job) stays ignored: holding it would revive it.
    ignored = {signum for signum in HELD_SIGNALS if signal.getsignal(signum) is signal.SIG_IGN}
    previous = {signum: signal.signal(signum, lambda signum, _frame: arrived.append(signum))
                for signum in HELD_SIGNALS if signum not in ignored}
    try:
        yield arrived
    finally:
        for signum, handler in previous.items():
            # None: a handler set outside Python, which cannot be put back; the default is the nearest
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def deliver(signums: list[int]) -> None:
    """Deliver held signals now, to the handlers the program had (KeyboardInterrupt for Ctrl-C)."""
    for signum in dict.fromkeys(signums):
        signal.raise_signal(signum)


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
            return f"the name {part[:24]}... is {size} bytes long; a file or folder name is at most {NAME_MAX}"
    if folder:
        for candidate in (absolute, os.path.realpath(absolute)):
            parts = Path(candidate).parts[1:3]
            if parts and parts[0] in KERNEL_PLACES and parts[:2] != ("dev", "shm"):
                return f"it is under /{parts[0]}, which the kernel provides: no folder can be made there"
    return None


#: The longest file name Linux file systems take (ext4, xfs, btrfs, tmpfs: NAME_MAX).
NAME_MAX = 255
#: The longest path Linux takes, with its final NUL (PATH_MAX).
PATH_MAX = 4096
#: Top-level folders that are the kernel's pseudo file systems, not storage.
KERNEL_PLACES = ("proc", "sys", "dev")


def json_nesting_depth(text: str, stop_above: int | None = None) -> int:
    """How deep JSON's brackets go (outside strings), without parsing it: json's decoder recurses
    once per level and fails on deep input, so callers refuse deep files before decoding. Stops
    counting once the depth passes `stop_above`."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest
