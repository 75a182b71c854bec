"""Hostile node reports and fleet options, third pass (issue 29): each general rule with several
cases.

- Outputs never overwrite inputs: an output that is a report of --from-reports (by name, through
  a link, through a hard link), a file that would be read as a report next run, the baseline, or
  another output, is refused in one line before anything is read or written.
- Reports are read through the one bounded reader: a folder named x.json, a link out of the
  folder (its text never shown), UTF-16 with a mark read, UTF-16 without one named.
- What one report may keep is bounded (GPU sections, checks, text): past a bound the host is
  malformed, never cut; twenty 15.75 MiB reports stay in bounded memory.
- Host URLs: a password is never echoed, a bad URL is one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Config, Context
from invoke.exceptions import Exit
from suitecases import gpu, gpu_report

from gpuenv.cli.validation import validate
from gpuenv.errors import BadInput
from gpuenv.fleet.collected import read_report_folder
from gpuenv.fleet.outcome import MALFORMED, READY
from gpuenv.fleet.sshhosts import normalise_host_url
from gpuenv.fleet.suitereport import MAX_CHECKS, MAX_GPU_SECTIONS, check_report

ROOT = Path(__file__).resolve().parents[2]


def rack(folder: Path, hosts: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(hosts):
        report = gpu_report(
            [(gpu(0, host=n + 1), 700.0, 3000.0), (gpu(1, host=n + 1), 701.0, 3002.0)]
        )
        (folder / f"gpu{n:02d}.json").write_text(json.dumps(report))
    return folder


def refused(**kwargs) -> str:
    with pytest.raises(Exit) as err:
        validate(Context(Config()), **kwargs)
    message = str(err.value.message)
    assert err.value.code == 2 and "\n" not in message and message.startswith("gpuenv: "), message
    return message


# --- outputs never overwrite inputs ---------------------------------------------------------


def test_an_output_that_is_an_input_is_refused_and_nothing_is_written(tmp_path):
    reports = rack(tmp_path / "reports")
    before = {p.name: p.read_bytes() for p in reports.iterdir()}
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "link.json").symlink_to(reports / "gpu01.json")
    os.link(reports / "gpu02.json", tmp_path / "hard.json")
    baseline = tmp_path / "baseline.json"
    baseline.write_text('{"format": "gpuenv-validate-baseline/1", "models": {}}')
    cases = [
        (
            {"json": str(reports / "gpu00.json")},
            "--json {r}/gpu00.json is host gpu00's report in --from-reports {r}",
        ),
        (
            {"junit": str(tmp_path / "elsewhere" / "link.json")},
            "is host gpu01's report in --from-reports",
        ),
        ({"json": str(tmp_path / "hard.json")}, "is host gpu02's report in --from-reports"),
        (
            {"json": str(reports / "fleet.json")},
            "is a report file of --from-reports {r} (host fleet on the next run)",
        ),
        ({"json": str(reports / "nodes" / "x" / "report.json")}, "(host report on the next run)"),
        ({"json": str(baseline), "baseline": str(baseline)}, "--json {b} is --baseline"),
        (
            {"json": str(tmp_path / "f.json"), "junit": str(tmp_path / "f.json")},
            "--json and --junit name the same file",
        ),
        (
            {"report": str(tmp_path / "f.html"), "json": str(tmp_path / "link.html")},
            "--report and --json name the same file",
        ),
    ]
    (tmp_path / "link.html").symlink_to(tmp_path / "f.html")
    for options, words in cases:
        message = refused(from_reports=str(reports), **options)
        assert words.format(r=reports, b=baseline) in message, message
    assert {p.name: p.read_bytes() for p in reports.iterdir()} == before, "no input was touched"
    assert not (tmp_path / "f.json").exists() and not (tmp_path / "f.html").exists()
    assert len(cases) == 8


def test_the_suite_refuses_an_output_that_is_its_input(tmp_path):
    capture = (
        Path(__file__).resolve().parents[1]
        / "validate"
        / "captures"
        / "nvidia-smi-xml"
        / "a100-sxm4-40gb-570.148.08.xml"
    )
    copy = tmp_path / "host.xml"
    copy.write_bytes(capture.read_bytes())
    base = tmp_path / "b.json"
    base.write_text('{"format": "gpuenv-validate-baseline/1", "models": {"host": {"x": 1}}}')
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    }
    for args, words in (
        (["--replay", str(copy), "--json", str(copy)], "--json {c} is --replay"),
        (["--replay", str(copy), "--junit", str(copy)], "--junit {c} is --replay"),
        (
            ["--baseline", str(base), "--save-baseline", str(base)],
            "--save-baseline {b} is --baseline",
        ),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "validate", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and done.stdout.count("\n") == 1, done.stdout + done.stderr
        assert words.format(c=copy, b=base) in done.stdout
    assert copy.read_bytes() == capture.read_bytes()


def test_record_names_stay_one_path_component():
    from validate.writing import path_component

    cases = {
        "gpu01": "gpu01",
        "../../etc/cron.d/x": "etc_cron.d_x",
        "a/b": "a_b",
        "evil\nname": "evil_name",
        "esc\x1b]0;t\x07": "esc_0_t_",
        "..": "host",
        "": "host",
        ".hidden": "hidden",
        "x" * 300: "x" * 64,
        "ünïcode": "n_code",
    }
    for given, expected in cases.items():
        assert path_component(given) == expected, given
        assert "/" not in path_component(given) and path_component(given) not in (".", "..")


def test_a_long_record_folder_is_one_line(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    }
    done = subprocess.run(
        [sys.executable, "-m", "validate", "--record", str(tmp_path / ("d" * 300))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--record: cannot make the folder" in done.stdout and "at most 255" in done.stdout


# --- reports through the one bounded reader -------------------------------------------------


def test_special_entries_sink_only_their_host_and_links_out_show_nothing(tmp_path):
    reports = rack(tmp_path / "reports")
    (reports / "folder.json").mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"format": "SECRET-TOKEN-1234567890", "host": {}}))
    (reports / "outside.json").symlink_to(secret)
    (reports / "utf16.json").write_bytes(
        json.dumps(gpu_report([(gpu(0, host=9), 700.0, 3000.0)])).encode("utf-16")
    )
    (reports / "utf16-nomark.json").write_bytes(
        json.dumps(gpu_report([(gpu(0, host=8), 700.0, 3000.0)])).encode("utf-16-le")
    )
    inside = reports / "inside.json"
    inside.symlink_to(reports / "gpu00.json")  # a link within the folder is a report like any other
    outcomes = {o.host: o for o in read_report_folder(reports)}
    assert (
        outcomes["folder"].status == MALFORMED
        and "it is a folder, not a regular file" in outcomes["folder"].reason
    )
    assert (
        outcomes["outside"].status == MALFORMED
        and f"it is a link to a file outside {reports}" in outcomes["outside"].reason
    )
    assert (
        "SECRET" not in json.dumps([o.reason for o in outcomes.values()])
        and outcomes["outside"].report is None
    )
    assert outcomes["utf16"].status == READY
    assert "UTF-16 without a byte-order mark" in outcomes["utf16-nomark"].reason
    assert outcomes["inside"].status == READY
    assert [outcomes[f"gpu{n:02d}"].status for n in range(3)] == [READY] * 3


def test_the_fleet_report_is_written_beside_a_folder_named_x_json(tmp_path):
    reports = rack(tmp_path / "reports")
    (reports / "x.json").mkdir()
    out = tmp_path / "out"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "validate",
            "--from-reports",
            str(reports),
            "--json",
            str(out / "f.json"),
            "--junit",
            str(out / "f.xml"),
            "--report",
            str(out / "f.html"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "malformed: x: malformed report: it is a folder, not a regular file" in run.stdout
    assert all((out / name).stat().st_size > 0 for name in ("f.json", "f.xml", "f.html"))


# --- what one report keeps is bounded -------------------------------------------------------


def _with_checks(count: int, text: int = 10) -> dict:
    report = gpu_report([(gpu(0), 700.0, 3000.0)])
    uuid = next(k for k in report if k not in ("format", "host", "summary"))
    one = report[uuid]["checks"][0]
    report[uuid]["checks"] = [dict(one, check=f"c{n}", reason="r" * text) for n in range(count)]
    return report


def test_past_a_bound_a_report_is_refused_whole():
    many_gpus = gpu_report([(gpu(n), 700.0, 3000.0) for n in range(MAX_GPU_SECTIONS + 1)])
    cases = [
        (
            many_gpus,
            f"{MAX_GPU_SECTIONS + 1} GPU sections; a host has at most {MAX_GPU_SECTIONS} GPUs",
        ),
        (
            _with_checks(MAX_CHECKS + 1),
            f"{MAX_CHECKS + 3} checks; a suite report has at most {MAX_CHECKS}",
        ),  # 2 host checks too
        (
            _with_checks(800, text=1990),
            "M characters of check text; a suite report has at most 1 M",
        ),
    ]
    for report, words in cases:
        with pytest.raises(Exception, match=words.replace("(", r"\(")):
            check_report(report)
    assert check_report(_with_checks(MAX_CHECKS - 10))  # at the bound, read whole
    nvml = gpu_report([(gpu(0), 700.0, 3000.0)])
    nvml["host"]["nvml"] = {f"k{a}": {f"k{b}": "v" for b in range(500)} for a in range(500)}
    kept = check_report(nvml)["host"]["nvml"]
    assert sum(len(v) for v in kept.values() if isinstance(v, dict)) < 5_000, (
        "free-form facts are cut to a budget"
    )


def test_twenty_big_reports_stay_in_bounded_memory():
    """Twenty 15.75 MiB reports took 2 GB and more; now each is refused or kept small."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "report_memory.py"), "--reports", "20"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    peaks = [
        json.loads(line.split(": ", 1)[1].replace("'", '"'))["peak_mib"]
        for line in done.stdout.splitlines()
    ]
    print(done.stdout)
    assert len(peaks) == 4 and max(peaks) < 400, peaks


