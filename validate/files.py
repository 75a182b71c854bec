"""Files in and out: atomic writes (readers see the old file or the new one, never half of it),
the one bounded reader of untrusted input files (at the end), and the path checks of both.

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
import itertools
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable, Iterator

from validate.signals import deliver, held_signals
from validate.text import safe_text


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


#: A JSON string, escapes included (the unrolled form: linear, no backtracking).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
#: A run of anything but brackets: json_nesting_depth's cut.
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_BRACKET_BYTE_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
#: Every byte but a quote and the four brackets: what _brackets_outside_strings deletes.
_NOT_QUOTE_OR_BRACKET = bytes(b for b in range(256) if b not in b'"[]{}')


def _brackets_outside_strings(text: str) -> bytes:
    """The brackets of JSON text that are outside its strings, when no quote in it follows a
    backslash: then every quote opens or closes a string (an escape inside a string skips a
    character that is not a quote; outside one a backslash means nothing), so what lies between
    the 2nth and the (2n+1)th quote is outside. In C: the text's UTF-8 bytes (no multi-byte
    character holds an ASCII byte) cut down to quotes and brackets, split at the quotes. A
    string that never closes leaves the last piece at an odd place: dropped, as it should be.
    About 20 times faster than the regex: a 12,500-host folder is 500 M characters."""
    kept = text.encode("utf-8", "surrogatepass").translate(None, _NOT_QUOTE_OR_BRACKET)
    return b"".join(kept.split(b'"')[0::2])


def _without_strings(text: str) -> str:
    """JSON with every string emptied (in C, by one regex): brackets and commas left are syntax."""
    return _JSON_STRING.sub('""', text)


def json_nesting_depth(text: str, stop_above: int | None = None) -> int:
    """How deep JSON's brackets go (outside strings), without parsing it: json's decoder recurses
    once per level and fails on deep input, so callers refuse deep files before decoding. Stops
    counting once the depth passes `stop_above`.

    The regex engine does the per-character work (a 1,000-host report folder is 40 M characters,
    and a loop per character took 1.4 s of its 3.8): strings are cut out whole (an unterminated
    one with everything after it), then only the brackets left are counted. Text with no quote
    after a backslash (nearly every report) takes a faster cut, _brackets_outside_strings."""
    if "\\" not in text or '\\"' not in text:  # the first test is a memchr: no backslash at all
        brackets = _brackets_outside_strings(text)
    else:
        outside = _JSON_STRING.sub("", text)
        open_quote = outside.find('"')
        if open_quote >= 0:  # a string that never closes: nothing after its quote is outside one
            outside = outside[:open_quote]
        brackets = _NOT_BRACKETS.sub("", outside).encode("ascii")
    deepest = 0
    for depth in itertools.accumulate(map(_BRACKET_BYTE_STEP.__getitem__, brackets)):
        if depth > deepest:
            deepest = depth
            if stop_above is not None and deepest > stop_above:
                break
    return deepest


def json_value_count(text: str) -> int:
    """How many values JSON holds at least (every ',' separates two; each object and list is one
    more), counted in C without decoding: the decoder builds every value first, and a 10 MB file
    of 3.5 million zeros then costs seconds in every reader after it."""
    bare = _without_strings(text)
    return bare.count(",") + bare.count("[") + bare.count("{") + 1


def json_repeated_key(text: str) -> tuple[str, int, int] | None:
    """The first key given twice in one JSON object, with the lines of both: (key, first, second),
    or None. json keeps the last silently; a config file's second `gpuenv` would drop the first's
    settings without a word. Scanned without parsing (call after the depth check); keys are
    compared as json decodes them, so `"cuda"` and `"cu\\u0064a"` are the same key."""
    objects: list[dict[str, int] | None] = []  # per open bracket: keys seen so far (None: a list)
    line, pending = (
        1,
        None,
    )  # pending: the last string closed, and its line, until ':' or another token
    position, size = 0, len(text)
    while position < size:
        char = text[position]
        if char == '"':
            end = position + 1
            while end < size and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            pending = (_decoded_key(text[position + 1 : end]), line)
            line += text.count("\n", position, end)
            position = end + 1
            continue
        if char == "\n":
            line += 1
        elif char == ":" and pending is not None and objects and objects[-1] is not None:
            key, at = pending
            if key in objects[-1]:
                return key, objects[-1][key], at
            objects[-1][key] = at
        elif char in "{[":
            objects.append({} if char == "{" else None)
        elif char in "}]" and objects:
            objects.pop()
        if not char.isspace() and char != ":":
            pending = None
        position += 1
    return None


def _decoded_key(raw: str) -> str:
    """A JSON string's text as json decodes it (escapes resolved); the raw text if it is broken
    (the decoder names that error itself)."""
    if "\\" not in raw:
        return raw
    try:
        return json.loads(f'"{raw}"')
    except ValueError:
        return raw


# --- reading untrusted files ----------------------------------------------------------------
# Every file gpuenv reads that someone else wrote (captures, recordings, node reports,
# baselines, config files, wheelhouse entries) goes through `read_input`: a regular file only
# (a FIFO would hang the read, /dev/zero fill memory, a folder named x.json is no file), never
# more than the caller's limit read, and text decoded by `decode_input`, which names what it
# cannot read. Callers wrap `InputRefused` in their own error, which names the file and the fix.


class InputRefused(ValueError):
    """An input file that is refused unparsed; `str()` is the reason in a few words, no path.
    `line` is where in the file, when known (a config error is shown as `file:line: reason`)."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.line = line


