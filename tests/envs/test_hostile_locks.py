"""Hostile lock files (issue 29): a lock directory comes from the team's repository, so its
stack.json and lock file are untrusted input and go through the one bounded reader
(validate.reading): regular files only, a size limit, a nesting and an integer-size limit, decoded
repeated keys, encodings detected or named. Each case is one line naming the file and the fix,
never a hang (a FIFO), a MemoryError (/dev/zero) or a traceback (deep JSON, 5,000 digits)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuenv.envs import lockdir
from gpuenv.errors import DataError


def _fifo(path: Path) -> None:
    os.mkfifo(path)


HOSTILE_METADATA = [
    ("fifo", _fifo, "stack.json: it is a FIFO (named pipe), not a regular file"),
    (
        "dev-zero",
        lambda p: p.symlink_to("/dev/zero"),
        "stack.json: it is a device, not a regular file",
    ),
    ("folder", lambda p: p.mkdir(), "stack.json: it is a folder, not a regular file"),
    (
        "digits",
        lambda p: p.write_text('{"lock_format": ' + "9" * 5000 + "}"),
        "stack.json:1: a 5000-digit number; at most 30 digits are read",
    ),
    (
        "deep",
        lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
        "stack.json: nested more than 16 levels deep",
    ),
    (
        "repeated",
        lambda p: p.write_text('{"backend": "uv",\n"b\\u0061ckend": "conda-lock"}'),
        "key 'backend' given twice in one object (lines 1 and 2)",
    ),
    ("nan", lambda p: p.write_text('{"lock_format": NaN}'), "stack.json: NaN is not a JSON number"),
    (
        "utf16-no-mark",
        lambda p: p.write_bytes('{"a": 1}'.encode("utf-16-le")),
        "stack.json: UTF-16 without a byte-order mark",
    ),
]


@pytest.mark.parametrize(
    "name, spoil, words", HOSTILE_METADATA, ids=[c[0] for c in HOSTILE_METADATA]
)
def test_hostile_lock_metadata_is_one_line(tmp_path, name, spoil, words):
    spoil(tmp_path / lockdir.METADATA_FILE)
    with pytest.raises(DataError) as caught:
        lockdir.read_metadata(tmp_path)
    line = caught.value.render()
    assert f"{tmp_path / lockdir.METADATA_FILE}" in line and words in line and "\n" not in line, (
        line
    )


def test_a_utf16_metadata_with_its_mark_is_read_as_the_same_file(tmp_path):
    """PowerShell writes UTF-16 with a mark: decoded, then judged on its content like UTF-8."""
    (tmp_path / lockdir.METADATA_FILE).write_bytes("{}".encode("utf-16"))
    with pytest.raises(DataError, match="no lock_format: not a gpuenv lock's metadata"):
        lockdir.read_metadata(tmp_path)


@pytest.mark.parametrize(
    "spoil, words",
    [
        (_fifo, "it is a FIFO (named pipe), not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "it is a device, not a regular file"),
        (
            lambda p: p.write_bytes(b"version: 1\n# caf\xe9\n"),
            "not UTF-8 text (byte 0xe9 on line 2)",
        ),
    ],
    ids=["fifo", "dev-zero", "latin-1"],
)
def test_hostile_lock_files_are_one_line(tmp_path, spoil, words):
    for read, name in (
        (lockdir.read_conda_lock, "conda-lock.yml"),
        (lockdir.read_requirements_lock, "requirements.lock.txt"),
    ):
        path = tmp_path / name
        spoil(path)
        with pytest.raises(DataError) as caught:
            read(path)
        assert caught.value.render().startswith(f"{path}: {words}"), caught.value.render()


@pytest.mark.parametrize(
    "spoil, words",
    [
        (_fifo, "current.json: it is a FIFO (named pipe), not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "current.json: it is a device, not a regular file"),
        (
            lambda p: p.write_text('{"format": "gpuenv-current-stack/1", "x": ' + "9" * 5000 + "}"),
            "a 5000-digit number; at most 30 digits are read",
        ),
        (
            lambda p: p.write_text('{"stack_id": "a",\n"st\\u0061ck_id": "b"}'),
            "key 'stack_id' given twice in one object (lines 1 and 2)",
        ),
    ],
    ids=["fifo", "dev-zero", "digits", "repeated"],
)
def test_the_remembered_current_stack_is_read_bounded(tmp_path, spoil, words):
    """envs/locks/current.json is shared with the lock directory: read like every other input."""
    from gpuenv.envs import current

    spoil(current.current_file(tmp_path))
    with pytest.raises(DataError) as caught:
        current.read(tmp_path)
    assert words in caught.value.render() and "\n" not in caught.value.render(), (
        caught.value.render()
    )
