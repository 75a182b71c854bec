"""`invoke doctor / matrix / resolve` run as a user runs them: a subprocess, exit codes, no tracebacks."""

from __future__ import annotations

import json

import pytest

from gpuenv.compat import load_matrix


def test_list_shows_the_tasks(invoke_cli):
    out = invoke_cli("--list")
    assert out.returncode == 0, out.stderr
    for name in ("doctor", "matrix", "resolve"):
        assert name in out.stdout


def test_resolve_json_has_the_contract_keys(invoke_cli):
    out = invoke_cli("resolve", "--cuda", "12.1", "--torch", "2.1", "--python", "3.11", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("cuda", "cuda_version", "min_driver", "base_image", "python", "framework", "framework_version", "wheel_variant", "index_url", "reasons"):
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
        (["--driver", "525.60.13", "--cuda", "12.1"], 3, "upgrade the driver to >= 530.30.02 or use --cuda 11.8"),
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


def test_doctor_on_a_machine_without_gpu(invoke_cli):
    out = invoke_cli("doctor")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert "driver" in out.stdout and "docker" in out.stdout
    data = json.loads(invoke_cli("doctor", "--json").stdout)
    if not data["nvml"]["available"]:
        assert data["nvml"]["why"], "a missing probe says why"
    assert set(data["recommended"]) == {"torch", "tensorflow"}
    # without a driver the recommendation still stands, with the driver marked unchecked
    rec = data["recommended"]["torch"]
    assert rec["available"], rec
    if not data["nvml"]["available"]:
        assert any("driver not checked" in r for r in rec["reasons"])
