"""The suite's command line (issue 9 items 3-4, issue 11 item 11): report paths checked before any
measuring, never a half-written report, nothing validated never reads as success, bad baselines
are one line and exit 2, and inside an image the image's own suite runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from validate.cli import image_suite, parse_args, preflight, unwritable, verdict

REPO = Path(__file__).resolve().parents[2]


def run_suite(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    }
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "validate", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("flag", ["--json", "--junit", "--save-baseline"])
def test_a_folder_as_report_path_is_refused_before_measuring(tmp_path, flag):
    done = run_suite(flag, str(tmp_path), timeout=60)
    assert done.returncode == 2
    assert done.stdout == f"validate: {flag}: {tmp_path} is a folder: give a file name\n"


def test_a_report_under_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    problem = unwritable(str(tmp_path / "file" / "r.json"))
    assert (
        problem
        == f"cannot write {tmp_path / 'file' / 'r.json'}: {tmp_path / 'file'} is not a folder"
    )


def test_special_files_are_written_through():
    assert unwritable("/dev/null") is None


def test_a_read_only_mount_is_refused_before_measuring(tmp_path):
    """A read-only bind mount of a folder (root is not stopped by permissions, only by the
    mount)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "--bind", "-o", "ro", str(folder), str(folder)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount here: {mounted.stderr.strip()}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(folder)], check=False, capture_output=True
        )
        done = run_suite("--json", str(folder / "r.json"), timeout=60)
        assert done.returncode == 2, done.stdout
        assert done.stdout.startswith(
            f"validate: --json: cannot write {folder / 'r.json'}: Read-only file system"
        )
        assert list(folder.iterdir()) == []
    finally:
        subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "binary data (a NUL byte at offset 8), not text"),
        (
            b'{"format": "gpuenv-validate-baseline/1", "models": {"NVIDIA A100-SXM4-80GB": [1, '
            b"2]}}",
            "model 'NVIDIA A100-SXM4-80GB' must map check names to numbers",
        ),
        (
            b'{"format": "gpuenv-validate-baseline/1", "models": {"host": {"x": "fast"}}}',
            "model 'host' must map check names to numbers",
        ),
        (b"[1, 2]", "is not a gpuenv-validate-baseline/1 file"),
    ],
)
def test_bad_baselines_are_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "baseline.json"
    path.write_bytes(content)
    done = run_suite("--baseline", str(path), timeout=60)
    assert done.returncode == 2
    assert (
        done.stdout.startswith(f"validate: --baseline: baseline file {path}")
        and message in done.stdout
    )
    assert len(done.stdout.splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_folder_as_baseline_is_one_line(tmp_path):
    args, _ = parse_args(["--baseline", str(tmp_path)])
    assert (
        preflight(args)
        == f"--baseline: baseline file {tmp_path}: it is a folder, not a regular file: give a "
        "file saved with --save-baseline"
    )


@pytest.mark.parametrize("mode", ["--collect-only", "--setup-only", "--setup-plan", "--fixtures"])
def test_pytest_modes_that_run_no_check_are_not_validation(mode):
    done = run_suite(mode, "-k", "device_order or computes_on_cpu", timeout=120)
    assert done.returncode == 1
    assert "every check passed" not in done.stdout
    assert "validate: NOT VALIDATED: no check ran" in done.stdout


def test_exit_status_mapping():
    assert verdict(0, 12) == (0, "validate: every check passed (or skipped with its reason)")
    assert verdict(0, 0)[0] == 1 and "NOT VALIDATED" in verdict(0, 0)[1]
    assert verdict(1, 12) == (1, "validate: NOT READY: some checks failed")
    assert verdict(4, 0)[0] == 2  # a pytest usage error is bad input
    assert verdict(5, 0) == (1, "validate: NOT READY: no checks were collected")
    assert verdict(2, 3)[0] == 130


def test_junit_and_json_are_whole_and_leave_no_temp_files(tmp_path):
    out = tmp_path / "reports"
    done = run_suite(
        "-k", "computes_on_cpu", "--json", str(out / "r.json"), "--junit", str(out / "r.xml")
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["r.json", "r.xml"]
    assert (out / "r.xml").read_text().rstrip().endswith("</testsuites>")
    assert json.loads((out / "r.json").read_text())["summary"]["ok"] is True


def test_a_stopped_run_leaves_no_temporary_report(tmp_path):
    """`timeout` or a scheduler stops the suite with SIGTERM: it ends as an interrupt (130), and
    its JUnit file's temporary twin is not left behind (found on the live H200 run's dry run)."""
    import re
    import signal
    import threading
    import time

    out = tmp_path / "reports"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    }
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "validate",
            "--junit",
            str(out / "r.xml"),
            "--json",
            str(out / "r.json"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(lambda: run.stdout.read(1), "")))
    reader.start()
    try:
        waited = time.monotonic()
        # into the checks: pytest's first progress mark ("." or "s") after the host line; a stop
        # while pytest starts is test_a_stop_while_pytest_starts_is_an_interrupt_not_a_traceback
        while not re.search(r"\n[.sFE]", "".join(seen)) and time.monotonic() - waited < 120:
            time.sleep(0.2)
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=120)
    finally:
        run.kill()
        reader.join(timeout=10)
    output = "".join(seen)
    assert run.returncode == 130, output[-2000:]
    left = sorted(p.name for p in out.iterdir())
    assert [name for name in left if name.endswith(".tmp")] == [], left
    if (out / "r.xml").exists():
        assert (out / "r.xml").read_text().rstrip().endswith("</testsuites>")


