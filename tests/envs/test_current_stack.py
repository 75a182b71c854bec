"""envs/locks/current.json, the project's remembered stack: written, read back, refused when damaged."""

from __future__ import annotations

import json

import pytest

from gpuenv.envs import current
from gpuenv.errors import DataError


def test_recorded_then_read_back_and_unchanged_on_the_same_stack(tmp_path, cpu_stack):
    lock = tmp_path / cpu_stack.stack_id / "requirements.lock.txt"
    path, changed = current.record(tmp_path, cpu_stack, made_by="build", lock_file=lock, strict_driver=False)
    assert changed and path == tmp_path / "current.json"
    entry = current.read(tmp_path)
    assert entry.stack_id == "torch2.13.0-cpu-py3.11"
    assert entry.options() == {"framework": "torch", "torch": "2.13.0", "cuda": "cpu", "python": "3.11", "strict_driver": False}
    assert entry.lock_file == f"{cpu_stack.stack_id}/requirements.lock.txt", "relative to the locks folder: the checkout can move"
    assert json.loads(path.read_text())["format"] == "gpuenv-current-stack/1"
    before = path.stat().st_mtime_ns
    assert current.record(tmp_path, cpu_stack, made_by="build", lock_file=lock, strict_driver=False) == (path, False)
    assert path.stat().st_mtime_ns == before, "the same stack again leaves the committed file alone"


def test_nothing_recorded_is_none(tmp_path):
    assert current.read(tmp_path) is None


@pytest.mark.parametrize("text, says", [
    ("not json", "is not JSON"),
    ('{"format": "other/1"}', "not a gpuenv current-stack file"),
    ('{"format": "gpuenv-current-stack/1", "stack_id": 3}', "'stack_id' is missing or not a string"),
    ("[" * 100_000, "over the 64 KiB limit"),
    ("[" * 50 + "]" * 50, "nested more than 4 levels deep"),
])
def test_a_damaged_file_is_one_line_naming_it(tmp_path, text, says):
    (tmp_path / "current.json").write_text(text)
    with pytest.raises(DataError) as err:
        current.read(tmp_path)
    assert says in err.value.render() and str(tmp_path / "current.json") in err.value.render()
    assert "delete it" in err.value.render()
