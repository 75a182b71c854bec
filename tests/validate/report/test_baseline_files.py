"""--baseline files are untrusted input: a size-limited regular file, read once, whose JSON is
shallow, whose numbers are short, and whose figures are finite and above zero. Each bad file is
one line (BaselineError), from the library, from `python -m validate` and from a fleet run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hangbound import HANG_BOUND_S
from invoke import Config, Context
from invoke.exceptions import Exit

from validate.report.baseline import (
    BASELINE_FORMAT,
    MAX_BASELINE_BYTES,
    BaselineError,
    build_baseline,
    load_baseline,
    parse_baseline,
    read_baseline_bytes,
)
from validate.report.record import Record

REPO = Path(__file__).resolve().parents[3]
GOOD = (
    b'{"format": "gpuenv-validate-baseline/1", "models": {"host": {"matmul fp32 TFLOPS": 1.25, '
    b'"steps/s": 40}}}'
)


def baseline_with(models: bytes) -> bytes:
    return b'{"format": "' + BASELINE_FORMAT.encode() + b'", "models": ' + models + b"}"


def test_a_good_baseline_reads_back_as_floats(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(GOOD)
    assert load_baseline(path) == {"host": {"matmul fp32 TFLOPS": 1.25, "steps/s": 40.0}}


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 16 levels deep"),
        (
            baseline_with(b'{"host": {"x": ' + b"[" * 40 + b"]" * 40 + b"}}"),
            "nested more than 16 levels deep",
        ),
        (baseline_with(b'{"host": {"x": ' + b"7" * 5000 + b"}}"), "a 5000-digit number"),
        (baseline_with(b'{"host": {"x": 1.' + b"5" * 5000 + b"}}"), "a number of 5002 characters"),
        (baseline_with(b'{"host": {"x": NaN}}'), "NaN is not a JSON number"),
        (baseline_with(b'{"host": {"x": -Infinity}}'), "-Infinity is not a JSON number"),
        (baseline_with(b'{"host": {"x": 1e999}}'), "the number 1e999 is out of range"),
        (baseline_with(b'{"host": {"x": 0}}'), "check 'x': 0 is not a figure above zero"),
        (baseline_with(b'{"host": {"x": -3.5}}'), "check 'x': -3.5 is not a figure above zero"),
        (baseline_with(b'{"host": {"x": true}}'), "must map check names to numbers"),
        (b'{"format": "gpuenv-validate-baseline/1", "models": {"a": 1}', "not JSON (Expecting"),
        (b"\x80\x81{}", "not UTF-8 text (byte 0x80 on line 1)"),
        (
            "{}".encode("utf-16"),
            "is not a gpuenv-validate-baseline/1 file",
        ),  # UTF-16 with its mark is read, then judged,
    ],
)
def test_hostile_content_is_one_baseline_error(tmp_path, content, words):
    path = tmp_path / "b.json"
    path.write_bytes(content)
    with pytest.raises(BaselineError) as caught:
        load_baseline(path)
    assert (
        words in str(caught.value)
        and str(path) in str(caught.value)
        and "\n" not in str(caught.value)
    )


def test_only_regular_files_of_at_most_one_mib(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_BASELINE_BYTES + 1))
    exact = tmp_path / "exact.json"
    exact.write_bytes(GOOD + b" " * (MAX_BASELINE_BYTES - len(GOOD)))
    cases = {
        fifo: "it is a FIFO (named pipe), not a regular file",
        Path("/dev/zero"): "it is a device, not a regular file",
        tmp_path: "it is a folder, not a regular file",
        big: f"it is {MAX_BASELINE_BYTES + 1:,} bytes, over the 1 MiB limit",
        tmp_path / "missing.json": "does not exist",
        Path("/tmp/nul\0byte"): "holds a NUL byte",
        tmp_path / ("n" * 300): "cannot be read (File name too long)",
    }
    for path, words in cases.items():
        started = time.monotonic()
        with pytest.raises(BaselineError, match=words.replace("(", r"\(").replace(")", r"\)")):
            read_baseline_bytes(path)
        assert time.monotonic() - started < HANG_BOUND_S, (
            f"{path} must be refused at once, not read"
        )
    assert load_baseline(exact)["host"]["steps/s"] == 40.0, "exactly 1 MiB is still a baseline"


def test_a_link_to_a_regular_file_is_read_through():
    """A symbolic link is followed (a team keeps baselines in a shared folder and links them)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        real = Path(tmp) / "real.json"
        real.write_bytes(GOOD)
        link = Path(tmp) / "link.json"
        link.symlink_to(real)
        assert read_baseline_bytes(link) == GOOD


def test_saving_keeps_only_figures_a_later_run_can_be_held_to(tmp_path):
    def record(check: str, value: float | None) -> Record:
        return Record(check, None, "", "", "pass", value=value)

    records = [
        record("matmul", 2.0),
        record("zero", 0.0),
        record("nan", float("nan")),
        record("neg", -1.0),
        record("none", None),
    ]
    saved = build_baseline(records, {})
    assert saved["models"] == {"host": {"matmul": 2.0}}
    import json

    assert parse_baseline(json.dumps(saved).encode(), "saved") == {"host": {"matmul": 2.0}}


def test_the_suite_refuses_dev_zero_and_a_fifo_in_one_line(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    }
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, words in (("/dev/zero", "is a device"), (str(fifo), "is a FIFO")):
        done = subprocess.run(
            [sys.executable, "-m", "validate", "--baseline", path],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stdout.startswith(f"validate: --baseline: baseline file {path}: it {words}"), (
            done.stdout
        )
        assert len(done.stdout.splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_fleet_run_refuses_a_fifo_baseline_at_once(tmp_path):
    """`invoke validate --hosts ... --baseline FIFO` used to read it twice and hang: now refused at
    once."""
    from gpuenv.cli.validation import validate

    fifo = tmp_path / "baseline.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(Exit) as err:
        validate(Context(Config()), hosts="ssh://127.0.0.1:1", image="x", baseline=str(fifo))
    assert err.value.code == 2 and "is a FIFO (named pipe)" in str(err.value.message)
    assert time.monotonic() - started < 10


def test_the_fleet_reads_the_file_once_and_hands_the_same_bytes_down(tmp_path, monkeypatch):
    """One read: _read_baseline's bytes and models come from the same read of the file."""
    from gpuenv.cli import fleet

    path = tmp_path / "b.json"
    path.write_bytes(GOOD)
    reads: list[str] = []
    import validate.report.baseline as baseline_mod

    real = baseline_mod.read_baseline_bytes

    def counting(p):
        reads.append(str(p))
        return real(p)

    monkeypatch.setattr(baseline_mod, "read_baseline_bytes", counting)
    data, models = fleet._read_baseline(str(path))
    assert data == GOOD and models == {"host": {"matmul fp32 TFLOPS": 1.25, "steps/s": 40.0}}
    assert reads == [str(path)]
