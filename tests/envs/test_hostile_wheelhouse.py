"""Hostile wheelhouse entries: a `.whl` that is not a regular file (a folder named x.whl, a FIFO,
a link to /dev/zero, a dangling link, a link loop, a socket) is one line naming it, exit 2, at
once, in every command that takes --wheelhouse; hashing reads through the one bounded reader."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hangbound import HANG_BOUND_S

from gpuenv.envs import wheelhouse
from gpuenv.errors import BadInput

REPO = Path(__file__).resolve().parents[2]
WHEEL = "demo-1.0-py3-none-any.whl"


def hostile_entries(folder: Path) -> dict[str, str]:
    """Make one hostile .whl per kind in its own wheelhouse under `folder`; kind -> what is said."""
    made = {}

    def house(kind: str) -> Path:
        place = folder / kind
        place.mkdir()
        (place / WHEEL).write_bytes(b"PK\x05\x06" + b"\0" * 18)  # a real (empty zip) file beside it
        return place

    (house("folder") / "x-1.0-py3-none-any.whl").mkdir()
    made["folder"] = "x-1.0-py3-none-any.whl is a folder, not a wheel file"
    os.mkfifo(house("fifo") / "x-1.0-py3-none-any.whl")
    made["fifo"] = "is a FIFO (named pipe), not a wheel file"
    (house("zero") / "x-1.0-py3-none-any.whl").symlink_to("/dev/zero")
    made["zero"] = "is a device, not a wheel file"
    (house("dangling") / "x-1.0-py3-none-any.whl").symlink_to(folder / "nowhere.whl")
    made["dangling"] = "is unreadable (No such file or directory), not a wheel file"
    loop = house("loop") / "x-1.0-py3-none-any.whl"
    loop.symlink_to(loop)
    made["loop"] = "is unreadable (Too many levels of symbolic links), not a wheel file"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(house("socket") / "x.whl"))
    server.close()
    made["socket"] = "x.whl is a socket, not a wheel file"
    return made


def test_every_non_file_wheel_is_named_at_once(tmp_path):
    cases = hostile_entries(tmp_path)
    for kind, words in cases.items():
        started = time.monotonic()
        with pytest.raises(BadInput) as caught:
            wheelhouse.wheel_names(tmp_path / kind)
        line = caught.value.render()
        assert words in line and "\n" not in line and str(tmp_path / kind) in line, line
        assert time.monotonic() - started < HANG_BOUND_S
    assert len(cases) == 6


def test_several_are_counted_and_a_clean_wheelhouse_is_listed(tmp_path):
    (tmp_path / "a.whl").mkdir()
    (tmp_path / "b.whl").mkdir()
    (tmp_path / WHEEL).write_bytes(b"x")
    (tmp_path / "link.whl").symlink_to(tmp_path / WHEEL)  # a link to a wheel is a wheel
    with pytest.raises(BadInput, match=r"a.whl is a folder, not a wheel file \(and 1 more such\)"):
        wheelhouse.wheel_names(tmp_path)
    (tmp_path / "a.whl").rmdir()
    (tmp_path / "b.whl").rmdir()
    assert wheelhouse.wheel_names(tmp_path) == (WHEEL, "link.whl")


@dataclass
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...] = ("0" * 64,)
    manager: str = "pip"


def test_the_offline_check_never_hangs_on_a_special_file(tmp_path):
    """The --offline coverage check hashes candidates: a FIFO or /dev/zero swapped in after the
    listing is refused by the bounded reader, not read forever."""
    fifo = tmp_path / "fifo.whl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.whl"
    zero.symlink_to("/dev/zero")
    for path, words in (
        (fifo, "it is a FIFO (named pipe), not a regular file"),
        (zero, "it is a device, not a regular file"),
    ):
        started = time.monotonic()
        with pytest.raises(BadInput, match=words.replace("(", r"\(").replace(")", r"\)")):
            wheelhouse._sha256(path)
        assert time.monotonic() - started < HANG_BOUND_S
    house = tmp_path / "house"
    house.mkdir()
    os.mkfifo(house / WHEEL)
    started = time.monotonic()
    with pytest.raises(BadInput, match="is a FIFO"):
        wheelhouse.coverage([Pin("demo", "1.0")], house, python="3.11", arch="x86_64")
    assert time.monotonic() - started < HANG_BOUND_S


def test_the_hash_of_a_real_wheel_is_unchanged(tmp_path):
    import hashlib

    wheel = tmp_path / WHEEL
    wheel.write_bytes(os.urandom(3 << 20))  # three blocks and more
    assert wheelhouse._sha256(wheel) == hashlib.sha256(wheel.read_bytes()).hexdigest()


def test_resolve_and_build_refuse_in_one_line(tmp_path, invoke_cli):
    cases = hostile_entries(tmp_path)
    tried = 0
    for kind in ("folder", "fifo", "zero"):
        for args in (
            ("resolve", "--framework", "torch", "--cuda", "cpu"),
            ("--dry", "build", "--framework", "torch", "--cuda", "cpu"),
        ):
            out = invoke_cli(*args, "--wheelhouse", str(tmp_path / kind), timeout=60)
            assert out.returncode == 2 and "Traceback" not in out.stderr, (args, kind, out.stderr)
            assert (
                out.stderr.strip().count("\n") == 0 and cases[kind].split(" is ")[-1] in out.stderr
            ), out.stderr
            tried += 1
    assert tried == 6
