"""Data files parsed once per content (gpuenv/datacache.py): the cache gives back exactly what the
parser made, parses again when the bytes or the parser change, and is never an error."""

from __future__ import annotations

import datetime
import json
import os

import pytest
import yaml

from gpuenv import datacache
from gpuenv.compat import matrix


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUENV_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "parsed"


def counting(result):
    calls = []

    def parse(data: bytes):
        calls.append(data)
        return result(data) if callable(result) else result

    return parse, calls


def test_the_second_read_of_the_same_bytes_does_not_parse(cache):
    parse, calls = counting(lambda data: {"text": data.decode(), "n": [1, 2.5, True, None]})
    first = datacache.parsed_once(b"abc", parse, name="x.yaml", kind="k1")
    second = datacache.parsed_once(b"abc", parse, name="x.yaml", kind="k1")
    assert first == second == {"text": "abc", "n": [1, 2.5, True, None]}
    assert type(second["n"][2]) is bool and len(calls) == 1
    assert [p.name.split("-")[0] for p in cache.iterdir()] == ["x.yaml"]


def test_other_bytes_or_another_parser_parse_again(cache):
    parse, calls = counting(lambda data: data.decode())
    assert datacache.parsed_once(b"one", parse, name="x.yaml", kind="k1") == "one"
    assert datacache.parsed_once(b"two", parse, name="x.yaml", kind="k1") == "two"
    assert datacache.parsed_once(b"two", parse, name="x.yaml", kind="k2") == "two"
    assert len(calls) == 3


def test_data_json_cannot_give_back_is_not_kept(cache):
    for value in ({1: "int key"}, {"when": datetime.date(2024, 10, 7)}, ("a", "tuple")):
        parse, calls = counting(value)
        assert datacache.parsed_once(b"v", parse, name=f"{len(value)}", kind="k") == value
        assert datacache.parsed_once(b"v", parse, name=f"{len(value)}", kind="k") == value
        assert len(calls) == 2
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_a_damaged_entry_is_parsed_again_and_rewritten(cache):
    parse, calls = counting({"a": 1})
    datacache.parsed_once(b"v", parse, name="x", kind="k")
    (entry,) = cache.iterdir()
    entry.write_text('{"a": ')  # cut short
    assert datacache.parsed_once(b"v", parse, name="x", kind="k") == {"a": 1}
    assert len(calls) == 2 and json.loads(entry.read_text()) == {"a": 1}


def test_an_unwritable_cache_folder_only_costs_the_parse(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GPUENV_CACHE_DIR", str(blocker))
    parse, calls = counting({"a": 1})
    for _ in range(2):
        assert datacache.parsed_once(b"v", parse, name="x", kind="k") == {"a": 1}
    assert len(calls) == 2


def test_a_parse_error_reaches_the_caller_and_nothing_is_kept(cache):
    def parse(data: bytes):
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        datacache.parsed_once(b"v", parse, name="x", kind="k")
    assert not cache.exists()


def test_only_the_newest_entries_of_a_name_stay(cache):
    for n in range(datacache.KEEP + 3):
        datacache.parsed_once(str(n).encode(), lambda data: data.decode(), name="x", kind="k")
        for entry in cache.iterdir():  # distinct times even on a coarse clock
            os.utime(entry, (entry.stat().st_mtime - 1,) * 2)
    datacache.parsed_once(b"other", lambda data: "o", name="y", kind="k")
    names = [p.name.split("-")[0] for p in cache.iterdir()]
    assert names.count("x") == datacache.KEEP and names.count("y") == 1
    newest = max(cache.glob("x-*.json"), key=lambda p: p.stat().st_mtime)
    assert json.loads(newest.read_text()) == str(datacache.KEEP + 2)


def test_the_matrix_from_the_cache_is_the_matrix_from_the_yaml(cache, tmp_path):
    """Two copies of envs/compat.yaml: the first is parsed and kept, the second (same bytes, another
    path) comes from the cache, and both are the matrix PyYAML's own reading gives."""
    first, second = tmp_path / "a" / "compat.yaml", tmp_path / "b" / "compat.yaml"
    for copy in (first, second):
        copy.parent.mkdir()
        copy.write_bytes(matrix.COMPAT_FILE.read_bytes())
    parsed = matrix.parse_matrix(yaml.safe_load(first.read_text(encoding="utf-8")), first)
    assert matrix.load_matrix(first) == parsed
    (entry,) = cache.glob("compat.yaml-*.json")
    entry.write_text(entry.read_text().replace('"schema":', '"schema" :', 1))  # mark it as read
    assert matrix.load_matrix(second) == parsed
    assert '"schema" :' in entry.read_text()  # not rewritten: read, not parsed again