class RepeatedKey(InputRefused):
    """A key given twice in one JSON object: `key`, and the lines of both (`first`, `line`)."""

    def __init__(self, key: str, first: int, second: int) -> None:
        super().__init__(
            f"key {safe_text(key, limit=60)!r} given twice in one object (lines {first} and "
            f"{second})",
            second,
        )
        self.key = key
        self.first = first


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in the words a message needs."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def is_within(path: str | Path, folder: str | Path) -> bool:
    """Whether `path`, links followed, is in `folder` (links followed too)."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def _refuse_kind(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise InputRefused(f"it is {file_kind(mode)}, not a regular file")


def read_input(path: str | Path, limit: int, *, within: str | Path | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; InputRefused for anything else.
    With `within`, the file must really be in that folder: a link to a file elsewhere (someone
    else's file, shown in every report) is refused. See `input_blocks`."""
    return b"".join(input_blocks(path, limit, within=within))


def input_blocks(
    path: str | Path, limit: int, *, within: str | Path | None = None, block: int = 1 << 20
) -> Iterator[bytes]:
    """A regular file of at most `limit` bytes, in blocks (to hash a wheel without holding it).

    The kind is checked before opening (a device is never opened: a tape would rewind) and again
    on the open descriptor (the path may be swapped meanwhile); the open does not block, so a
    FIFO put there meanwhile cannot hang it. At most `limit` + 1 bytes are ever read, however
    the file grows after the size was checked.
    """
    try:
        _refuse_kind(os.stat(path).st_mode)
        if within is not None and not is_within(path, within):
            raise InputRefused(f"it is a link to a file outside {within}")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputRefused("it does not exist") from None
    except OSError as err:
        raise InputRefused(f"it cannot be read ({os_error_reason(err)})") from None
    except ValueError as err:
        if isinstance(err, InputRefused):
            raise
        raise InputRefused("the path holds a NUL byte") from None
    try:
        info = os.fstat(fd)
        _refuse_kind(info.st_mode)
        if info.st_size > limit:
            raise InputRefused(f"it is {_size(info.st_size)}, over the {_size(limit)} limit")
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, block))
            if not chunk:
                return
            size += len(chunk)
            if size > limit:
                raise InputRefused(f"it grew past the {_size(limit)} limit while being read")
            yield chunk
    except OSError as err:
        raise InputRefused(f"it cannot be read ({os_error_reason(err)})") from None
    finally:
        os.close(fd)