# --- host URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, words",
    [
        ("ssh://root:hunter2@gpu01", "holds a password"),
        ("ssh://root:hunter2@[::1", "has no usable host name"),
        ("ssh://root:hunter2@gpu01/path", "holds a password"),
        ("ssh://root@[::1", "has no usable host name"),
        ("ssh://root@gpu\x1b[31m01", "has no usable host name"),
        ("ssh://root@gpu01:99999", "out of range"),
    ],
)
def test_a_bad_host_url_is_one_line_without_its_password(url, words):
    with pytest.raises(BadInput) as caught:
        normalise_host_url(url)
    line = caught.value.render()
    assert words in line and "hunter2" not in line and "\x1b" not in line and "\n" not in line, line


def test_a_password_never_reaches_the_terminal_end_to_end():
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "validate",
            "--hosts",
            "ssh://ops:s3cret@gpu01.invalid",
            "--image",
            "x",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert (
        run.returncode == 2
        and "s3cret" not in run.stdout + run.stderr
        and "ops:***@gpu01.invalid" in run.stderr
    ), run.stderr


def test_slurm_node_files_are_read_bounded_and_inside_the_run_folder(tmp_path):
    from gpuenv.fleet.slurm_job import NODES_DIR
    from gpuenv.fleet.slurm_results import read_node_files

    node = tmp_path / NODES_DIR / "gpu01"
    node.mkdir(parents=True)
    os.mkfifo(node / "exit")
    (node / "runner").symlink_to("/dev/zero")
    (node / "error").write_text("e" * 10)
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "error").write_text("SECRET")
    files = read_node_files(str(tmp_path), "gpu01")
    assert (files.exit, files.runner, files.error) == (None, None, "e" * 10), (
        "a FIFO or a device is not read, and never hangs"
    )
    for name in ("../../secret", "..", "a/b", "x\x1b[2J"):
        outside = read_node_files(str(tmp_path), name)
        assert (
            outside.error.endswith("is not a file name")
            and "SECRET" not in outside.error
            and "\x1b" not in outside.error
        )


