"""`invoke doctor / matrix / resolve` run as a user runs them: a subprocess, exit codes, no
tracebacks."""

from __future__ import annotations

import json

import pytest
from outsidecauses import nvml_library_present

from gpuenv.compat.matrix import load_matrix


def test_list_shows_the_tasks(invoke_cli):
    out = invoke_cli("--list")
    assert out.returncode == 0, out.stderr
    for name in ("doctor", "matrix", "resolve"):
        assert name in out.stdout


#: What no command's start may import: every command (`invoke --list` too) loads tasks.py, and
#: these cost a tenth of a second or more between them (the engine package, the suite's report
#: writer and judges, the XML parser, the progress view), or far more (docker, matplotlib).
NOT_AT_START = (
    "gpuenv.engine",
    "gpuenv.progress",
    "validate.report.record",
    "validate.judge",
    "xml.etree",
    "docker",
    "paramiko",
    "matplotlib",
    "torch",
    "tensorflow",
    "conda_lock",
)


def test_loading_the_tasks_imports_nothing_heavy():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "import sys, tasks; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    heavy = [m for m in loaded if m.startswith(NOT_AT_START)]
    assert heavy == [] and "gpuenv.cli.validation" in loaded


def test_resolve_json_has_the_contract_keys(invoke_cli):
    out = invoke_cli("resolve", "--cuda", "12.1", "--torch", "2.1", "--python", "3.11", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in (
        "cuda",
        "cuda_version",
        "min_driver",
        "base_image",
        "python",
        "framework",
        "framework_version",
        "wheel_variant",
        "index_url",
        "reasons",
    ):
        assert key in data
    assert data["wheel_variant"] == "cu121"
    assert data["base_image"] == "nvidia/cuda:12.1.1-base-ubuntu22.04"
    assert isinstance(data["reasons"], list) and data["reasons"]


def test_resolve_table_for_people(invoke_cli):
    out = invoke_cli("resolve", "--framework", "tensorflow", "--tensorflow", "2.15")
    assert out.returncode == 0, out.stderr
    assert "tensorflow[and-cuda]==2.15.1" in out.stdout
    assert "why:" in out.stdout


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (["--cuda", "12.7"], 2, "no CUDA 12.7 release is known"),
        (["--cuda", "abc"], 2, "is not a CUDA version"),
        (["--driver", "x.y"], 2, "is not an NVIDIA driver version"),
        (["--framework", "jax"], 2, "'jax' is not supported"),
        (
            ["--driver", "525.60.13", "--cuda", "12.1"],
            3,
            "upgrade the driver to >= 530.30.02 or use --cuda 12.0 (gives PyTorch",
        ),
        # issue 18: a GPU the driver predates, and Jetson
        (
            ["--driver", "560.35.03", "--gpu-arch", "10.0"],
            3,
            "the first driver branch that runs it is R570",
        ),
        (["--driver", "540.4.0", "--gpu-arch", "8.7"], 3, "Jetson AGX Orin"),
    ],
)
def test_errors_are_one_line_with_exit_codes(invoke_cli, args, code, fragment):
    out = invoke_cli("resolve", *args)
    assert out.returncode == code, (out.stdout, out.stderr)
    assert fragment in out.stderr
    assert "Traceback" not in out.stderr + out.stdout
    assert len(out.stderr.strip().splitlines()) <= 2


def test_matrix_table_and_json_agree(invoke_cli):
    table = invoke_cli("matrix")
    data = invoke_cli("matrix", "--json")
    assert table.returncode == 0 and data.returncode == 0
    parsed = json.loads(data.stdout)
    m = load_matrix()
    assert len(parsed["cuda_releases"]) == len(m.cuda_releases)
    for c in m.cuda_releases:
        assert all(u.version in table.stdout for u in c.updates)
    assert all(u["source"] for e in parsed["cuda_releases"] for u in e["updates"])
    assert parsed["checked"] == m.checked.isoformat()


@pytest.mark.skipif(
    nvml_library_present(), reason="libnvidia-ml.so.1 is present: this host has an NVIDIA driver"
)
def test_doctor_on_a_machine_without_gpu(invoke_cli):
    out = invoke_cli("doctor")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert "driver" in out.stdout and "docker" in out.stdout
    data = json.loads(invoke_cli("doctor", "--json").stdout)
    assert data["nvml"]["available"] is False
    assert "libnvidia-ml.so.1 not found" in data["nvml"]["why"], "a missing probe says why"
    assert set(data["recommended"]) == {"torch", "tensorflow"}
    # without a driver the recommendation still stands, with the driver marked unchecked
    rec = data["recommended"]["torch"]
    assert rec["available"], rec
    assert any("driver not checked" in r for r in rec["reasons"]), rec["reasons"]


