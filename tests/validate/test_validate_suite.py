"""The suite run for real on this host, as `python -m validate` in a subprocess (or, where a
verdict and its lines are the subject, through the same function in this process).

On a machine without a GPU (CI) told `--expect-gpus 0` the CPU checks run and pass and every GPU
check skips with NVML's exact reason; without it, a host with no NVIDIA driver and no NVIDIA device
says so in one line and is validated as CPU-only (a bare host whose driver is broken still expects
a GPU), and `--expect-gpus 1` fails the run with that one reason, once. With a GPU present these
no-GPU expectations do not apply, so those tests skip saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from suiteruns import HOST, MISSING, no_gpu_only, validate_in_process

from validate.host import nvml

REPO = Path(__file__).resolve().parents[2]
NO_DRIVER = "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver on this host)"

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"needs PyTorch and TensorFlow; not importable here: {', '.join(MISSING)}",
    ),
]

cpu_only_here = pytest.mark.skipif(
    not nvml.cpu_only_host(HOST),
    reason=f"this host has an NVIDIA driver or device ({HOST.error or 'NVML answers'}): it is no "
    "CPU-only host",
)


def run_suite(
    *args: str, cwd: Path = REPO, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    }
    full_env.update(env or {})
    return subprocess.run(
        # A bound on a hang, not a speed target: a --quick run took over 300 s on a shared 2-CPU
        # machine at load 18.
        [sys.executable, "-m", "validate", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def run_in_process(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """run_suite's result, the suite run by the function `python -m validate` calls, in this
    process (suiteruns.validate_in_process): for the tests of a verdict, its exit status and its
    lines. The command's own process is proven by the --quick run, the copy of validate/ alone,
    the site without frameworks, the baseline runs and the one-line refusals."""
    status, stdout, stderr = validate_in_process(
        list(args), env=env, unset=("NVIDIA_VISIBLE_DEVICES", "GPUENV_STACK_FILE")
    )
    return subprocess.CompletedProcess(["python", "-m", "validate", *args], status, stdout, stderr)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("quick")
    done = run_suite(
        "--quick",
        "--expect-gpus",
        "0",
        "--json",
        str(out / "report.json"),
        "--junit",
        str(out / "report.xml"),
    )
    return (
        done,
        json.loads((out / "report.json").read_text()),
        ET.parse(out / "report.xml").getroot(),
    )


def flat(text: str) -> str:
    """The output with line wraps undone (the summary wraps reasons at 120 columns)."""
    return " ".join(text.split())


@no_gpu_only
def test_quick_run_passes_on_cpu_with_gpu_checks_skipped(quick_run):
    done, data, _ = quick_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "validate: every check passed (or skipped with its reason)" in done.stdout
    table = done.stdout[done.stdout.index("gpuenv validation report") :]
    assert "check" in table and "threshold" in table and "verdict" in table
    # The one-screen summary: every skipped framework check on one line, the reason once
    # (wrapped to 120 columns); --verbose lists each row with its reason.
    (skipped,) = [
        line
        for line in table.splitlines()
        if line.startswith("skipped") and "framework check(s)" in line
    ]
    # More names than fit: the line is cut at 120 columns, and each name it shows whole is a check
    # the JSON report says skipped.
    assert len(skipped) == 120 and skipped.endswith("..."), skipped
    shown = skipped.split("framework check(s) (", 1)[1].split(", ")[:-1]
    rows = {
        c["check"]: c["verdict"]
        for s in data.values()
        if isinstance(s, dict)
        for c in s.get("checks") or ()
    }
    assert shown and all(rows.get(name) == "skip" for name in shown), (shown, rows)
    # The GPU speed checks skip for NVML's reason, on the lines after it.
    after = flat(table[table.index(skipped) + len(skipped) :])
    assert "matmul throughput" in after and NO_DRIVER in after


@no_gpu_only
def test_json_report_has_cpu_results_and_exact_skip_reasons(quick_run):
    _, data, _ = quick_run
    assert data["host"]["nvml"]["error"] == NO_DRIVER
    assert data["summary"]["ok"] is True and data["summary"]["failed"] == 0
    checks = {c["check"]: c for c in data["host"]["checks"]}
    assert checks["torch matmul correct (cpu)"]["verdict"] == "pass"
    assert checks["tensorflow matmul correct (/CPU:0)"]["verdict"] == "pass"
    loss = next(c for name, c in checks.items() if name.startswith("cnn training loss (cpu"))
    assert loss["verdict"] == "pass"
    losses, _, note = loss["measured"].partition(" (")
    first, last = (float(x) for x in losses.split(" -> "))
    assert last < first
    assert note == "1 thread, --quick)", (
        loss
    )  # one thread: a busy host's cores are not oversubscribed (test_05_speed.QUICK_CPU_THREADS)
    samples = checks["cnn training samples/s (cpu)"]
    assert samples["value"] > 0 and samples["verdict"] == "not judged"
    # TensorFlow's speed path ran on the CPU (issue 17 item 5): a convolutional training run whose
    # loss fell, and a matmul figure recorded but not judged (no reference for a CPU).
    tf_loss = checks["tensorflow conv training loss (cpu)"]
    assert tf_loss["verdict"] == "pass"
    first, last = (float(x) for x in tf_loss["measured"].split(" -> "))
    assert last <= 0.7 * first
    tf_matmul = checks["tensorflow matmul fp32 TFLOPS (cpu)"]
    assert tf_matmul["verdict"] == "not judged" and tf_matmul["value"] > 0
    assert (
        checks["tensorflow matmul throughput"]["verdict"] == "skip"
        and checks["tensorflow matmul throughput"]["reason"] == NO_DRIVER
    )
    assert checks["tensorflow conv training gpu"]["verdict"] == "skip"
    assert checks["memory bandwidth"]["verdict"] == "skip"
    assert checks["memory bandwidth"]["reason"] == NO_DRIVER
    assert data["host"]["frameworks"]["torch"]["version"].startswith("2.")
    # What the installed TensorFlow's build_info.py says, read without importing it
    # (validate/host/tfbuild.py).
    from validate.host.tfbuild import installed_build_info

    assert data["host"]["frameworks"]["tensorflow"]["is_cuda_build"] is bool(
        (installed_build_info() or {})["is_cuda_build"]
    )
    assert all(c["seconds"] is not None for c in data["host"]["checks"])


@no_gpu_only
def test_junit_xml_lists_every_check_and_skip_reason(quick_run):
    _, _, root = quick_run
    suite = root.find("testsuite") if root.tag == "testsuites" else root
    assert suite is not None
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert (
        "test_training_loop_cpu" in cases
        and cases["test_training_loop_cpu"].find("skipped") is None
    )
    skipped = cases["test_matmul_throughput[no-gpu]"].find("skipped")
    assert skipped is not None and skipped.get("message") == NO_DRIVER
    assert int(suite.get("failures")) == 0 and int(suite.get("errors")) == 0


@no_gpu_only
def test_expecting_a_gpu_fails_and_says_what_was_seen(tmp_path):
    done = run_in_process(
        "--quick",
        "--expect-gpus",
        "1",
        "--json",
        str(tmp_path / "r.json"),
        "-k",
        "count or driver or sees",
    )
    assert done.returncode == 1, done.stdout[-3000:]
    assert "validate: NOT READY: some checks failed" in done.stdout
    assert f"NVML sees 0 GPU(s), expected exactly 1 GPU(s) (--expect-gpus 1): {NO_DRIVER}" in flat(
        done.stdout
    )
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["summary"]["ok"] is False and data["summary"]["failed"] == 1, (
        "the missing GPU fails one check, once"
    )
    assert done.stdout.count("expected exactly 1 GPU(s)") == 1, done.stdout[-3000:]
    assert "validating as a CPU-only host" not in done.stdout


@cpu_only_here
def test_a_host_without_nvidia_driver_or_device_is_validated_as_cpu_only(tmp_path):
    """No --expect-gpus, no driver, no /dev/nvidia*: one line says so, and the CPU checks decide."""
    done = run_in_process(
        "--quick",
        "-k",
        "nvml_gpu_count or computes_on_cpu or sees",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert done.stdout.count("no NVIDIA GPU or driver here: validating as a CPU-only host") == 1
    assert (
        "validate: every check passed" in done.stdout
        and "expected at least 1 GPU" not in done.stdout
    )


def test_only_a_host_with_no_driver_and_no_device_counts_as_cpu_only(tmp_path):
    """A broken driver (another NVML error, or a /dev/nvidia0 left) must not read as a CPU-only
    host."""
    dev = tmp_path / "dev"
    dev.mkdir()
    assert nvml.cpu_only_host(nvml.HostInfo(error=nvml.NO_DRIVER), dev)
    assert not nvml.cpu_only_host(
        nvml.HostInfo(error="NVML: the NVIDIA kernel driver is not loaded"), dev
    )
    (dev / "nvidia0").touch()
    assert not nvml.cpu_only_host(nvml.HostInfo(error=nvml.NO_DRIVER), dev)


@no_gpu_only
def test_nvidia_visible_devices_asking_for_gpus_fails_too():
    done = run_suite("--quick", "-k", "nvml_gpu_count", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    assert done.returncode == 1
    assert "NVML sees 0 GPU(s), expected at least 1 GPU(s) (NVIDIA_VISIBLE_DEVICES=all)" in flat(
        done.stdout
    )


def test_no_checks_collected_is_not_success():
    done = run_suite("-k", "no_check_has_this_name")
    assert done.returncode == 1
    assert "validate: NOT READY: no checks were collected" in done.stdout


def test_stack_claims_compared_with_installed_build(tmp_path):
    import torch

    stack = tmp_path / "stack.json"
    stack.write_text(
        json.dumps(
            {
                "framework": "torch",
                "framework_version": "9.9.9",
                "cuda": "cpu",
                "stack_id": "torch9.9.9-cpu-py3.11",
            }
        )
    )
    done = run_in_process("-k", "stack_matches", env={"GPUENV_STACK_FILE": str(stack)})
    assert done.returncode == 1
    assert f"framework {torch.__version__} installed, image claims 9.9.9" in done.stdout
    stack.write_text(
        json.dumps(
            {
                "framework": "torch",
                "framework_version": torch.__version__.split("+")[0],
                "cuda": torch.version.cuda or "cpu",
            }
        )
    )
    assert (
        run_in_process("-k", "stack_matches", env={"GPUENV_STACK_FILE": str(stack)}).returncode == 0
    )


def test_runs_from_a_copy_of_the_validate_folder_alone(tmp_path):
    """Inside an image only validate/ is copied: no gpuenv package, no repository files."""
    shutil.copytree(
        REPO / "validate", tmp_path / "validate", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {"PYTHONPATH": ""}
    done = run_suite("-k", "computes_on_cpu or torch_build", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "torch matmul correct (cpu)" in done.stdout
    assert str(REPO) not in done.stdout


#: The environment of the baseline test's runs: PyTorch's CPU training on one thread. The verdict
#: under test follows the file, not the figure; an idle OpenMP thread spins on a busy two-core
#: machine, and one thread halves the three full CPU trainings' CPU time (44 to 22 s each here).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def test_baseline_saved_then_used(tmp_path):
    baseline = tmp_path / "baseline.json"
    saved = run_suite("-k", "training_loop_cpu", "--save-baseline", str(baseline), env=ONE_THREAD)
    assert saved.returncode == 0, saved.stdout[-3000:]
    models = json.loads(baseline.read_text())["models"]
    assert models["host"]["cnn training samples/s (cpu)"] > 0
    # The verdict must follow the baseline, not this machine's load: a baseline far below any real
    # figure passes, one far above any fails (and the run exits 1).
    data = json.loads(baseline.read_text())
    for figure, verdict, code in ((1e-6, "pass", 0), (1e12, "fail", 1)):
        data["models"]["host"]["cnn training samples/s (cpu)"] = figure
        baseline.write_text(json.dumps(data))
        used = run_suite(
            "-k",
            "training_loop_cpu",
            "--baseline",
            str(baseline),
            "--json",
            str(tmp_path / "r.json"),
            env=ONE_THREAD,
        )
        row = next(
            c
            for c in json.loads((tmp_path / "r.json").read_text())["host"]["checks"]
            if c["check"] == "cnn training samples/s (cpu)"
        )
        assert row["threshold"].startswith(">= 0.85 x baseline")
        assert (row["verdict"], used.returncode) == (verdict, code), used.stdout[-2000:]


def test_unusable_baseline_is_bad_input_named_in_one_line(tmp_path):
    done = run_suite("--baseline", str(tmp_path / "missing.json"))
    assert done.returncode == 2
    assert (
        done.stdout
        == f"validate: --baseline: baseline file {tmp_path / 'missing.json'}: it does not exist: "
        "make one with --save-baseline\n"
    )


def _site_without_frameworks(folder: Path) -> Path:
    """A site folder holding only what the suite needs (pytest and its dependencies, nvidia-ml-py):
    no torch, no tensorflow, no PyYAML. Links to the installed packages, nothing copied or faked."""
    folder.mkdir()
    for name in (
        "pytest",
        "_pytest",
        "pluggy",
        "iniconfig",
        "packaging",
        "pygments",
        "pynvml",
        "py",
    ):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (folder / source.name).symlink_to(source)
    return folder


def test_missing_frameworks_skip_saying_so(tmp_path):
    site = _site_without_frameworks(tmp_path / "site")
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "validate",
            "--quick",
            "--expect-gpus",
            "0",
            "--json",
            str(tmp_path / "r.json"),
        ],
        cwd=REPO,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    checks = {
        c["check"]: c for c in json.loads((tmp_path / "r.json").read_text())["host"]["checks"]
    }
    assert checks["torch build"]["verdict"] == "skip"
    assert (
        checks["torch build"]["reason"] == "PyTorch is not installed here (No module named 'torch')"
    )
    assert checks["tensorflow build"]["reason"].startswith("TensorFlow is not installed here")
    assert checks["training loop cpu"]["verdict"] == "skip"