# --- the multi-node job's files: each node's part through the bounded reader ----------------

MULTINODE_RESULT = ROOT / "tests" / "fleet" / "fixtures" / "multinode" / "result-gloo-2nodes.json"


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link(target: str):
    return lambda path: path.symlink_to(target)


def _text(text: str | bytes):
    return lambda path: path.write_bytes(text if isinstance(text, bytes) else text.encode())


# (file the node wrote, how it was spoiled, words of the reason): the review's four (a FIFO, a link
# to /dev/zero, 100,000-deep JSON, 5,000 digits) and held-out ones of each kind
SPOILED_NODE_FILES = [
    ("exit-node1", _fifo, "exit-node1 refused: it is a FIFO (named pipe), not a regular file"),
    ("error-node1", _link("/dev/zero"), "error-node1 refused: it is a device, not a regular file"),
    ("exit-node1", _link("/dev/urandom"), "exit-node1 refused: it is a device, not a regular file"),
    (
        "exit-node1",
        _text("1" * 5000),
        "exit-node1 refused: it is 5,000 bytes, over the 64 bytes limit",
    ),
    ("exit-node1", _text("\u00b2\n"), "exit-node1 holds '\u00b2', not an exit status"),
    (
        "exit-node1",
        lambda path: path.mkdir(),
        "exit-node1 refused: it is a folder, not a regular file",
    ),
    (
        "error-node1",
        _text(b"\xff\xfeboo"),
        "error-node1 refused: UTF-16 with a byte-order mark, but broken",
    ),
    (
        "error-node1",
        _text("x" * (64 * 1024 + 1)),
        "error-node1 refused: it is 65,537 bytes, over the 64 KiB limit",
    ),
    (
        "result.json",
        _text("[" * 100_000 + "]" * 100_000),
        "result.json refused: JSON nested more than 16 levels deep",
    ),
    (
        "result.json",
        _text('{"world": ' + "9" * 5000 + "}"),
        "result.json refused: a 5000-digit number; at most 30 digits are read",
    ),
    (
        "result.json",
        _text('{"world": 2,\n"w\\u006frld": 3}'),
        "result.json refused: key 'world' given twice in one object (lines 1 and 2)",
    ),
    ("result.json", _fifo, "result.json refused: it is a FIFO (named pipe), not a regular file"),
    ("result.json", _link("/dev/zero"), "result.json refused: it is a device, not a regular file"),
]