def _size(count: int) -> str:
    """A limit in its unit (16 MiB); any other size exactly, in bytes (1,048,577 bytes)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count:,} bytes"


_BOMS = (
    (b"\xef\xbb\xbf", "utf-8", "UTF-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le", "UTF-32"),
    (b"\x00\x00\xfe\xff", "utf-32-be", "UTF-32"),
    (b"\xff\xfe", "utf-16-le", "UTF-16"),  # PowerShell's `>` writes this
    (b"\xfe\xff", "utf-16-be", "UTF-16"),
)


def decode_input(data: bytes) -> str:
    """Text from an input file's bytes: UTF-8, or UTF-8/UTF-16/UTF-32 with a byte-order mark (a
    file saved on Windows). Anything else is refused by name, with where it went wrong."""
    for bom, codec, name in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom) :].decode(codec)
            except UnicodeDecodeError as err:
                raise InputRefused(
                    f"{name} with a byte-order mark, but broken at byte {err.start + len(bom)}"
                ) from None
    if b"\0" in data:  # valid UTF-8, but no text format read here allows NUL
        head = data[:4096]
        if head[0::2].count(0) > len(head) // 4 or head[1::2].count(0) > len(head) // 4:
            raise InputRefused("UTF-16 without a byte-order mark: save it as UTF-8")
        raise InputRefused(f"binary data (a NUL byte at offset {data.index(0)}), not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise InputRefused(
            f"not UTF-8 text (byte 0x{data[err.start]:02x} on line {line}): save it as UTF-8"
        ) from None


def refusal_line(name: str | Path, err: InputRefused) -> str:
    """A refusal as config and lock errors show it, `name:line: reason` (json's own words, without
    the position the prefix already gives)."""
    reason = str(err)
    if reason.startswith("not JSON ("):
        reason = "not valid JSON (" + reason.removeprefix("not JSON (").split(" at line ")[0] + ")"
    elif reason.startswith("JSON nested"):
        reason = reason.removeprefix("JSON ")
    return f"{name}:{err.line}: {reason}" if err.line else f"{name}: {reason}"


def read_text_input(path: str | Path, limit: int) -> str:
    """`read_input` then `decode_input`: the text of a small regular file, or InputRefused."""
    return decode_input(read_input(path, limit))


def load_json_input(
    text: str, *, max_depth: int, max_digits: int = 30, max_values: int | None = None
) -> object:
    """JSON from untrusted text: nesting past `max_depth` and more than `max_values` values
    refused before decoding (the decoder recurses once per level, and builds every value),
    integers longer than `max_digits` refused (int() of 5,000 digits is slow, and no count or
    figure is that long), NaN, Infinity and overflowing floats refused, and a key given twice in
    one object refused, keys compared as decoded (json keeps the last silently)."""
    depth = json_nesting_depth(text, stop_above=max_depth)
    if depth > max_depth:
        raise InputRefused(f"JSON nested more than {max_depth} levels deep")
    if max_values is not None and (count := json_value_count(text)) > max_values:
        raise InputRefused(f"JSON of {count:,} values; at most {max_values:,} are read")

    def whole(digits: str) -> int:
        if len(digits.lstrip("-")) > max_digits:
            raise InputRefused(
                f"a {len(digits.lstrip('-'))}-digit number; at most {max_digits} digits are read",
                longest_digit_run(text, max_digits)[1] or None,
            )
        return int(digits)

    def real(literal: str) -> float:
        if len(literal) > max_digits + 16:
            raise InputRefused(
                f"a number of {len(literal)} characters; at most {max_digits + 16} are read"
            )
        value = float(literal)
        if value in (float("inf"), float("-inf")):
            raise InputRefused(f"the number {literal[:20]} is out of range")
        return value

    def constant(name: str) -> float:
        raise InputRefused(f"{name} is not a JSON number")

    def unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
        out = dict(pairs)
        if len(out) < len(
            pairs
        ):  # keys as decoded: "cu\u0064a" is "cuda"; the scan finds both lines
            key, first, second = json_repeated_key(text) or (
                next(k for n, (k, _) in enumerate(pairs) if k in dict(pairs[:n])),
                0,
                0,
            )
            raise RepeatedKey(key, first, second)
        return out

    try:
        return json.loads(
            text,
            parse_int=whole,
            parse_float=real,
            parse_constant=constant,
            object_pairs_hook=unique_keys,
        )
    except json.JSONDecodeError as err:
        raise InputRefused(
            f"not JSON ({err.msg} at line {err.lineno} column {err.colno})", err.lineno
        ) from None
    except RecursionError:  # belt and braces: the depth was checked above
        raise InputRefused("JSON nested too deep") from None


_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def longest_digit_run(text: str, stop_above: int) -> tuple[int, int]:
    """(digits, line) of the first run of more than `stop_above` decimal digits, or (0, 0): a
    count or figure that long is an attack on int() and float(), not a measurement."""
    if text.isascii():  # the common case, in C: every digit made "0", then one substring search
        start = text.encode("ascii").translate(_DIGITS_AS_ZERO).find(b"0" * (stop_above + 1))
    # int() reads every script's digits: the regex knows them all (a regex scan is 50 ns a
    # character)
    else:
        match = re.search(r"\d{%d,}" % (stop_above + 1), text)
        start = -1 if match is None else match.start()
    if start < 0:
        return 0, 0
    whole = re.compile(r"\d+").match(text, start)
    assert whole is not None  # the search above matched digits there
    return len(whole.group()), text.count("\n", 0, start) + 1


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
