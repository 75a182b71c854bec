"""envs/locks/current.json, the project's remembered stack: written, read back, refused when
damaged."""

from __future__ import annotations

import json

import pytest

from gpuenv.envs import current
from gpuenv.errors import DataError


def test_recorded_then_read_back_and_unchanged_on_the_same_stack(tmp_path, cpu_stack):
    lock = tmp_path / cpu_stack.stack_id / "requirements.lock.txt"
    path, changed = current.record(
        tmp_path, cpu_stack, made_by="build", lock_file=lock, strict_driver=False
    )
    assert changed and path == tmp_path / "current.json"
    entry = current.read(tmp_path)
    assert entry.stack_id == "torch2.13.0-cpu-py3.11"
    assert entry.options() == {
        "framework": "torch",
        "torch": "2.13.0",
        "cuda": "cpu",
        "python": "3.11",
        "strict_driver": False,
    }
    assert entry.lock_file == f"{cpu_stack.stack_id}/requirements.lock.txt", (
        "relative to the locks folder: the checkout can move"
    )
    assert json.loads(path.read_text())["format"] == "gpuenv-current-stack/1"
    before = path.stat().st_mtime_ns
    assert current.record(
        tmp_path, cpu_stack, made_by="build", lock_file=lock, strict_driver=False
    ) == (path, False)
    assert path.stat().st_mtime_ns == before, "the same stack again leaves the committed file alone"


def test_nothing_recorded_is_none(tmp_path):
    assert current.read(tmp_path) is None


@pytest.mark.parametrize(
    "text, says",
    [
        ("not json", "is not JSON"),
        ('{"format": "other/1"}', "not a gpuenv current-stack file"),
        (
            '{"format": "gpuenv-current-stack/1", "stack_id": 3}',
            "'stack_id' is missing or not a string",
        ),
        ("[" * 100_000, "over the 64 KiB limit"),
        ("[" * 50 + "]" * 50, "nested more than 4 levels deep"),
    ],
)
def test_a_damaged_file_is_one_line_naming_it(tmp_path, text, says):
    (tmp_path / "current.json").write_text(text)
    with pytest.raises(DataError) as err:
        current.read(tmp_path)
    assert says in err.value.render() and str(tmp_path / "current.json") in err.value.render()
    assert "delete it" in err.value.render()


NEWER = {
    "format": "gpuenv-current-stack/1",
    "stack_id": "torch2.20.0-cu136-py3.13",
    "framework": "torch",
    "release": "2.20.0",
    "cuda": "13.6",
    "python": "3.13",
    "strict_driver": False,
    "made_by": "build",
    "lock_file": "torch2.20.0-cu136-py3.13/requirements.lock.txt",
}


@pytest.mark.parametrize("version, by", [("9.1.0", "gpuenv 9.1.0"), (None, "another gpuenv")])
def test_a_file_a_newer_gpuenv_wrote_is_named_with_its_version_not_as_an_option(
    tmp_path, version, by
):
    """Before: every task said "--cuda 13.6: no CUDA 13.6 release is known", though nobody typed
    --cuda, and did not name the file."""
    import os
    import subprocess
    import sys

    from gpuenv import PROJECT_ROOT as ROOT

    (tmp_path / "current.json").write_text(
        json.dumps({**NEWER, **({"gpuenv_version": version} if version else {})})
    )
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "invoke"), "--dry", "build"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "GPUENV_LOCKS_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
    )
    line = proc.stderr.strip()
    assert proc.returncode == 1 and "\n" not in line, proc.stdout + proc.stderr
    assert line.startswith(
        f"gpuenv: {tmp_path / 'current.json'} (written by {by}) names torch2.20.0-cu136-py3.13"
    ), line
    assert "--cuda" not in line and "no CUDA 13.6 release is known" in line, line


def test_the_file_records_the_gpuenv_that_wrote_it(tmp_path, cpu_stack):
    from gpuenv import __version__

    path, _ = current.record(
        tmp_path, cpu_stack, made_by="lock", lock_file=tmp_path / "x", strict_driver=False
    )
    assert json.loads(path.read_text())["gpuenv_version"] == __version__
