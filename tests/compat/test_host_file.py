"""`invoke resolve --host FILE` and `invoke doctor --host FILE`: a stack chosen for a server from
its capture (real captures in tests/validate/captures/), as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[1] / "validate" / "captures"
GB200 = CAPTURES / "nvidia-smi-xml" / "gb200x4-arm64.xml"
A100 = CAPTURES / "nvidia-smi-xml" / "a100-sxm4-40gb-570.148.08.xml"


def _ok(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_resolve_reads_the_driver_and_gpus_of_a_capture(invoke_cli):
    stack = _ok(invoke_cli("resolve", "--host", str(A100), "--framework", "torch", "--json"))
    assert any("570.148.08 (read from" in reason for reason in stack["reasons"])
    assert any("compute capability 8.0" in reason for reason in stack["reasons"])


def test_command_line_driver_wins_over_the_capture(invoke_cli):
    stack = _ok(
        invoke_cli(
            "resolve", "--host", str(GB200), "--driver", "535.104.05", "--gpu-arch", "8.0", "--json"
        )
    )
    assert not any("read from" in reason for reason in stack["reasons"])


def test_doctor_shows_the_captured_server(invoke_cli):
    data = _ok(invoke_cli("doctor", "--host", str(GB200), "--json"))
    assert data["host_file"] == str(GB200)
    assert data["nvml"]["driver_version"] == "580.173.02" and len(data["nvml"]["gpus"]) == 4
    assert data["nvml"]["gpus"][0]["compute_capability"] == "10.0"
    assert data["recommended"]["torch"]["available"], data["recommended"]["torch"]


def test_an_unknown_product_is_said_not_guessed(invoke_cli, tmp_path):
    capture = tmp_path / "mystery.xml"
    text = A100.read_text(encoding="utf-8").replace("NVIDIA A100-SXM4-40GB", "NVIDIA Mystery 9000")
    capture.write_text(
        text.replace("<pci_device_id>20B010DE</pci_device_id>", ""), encoding="utf-8"
    )  # no A100 id
    out = invoke_cli("resolve", "--host", str(capture))
    assert out.returncode == 2, out.stderr
    assert (
        "NVIDIA Mystery 9000 is unknown (not in validate/host/gpu_archs.yaml)" in out.stderr
        and "--gpu-arch" in out.stderr
    )
    assert "Traceback" not in out.stderr


def test_a_file_that_is_no_capture_is_one_line_exit_2(invoke_cli, tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n", encoding="utf-8")
    for task in ("resolve", "doctor"):
        out = invoke_cli(task, "--host", str(bad))
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().count("\n") == 0 and "nvidia-smi -q -x" in out.stderr


def test_doctor_names_the_last_driver_line_of_a_kepler_host(invoke_cli, tmp_path):
    """SYNTHETIC: the A100 capture as driver 340 prints a Tesla K20m
    (tests/validate/host_variants.py)."""
    from host_variants import driver340_kepler

    capture = tmp_path / "k20m-340.xml"
    capture.write_text(driver340_kepler(), encoding="utf-8")
    data = _ok(invoke_cli("doctor", "--host", str(capture), "--json"))
    assert data["nvml"]["gpus"][0]["compute_capability"] == "3.5"
    (line,) = data["legacy"]["lines"]
    assert (
        "Kepler (cc 3.5)" in line
        and "R470" in line
        and "--cuda 11.8" in line
        and "340.24 is older" in line
    )


def test_doctor_reads_an_old_drivers_a100_name(invoke_cli, tmp_path):
    """SYNTHETIC: the A100 capture with the name driver 460 reports ("A100-SXM4-40GB", no "NVIDIA
    ")."""
    capture = tmp_path / "a100-old-name.xml"
    capture.write_text(
        A100.read_text(encoding="utf-8").replace("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        encoding="utf-8",
    )
    data = _ok(invoke_cli("doctor", "--host", str(capture), "--json"))
    assert data["nvml"]["gpus"][0]["compute_capability"] == "8.0" and data["legacy"]["lines"] == []
    assert data["recommended"]["torch"]["available"], data["recommended"]["torch"]


def test_resolve_refuses_a_kepler_host_as_doctor_describes_it(invoke_cli, tmp_path):
    """SYNTHETIC driver, real name: the A100 capture as driver 340.24 prints a Tesla K20m (Kepler,
    cc 3.5), for which no PyTorch build has kernels: the refusal names R470 and CUDA 11.8, as doctor
    does, never a driver no Kepler card runs."""
    from host_variants import driver340_kepler

    capture = tmp_path / "k20m-340.xml"
    capture.write_text(driver340_kepler(), encoding="utf-8")
    out = invoke_cli("resolve", "--host", str(capture))
    assert out.returncode == 3, out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert (
        "Kepler (cc 3.5): the last driver branch that runs it is R470, the last CUDA that "
        "builds for it 11.8" in out.stderr
    )
    assert (
        "no PyTorch stack gpuenv knows runs on it" in out.stderr
        and "--framework tensorflow on an R470 driver" in out.stderr
    )
    assert "520.61.05" not in out.stderr and "upgrade the driver" not in out.stderr


def test_resolve_tells_a_k80_on_an_old_driver_its_last_branch(invoke_cli, tmp_path):
    """SYNTHETIC driver, real name: a Tesla K80 (cc 3.7) on driver 340.24. PyTorch's CUDA 11.8
    builds have sm_37, so an R470 driver runs one (minor-version compatibility): the fix is that
    branch, re-resolved, not the CUDA 11.8 image's own floor 520.61.05."""
    from host_variants import driver340_kepler

    capture = tmp_path / "k80-340.xml"
    k80 = (
        driver340_kepler().replace("Tesla K20m", "Tesla K80").replace("102810DE", "102D10DE")
    )  # GK210GL [Tesla K80]
    capture.write_text(k80, encoding="utf-8")
    out = invoke_cli("resolve", "--host", str(capture))
    assert out.returncode == 3, out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "Kepler (cc 3.7): the last driver branch that runs it is R470" in out.stderr
    assert (
        "install an R470 driver (gives PyTorch 2.7.1 cu118" in out.stderr
        and "upgrade the driver" not in out.stderr
    )


def test_doctor_and_the_replay_agree_that_a_cc_3_0_kepler_ends_with_cuda_10_2(invoke_cli, tmp_path):
    """SYNTHETIC driver and name, real capture: the A100 capture as driver 470.256.02 printed a
    Tesla K10 (cc 3.0, GK104). CUDA 11.0 dropped sm_30, so `doctor --host` and the replay's identity
    row both name R470 and CUDA 10.2, never the 11.8 of Kepler's 3.5 and 3.7."""
    import os
    import subprocess
    import sys

    text = A100.read_text(encoding="utf-8").replace("NVIDIA A100-SXM4-40GB", "Tesla K10.G1.8GB")
    text = text.replace(
        "<pci_device_id>20B010DE</pci_device_id>", ""
    )  # the A100's id would name an A100
    capture = tmp_path / "k10-470.xml"
    capture.write_text(
        text.replace("<driver_version>570.148.08", "<driver_version>470.256.02"), encoding="utf-8"
    )
    data = _ok(invoke_cli("doctor", "--host", str(capture), "--json"))
    assert data["nvml"]["gpus"][0]["compute_capability"] == "3.0"
    (line,) = data["legacy"]["lines"]
    assert (
        "(cc 3.0): the last driver branch that runs it is R470, the last CUDA that builds for "
        "it 10.2" in line
    ), line
    root = Path(__file__).resolve().parents[2]
    replay = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "--replay",
            str(capture),
            "--json",
            str(tmp_path / "r.json"),
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    rows = [
        c
        for section in json.loads((tmp_path / "r.json").read_text(encoding="utf-8")).values()
        if isinstance(section, dict)
        for c in section.get("checks", [])
    ]
    (identity,) = [c["measured"] for c in rows if c["check"] == "gpu identity"]
    assert "Kepler, cc 3.0: legacy, last driver branch R470, last CUDA 10.2" in identity, identity
    printed = " ".join(
        " ".join(line.split()) for line in replay.stdout.splitlines()
    )  # the table wraps the cell, never cuts it
    assert "last CUDA 10.2" in printed and "11.8" not in printed, replay.stdout[-3000:]


def _in_process(argv: list[str], capsys) -> str:
    """`invoke ARGV` run by Invoke's Program in this process (as a user's script or a test runs
    several tasks in one interpreter); its stdout, after checking it exited 0."""
    from invoke import Program

    from gpuenv.cli import namespace

    tasks = namespace().tasks
    # Invoke pops each option's help from the task's table as it parses: put it back for later tests
    helps = {name: dict(task.help) for name, task in tasks.items()}
    try:
        Program(namespace=namespace()).run(["invoke", *argv], exit=False)
    finally:
        for name, task in tasks.items():
            task.help.clear()
            task.help.update(helps[name])
    out, err = capsys.readouterr()
    assert "gpuenv:" not in err, err
    return out


def test_a_tasks_host_and_platform_stay_with_that_task(tmp_path, monkeypatch, capsys):
    """--host and --platform are arguments of the task that takes them: a later task in the same
    process (lock takes neither) plans for this machine again. When they were module globals set
    by resolve, the next lock planned for the GB200 capture, or for aarch64."""
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path / "locks"))  # no lock, no current stack
    monkeypatch.chdir(tmp_path)  # no invoke.yaml: gpuenv's defaults
    lock = ["--dry", "lock", "--framework", "torch"]
    here = _in_process(lock, capsys)
    server = json.loads(_in_process(["resolve", "--host", str(GB200), "--json"], capsys))
    assert server["platform"] == "linux-aarch64"
    assert _in_process(lock, capsys) == here
    arm = ["resolve", "--platform", "linux-aarch64", "--cuda", "cpu", "--json"]
    assert json.loads(_in_process(arm, capsys))["platform"] == "linux-aarch64"
    assert _in_process(lock, capsys) == here


def test_the_tasks_platform_beats_the_teams_one_platform(invoke_cli):
    """The command line beats the team's files: with invoke.yaml's platforms (here through its
    environment variable) naming linux-64, `resolve --platform linux-aarch64` plans for aarch64
    and says the option is why; without the option the team's platform stands."""
    env = {"INVOKE_GPUENV_PLATFORMS": "linux-64"}
    pinned = ("--driver", "570.86.15", "--gpu-arch", "9.0", "--json")
    told = invoke_cli("resolve", "--platform", "linux-aarch64", *pinned, env=env)
    assert told.returncode == 0, told.stderr
    assert json.loads(told.stdout)["platform"] == "linux-aarch64"
    team = invoke_cli("resolve", *pinned, env=env)
    assert team.returncode == 0, team.stderr
    assert json.loads(team.stdout)["platform"] == "linux-64"
