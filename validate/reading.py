"""Files in: the one bounded reader of untrusted input files, and the cheap checks a JSON text
passes before it is parsed (nesting depth, value count, a key given twice, digit runs).

In validate/ because the suite runs where only this folder is copied; gpuenv uses it too.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from pathlib import Path
from typing import Iterator

from validate.text import safe_text
from validate.writing import os_error_reason

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