def test_resolve_json_keeps_image_cuda_and_adds_framework_cuda(invoke_cli):
    out = invoke_cli("resolve", "--cuda", "12.2", "--framework", "torch", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["cuda"], data["cuda_version"], data["framework_cuda"]) == (
        "12.2",
        "12.2.2",
        "12.1",
    )
    assert data["base_image"] == "nvidia/cuda:12.2.2-base-ubuntu22.04"


def test_resolve_strict_driver_flag(invoke_cli):
    relaxed = json.loads(
        invoke_cli("resolve", "--driver", "535.104.05", "--gpu-arch", "8.0", "--json").stdout
    )
    strict = json.loads(
        invoke_cli(
            "resolve", "--driver", "535.104.05", "--gpu-arch", "8.0", "--strict-driver", "--json"
        ).stdout
    )
    assert relaxed["framework_cuda"] == "12.6" and relaxed["cuda"] == "12.2"
    assert strict["framework_cuda"] == strict["cuda"] == "12.1"


def test_resolve_with_the_real_wheelhouse(invoke_cli):
    from pathlib import Path

    if not any(Path("/opt/wheels").glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip("/opt/wheels holds no torch-2.13.0+cpu cp311 wheel on this machine")
    out = invoke_cli("resolve", "--cuda", "cpu", "--wheelhouse", "/opt/wheels", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["framework_version"], data["python"]) == ("2.13.0", "3.11")


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (
            ["resolve", "--cuda", "cpu", "--wheelhouse", "/nonexistent/wheels"],
            2,
            "--wheelhouse /nonexistent/wheels: no such folder",
        ),
        (
            ["lock", "--cuda", "cpu", "--wheelhouse", "/nonexistent/wheels"],
            2,
            "--wheelhouse /nonexistent/wheels: no such folder",
        ),
        (["resolve", "--cuda", "13.0", "--gpu-arch", "7.0"], 3, "CUDA 13 dropped Volta"),
        (["resolve", "--torch", "2.1", "--cuda", "13.2"], 3, "never crosses a CUDA major"),
    ],
)
def test_new_errors_are_one_line(invoke_cli, args, code, fragment):
    out = invoke_cli(*args)
    assert out.returncode == code, (out.stdout, out.stderr)
    assert fragment in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.network
def test_lock_with_wheelhouse_picks_uv_and_the_wheel_it_holds(invoke_cli, tmp_path):
    from pathlib import Path

    if not any(Path("/opt/wheels").glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip("/opt/wheels holds no torch-2.13.0+cpu cp311 wheel on this machine")
    out = invoke_cli(
        "lock",
        "--cuda",
        "cpu",
        "--framework",
        "torch",
        "--wheelhouse",
        "/opt/wheels",
        env={"GPUENV_LOCKS_DIR": str(tmp_path)},
        timeout=600,
    )
    if out.returncode != 0 and "could not reach" in out.stderr:
        pytest.skip(f"an index was unreachable: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert "backend: uv (--wheelhouse given" in out.stdout
    assert "stack: torch2.13.0-cpu-py3.11" in out.stdout
    lock = (tmp_path / "torch2.13.0-cpu-py3.11" / "requirements.lock.txt").read_text()
    assert "torch==2.13.0+cpu" in lock


def test_matrix_check_unreachable_index_is_one_line(invoke_cli):
    out = invoke_cli(
        "matrix",
        "--check",
        env={"HTTPS_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"},
    )
    assert out.returncode == 1
    errors = [
        line for line in out.stderr.splitlines() if not line.startswith("  ")
    ]  # "  ..." lines are progress
    assert len(errors) == 1 and errors[0].startswith(
        "gpuenv: cannot reach the package index at https://pypi.org/pypi/"
    ), out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


@pytest.mark.network
def test_matrix_check_exit_code_follows_the_report(invoke_cli):
    out = invoke_cli("matrix", "--check", "--json", timeout=300)
    if out.returncode == 1 and "cannot reach" in out.stderr:
        pytest.skip(f"PyPI unreachable: {out.stderr.strip()}")
    report = json.loads(out.stdout)
    assert out.returncode == (1 if report["drift"] else 0)
    assert report["curated"] and all(f["source"].startswith("https://") for f in report["findings"])


def test_resolve_a_t4_on_470_as_json(invoke_cli):
    out = invoke_cli(
        "resolve", "--driver", "470.82.01", "--gpu-arch", "7.5", "--tensorflow", "2.12", "--json"
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (data["framework_version"], data["min_driver"], data["require_cuda"]) == (
        "2.12.1",
        "450.80.02",
        "cuda>=11.0,driver>=450.80.02",
    )
    assert data["base_image"] == "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04"