@pytest.mark.parametrize(
    "name, spoil, words",
    SPOILED_NODE_FILES,
    ids=[f"{c[0]}-{n}" for n, c in enumerate(SPOILED_NODE_FILES)],
)
def test_a_spoiled_multinode_file_spoils_only_its_node_in_one_line(tmp_path, name, spoil, words):
    """Before: a FIFO hung the run, /dev/zero filled memory, deep JSON was a RecursionError and
    5,000 digits a ValueError. result.json is rank 0's, on the first node."""
    from gpuenv.fleet.multinode import read_result

    for node in ("node0", "node1"):
        (tmp_path / f"exit-{node}").write_text("0\n")
    (tmp_path / "result.json").write_text(MULTINODE_RESULT.read_text())
    (tmp_path / name).unlink(missing_ok=True)
    spoil(tmp_path / name)
    result, exits, errors = read_result(
        tmp_path, ["node0", "node1"] if name != "result.json" else ["node1", "node0"]
    )
    assert list(errors) == ["node1"] and words in errors["node1"] and "\n" not in errors["node1"], (
        errors
    )
    assert exits["node0"] == 0, "the other node's part is still read"
    assert (result is None) == (name == "result.json"), (
        "a spoiled node file leaves rank 0's result alone"
    )


def test_multinode_node_files_never_leave_the_folder_or_reach_the_terminal_raw(tmp_path):
    from gpuenv.fleet.multinode import read_result

    folder = tmp_path / "multinode"
    folder.mkdir()
    (tmp_path / "exit-secret").write_text("0")
    (folder / "exit-a").symlink_to(tmp_path / "exit-secret")
    (folder / "error-b").write_text("boom\x1b[2J\nsecond line\n")
    (folder / "exit-b").write_text("1")
    _, exits, errors = read_result(folder, ["a", "b", "../x"])
    assert exits == {"a": None, "b": 1, "../x": None}
    assert errors["a"] == f"exit-a refused: it is a link to a file outside {folder}"
    assert errors["b"] == "boom\\x1b[2J second line", "one line, the escape shown, not sent"


@pytest.mark.parametrize(
    "part, shown",
    [("\x1b[2J", "\\x1b[2J"), ("\x9b2J", "\\x9b2J"), ("a\rb", "a\\rb")],
    ids=["esc", "c1", "cr"],
)
def test_from_reports_paths_and_host_names_reach_no_terminal_raw(tmp_path, part, shown):
    """The reports folder (an option) and the host names (file names in it) are untrusted text:
    before, `read 1 host report(s) from DIR` sent the folder's ESC to the terminal raw."""
    folder = tmp_path / f"reports{part}"
    folder.mkdir()
    (folder / f"gpu{part}.json").write_text(
        json.dumps(gpu_report([(gpu(0, host=1), 700.0, 3000.0)]))
    )
    run = subprocess.run(
        [sys.executable, "-m", "invoke", "validate", "--from-reports", str(folder), "--verbose"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    text = run.stdout + run.stderr
    assert run.returncode == 0, text[-2000:]
    assert part not in text and not any(ch in text for ch in "\x1b\x9b\r"), text[-2000:]
    from validate.text import safe_text

    assert f"from {tmp_path}/reports{shown}" in text and f"gpu{safe_text(part)}" in text, text[
        -2000:
    ]