def _image_layout(tmp_path: Path) -> Path:
    """/opt/gpuenv as the image has it: stack.json beside the baked suite."""
    opt = tmp_path / "opt" / "gpuenv"
    shutil.copytree(
        REPO / "validate", opt / "validate", ignore=shutil.ignore_patterns("__pycache__")
    )
    (opt / "stack.json").write_text(
        json.dumps({"framework": "torch", "cuda": "cpu", "stack_id": "torch-cpu"})
    )
    return opt


def test_image_suite_is_found_beside_the_stack_file(tmp_path):
    opt = _image_layout(tmp_path)
    assert image_suite(str(opt / "stack.json"), REPO / "validate") == (opt / "validate").resolve()
    assert image_suite(str(opt / "stack.json"), opt / "validate") is None  # already the image's own
    assert image_suite(None) is None
    assert image_suite(str(tmp_path / "elsewhere" / "stack.json")) is None


def test_a_mounted_checkout_does_not_replace_the_image_suite(tmp_path):
    """`python -m validate` from a folder holding a checkout's validate/ (as /workspace inside the
    image) still runs the suite baked beside the image's stack file."""
    opt = _image_layout(tmp_path)
    done = run_suite("-k", "computes_on_cpu", env={"GPUENV_STACK_FILE": str(opt / "stack.json")})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"validate: running the image's own suite {(opt / 'validate').resolve()}" in done.stdout
    assert f"suite: {(opt / 'validate').resolve()}" in done.stdout


def test_main_run_as_a_file_imports_its_own_package(tmp_path):
    """`python /opt/gpuenv/validate/__main__.py` from the checkout: its own package, not
    ./validate."""
    opt = _image_layout(tmp_path)
    done = subprocess.run(
        [sys.executable, str(opt / "validate" / "__main__.py"), "-k", "computes_on_cpu"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            k: v
            for k, v in os.environ.items()
            if k not in ("GPUENV_STACK_FILE", "NVIDIA_VISIBLE_DEVICES")
        },
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"suite: {(opt / 'validate').resolve()}" in done.stdout


def test_the_suite_runs_in_pci_bus_order_whatever_the_caller_set(tmp_path):
    """CUDA's default order is "fastest first": on a mixed-GPU workstation ordinals in
    CUDA_VISIBLE_DEVICES would name other GPUs than NVML's. The suite sets PCI_BUS_ID first."""
    done = run_suite(
        "-k",
        "device_order",
        "--json",
        str(tmp_path / "r.json"),
        env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    row = next(
        c
        for c in json.loads((tmp_path / "r.json").read_text())["host"]["checks"]
        if c["check"] == "cuda device order"
    )
    assert row["measured"] == "PCI_BUS_ID (was FASTEST_FIRST)" and row["verdict"] == "pass"


def test_a_full_disk_at_the_end_leaves_no_partial_report(tmp_path):
    """The report folder fills up during the run: one line naming the report, exit 2, and no
    half-written file (the atomic writer keeps the old one, here none)."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        # Room for the start-up check's empty file, none for a report.
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={folder / 'filler'}", "bs=4k", "count=64"],
            capture_output=True,
        )
        done = run_suite("-k", "device_order", "--json", str(folder / "r.json"), timeout=120)
        assert done.returncode == 2, done.stdout[-2000:]
        assert (
            f"validate: cannot write the JSON report {folder / 'r.json'}: No space left on device"
            in done.stdout
        )
        assert sorted(p.name for p in folder.iterdir()) == ["filler"]
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_no_conftest_beside_a_capture_or_report_is_loaded(tmp_path):
    """The capture's, baseline's and report's folders are no test folders: a conftest.py there
    (a checkout's tests/, a shared drive) is never imported into the suite's run."""
    capture = REPO / "tests" / "validate" / "captures" / "nvidia-smi-xml" / "h100x8-580.105.08.xml"
    marker = tmp_path / "imported"
    for name in ("capture", "reports"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "conftest.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n"
        )
    shutil.copy(capture, tmp_path / "capture" / capture.name)
    done = run_suite(
        "--replay",
        str(tmp_path / "capture" / capture.name),
        "--json",
        str(tmp_path / "reports" / "r.json"),
        "-k",
        "test_driver",
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert json.loads((tmp_path / "reports" / "r.json").read_text())["host"]["checks"]
    assert not marker.exists(), marker.read_text()


def test_a_stop_while_pytest_starts_is_an_interrupt_not_a_traceback(tmp_path):
    """SIGTERM (or Ctrl-C) can land while pytest is still loading its plugins and conftests, before
    its session catches an interrupt (found under load: the run died by SIGINT with a traceback).
    It ends as any interrupt does: 130, the verdict line, no traceback, no temporary report."""
    plugin = tmp_path / "plugins" / "stop_at_import.py"
    plugin.parent.mkdir()
    plugin.write_text("import os, signal\n\nos.kill(os.getpid(), signal.SIGTERM)\n")
    out = tmp_path / "reports"
    done = run_suite(
        "--junit",
        str(out / "r.xml"),
        "-p",
        "stop_at_import",
        env={"PYTHONPATH": str(plugin.parent)},
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 130, output[-2000:]
    assert output.strip().splitlines()[-1] == "validate: NOT READY: the run was interrupted", output
    assert "Traceback" not in output, output
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []
