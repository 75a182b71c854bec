"""The GPU path, on a real GPU host: run `pytest -m gpu` on any machine with NVIDIA GPUs and the
NVIDIA Container Toolkit (run it first on a new GPU host, before trusting its verdicts).

It builds three small CUDA images (tests/gpu/fixtures/Dockerfile: the suite on nvidia/cuda, without
a framework, with the PyTorch build and with the TensorFlow build gpuenv's resolver picks for this
host's driver), runs them through the engine module with the product's own run options
(`Engine.run_container`: `--gpus all`, 8 GiB /dev/shm, NCCL's ulimits, an init), runs the whole
suite live in them, and checks:
- the container sees the host's GPUs, by UUID;
- without a framework a GPU host is "not validated", and `--health-only` is the named way out;
- a healthy host reads ready through the real matmul, bandwidth, masking and sustained-load code,
  every health row NVML can read on this host was read (not skipped), the DDP rows ran over every
  whole GPU, and the fleet reads its report ready too;
- MirroredStrategy trains over every whole GPU;
- CUDA_VISIBLE_DEVICES masks as CUDA documents (ordinal, UUID, empty, reordered).
What it runs and expects is tests/gpu/gpuset.py, unit-tested without a GPU
(tests/validate/test_gpu_set_plan.py). Every image and container is removed by the test that made
it. Without a driver every test skips with that cause; with a driver, a container that cannot get
the GPUs fails (whether the engine has a runtime named "nvidia" or uses the toolkit's hook or CDI).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid as uuidlib
from pathlib import Path

import gpuset
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.docker, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = Path(__file__).parent / "fixtures" / "Dockerfile"
#: Overrides the resolver's base image (the build arguments' CUDA_BASE) when set.
CUDA_BASE = os.environ.get("GPUENV_TEST_CUDA_BASE")
DRIVER_FILE = Path("/proc/driver/nvidia/version")
LABEL = "gpuenv.test.gpu-set"
#: Bounds: a build that pulls the CUDA base and PyTorch's wheel; a --quick suite run on up to 8
#: GPUs.
BUILD_TIMEOUT = 3600
SUITE_TIMEOUT = 1800
REPORT_MARK = "=====gpuenv-report====="


@pytest.fixture(scope="session")
def host_gpus() -> list:
    """The host's GPUs as NVML lists them (validate/host/nvml.py); skip when there is no driver."""
    if not DRIVER_FILE.exists():
        pytest.skip(f"no NVIDIA driver on this machine ({DRIVER_FILE} is absent)")
    from validate.host import nvml

    host = nvml.read_host()
    assert host.error is None, f"the NVIDIA driver is loaded but NVML fails: {host.error}"
    assert host.gpus, "the NVIDIA driver is loaded but NVML lists no GPU"
    return sorted(host.gpus, key=lambda g: g.index)


@pytest.fixture(scope="session")
def nvidia_engine(host_gpus, docker_engine):
    """The local engine. No skip on a missing runtime named "nvidia": `--gpus` works through the
    NVIDIA Container Toolkit's hook or CDI without one, and on a host with a driver a container
    that cannot get the GPUs is a failure to see, not a reason to pass with nothing tested."""
    from gpuenv.engine import Engine

    if shutil.which("docker") is None:
        pytest.skip("no docker command on PATH (the GPU set builds its images as a user does)")
    return Engine.local()


@pytest.fixture(scope="session")
def gpu_images(nvidia_engine, host_gpus, tmp_path_factory):
    """{"bare", "torch", "tensorflow": tag}: the small CUDA images, built for this session with
    the resolver's builds for this driver, and removed after."""
    from validate.host import nvml

    context = tmp_path_factory.mktemp("gpu-context")
    shutil.copytree(
        ROOT / "validate", context / "validate", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(DOCKERFILE, context / "Dockerfile")
    args = gpuset.torch_build_args(
        nvml.read_host().driver_version,
        [g.compute_capability for g in host_gpus if g.compute_capability],
    )
    if CUDA_BASE:
        args["CUDA_BASE"] = CUDA_BASE
    session = uuidlib.uuid4().hex[:12]
    tags = {}
    try:
        for target in ("bare", "torch", "tensorflow"):
            tag = f"gpuenv-test-gpu-set:{target}-{session}"
            flags = [
                arg for key, value in args.items() for arg in ("--build-arg", f"{key}={value}")
            ]
            done = subprocess.run(
                [
                    "docker",
                    "build",
                    "--target",
                    target,
                    *flags,
                    "--label",
                    f"{LABEL}={session}",
                    "-t",
                    tag,
                    str(context),
                ],
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT,
            )
            assert done.returncode == 0, (
                f"building the {target} CUDA image ({args}) failed:\n{done.stderr[-3000:]}"
            )
            tags[target] = tag
        yield tags
    finally:
        for tag in tags.values():
            subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True, timeout=300)


def _run(
    image: str, command: str, env: dict[str, str] | None = None, timeout: int = SUITE_TIMEOUT
) -> subprocess.CompletedProcess:
    """The command in `image` through `Engine.run_container`, the product's own run options
    (gpuset.RunPlan), removed when done; bounded inside the container by `timeout`."""
    import tempfile

    from gpuenv.engine import Engine

    plan = gpuset.run_plan(image, command, env, timeout)
    out: list[str] = []
    with tempfile.TemporaryDirectory(
        prefix="gpuenv-gpu-set-"
    ) as folder:  # /workspace: nothing of the host's
        status = Engine.local().run_container(
            plan.image,
            plan.command,
            gpus=plan.gpus,
            env=plan.env,
            shm_size=plan.shm_size,
            stream=out.append,
            workdir_mount=Path(folder),
        )
    text = "".join(out)
    return subprocess.CompletedProcess(plan.command, status, text, text)


def _suite(
    image: str, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, dict, str]:
    """The whole suite live in `image`: (the run, its JSON report, its own output)."""
    command = (
        f"python3 -m validate --quick --json /tmp/report.json {' '.join(args)} > /tmp/out.txt "
        f"2>&1; s=$?; cat /tmp/out.txt; echo {REPORT_MARK}; cat /tmp/report.json; exit $s"
    )
    done = _run(image, command, env)
    output, _, report = done.stdout.partition(REPORT_MARK)
    assert report.strip(), (
        f"no JSON report came back:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    )
    return done, json.loads(report), output


def test_a_small_cuda_container_sees_the_hosts_gpus(gpu_images, host_gpus):
    done = _run(
        gpu_images["bare"],
        "python3 -c 'import json; from validate.host import nvml; print(json.dumps([g.uuid for "
        "g in sorted(nvml.read_host().gpus, key=lambda g: g.index)]))'",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [g.uuid for g in host_gpus]


def test_without_a_framework_a_gpu_host_is_not_validated_unless_health_only(gpu_images, host_gpus):
    done, report, output = _suite(gpu_images["bare"])
    assert done.returncode == 1, output[-3000:]
    assert "NOT VALIDATED: no framework in this environment" in output.strip().splitlines()[-1]
    assert report["summary"]["ok"] is False
    assert report["summary"]["not_validated"].startswith(
        "not validated: no framework in this environment"
    )
    done, report, output = _suite(gpu_images["bare"], "--health-only")
    assert done.returncode == 0, output[-3000:]  # a healthy host: every NVML health row passes
    assert report["summary"]["ok"] is True and report["summary"]["health_only"] is True


def test_the_whole_suite_reads_ready_on_a_healthy_host(gpu_images, host_gpus):
    from gpuenv.fleet.outcome import READY, status_from_report

    done, report, output = _suite(gpu_images["torch"])
    assert done.returncode == 0, output[-4000:]
    assert (
        output.strip().splitlines()[-1]
        == "validate: every check passed (or skipped with its reason)"
    )
    assert report["format"] == "gpuenv-validate-report/1"
    assert (
        set(report["host"]) >= {"nvml", "frameworks", "checks"}
        and "torch" in report["host"]["frameworks"]
    )
    for gpu in host_gpus:
        section = report[gpu.uuid]
        assert section["gpu"]["index"] == gpu.index and section["gpu"]["name"] == gpu.name
        rows = {row["check"]: row for row in section["checks"]}
        assert rows["torch matmul correct"]["verdict"] == "pass"
        figures = [
            row
            for name, row in rows.items()
            if name.startswith("matmul ") and name.endswith(" TFLOPS")
        ]
        assert figures and all(row["value"] > 0 for row in figures)
        assert rows["device memory GB/s"]["value"] > 0
    every = report["host"]["checks"] + [row for g in host_gpus for row in report[g.uuid]["checks"]]
    assert not [row for row in every if row["verdict"] == "fail"]
    assert any(row["check"].startswith("sustained") for row in every), (
        "the sustained-load check ran"
    )
    assert gpuset.shm_problem(report) is None
    assert not gpuset.health_problems(report, host_gpus)
    assert not gpuset.multigpu_problems(report, host_gpus, tensorflow=False)
    assert not gpuset.masking_problems(report)  # check 4 ran its CUDA_VISIBLE_DEVICES cases
    from validate.judge.peaks import load_peaks

    assert gpuset.interconnect_problem(report, host_gpus, load_peaks()) is None  # SXM: over nvlink
    summary = report["summary"]
    assert (
        summary["ok"] is True
        and summary["pytest_exit_status"] == 0
        and summary["not_validated"] is None
    )
    assert status_from_report(report, 0) == (READY, "")


def test_mirrored_strategy_trains_over_every_whole_gpu(gpu_images, host_gpus):
    if len([g for g in host_gpus if not g.mig_enabled]) < 2:
        pytest.skip("MirroredStrategy needs 2 or more whole GPUs; this host has fewer")
    done, report, output = _suite(gpu_images["tensorflow"], "-k", "mirrored")
    assert done.returncode == 0, output[-3000:]
    problems = gpuset.multigpu_problems(report, host_gpus, tensorflow=True)
    assert not [p for p in problems if "tensorflow" in p], problems


def _masks(gpus: list) -> list[tuple[str, str, list[int]]]:
    """(id, CUDA_VISIBLE_DEVICES, the NVML indexes CUDA must then show, in its order)."""
    last = gpus[-1]
    cases = [
        ("first-ordinal", "0", [0]),
        ("last-by-uuid", last.uuid, [last.index]),
        ("empty", "", []),
    ]
    if len(gpus) > 1:
        cases.append(("reordered", "1,0", [1, 0]))
    return cases


@pytest.mark.parametrize("case", ["first-ordinal", "last-by-uuid", "empty", "reordered"])
def test_cuda_visible_devices_masks_as_cuda_documents(gpu_images, host_gpus, case):
    if any(g.mig_enabled for g in host_gpus):
        pytest.skip(
            "a GPU of this host is in MIG mode: CUDA then lists MIG instances, not these GPUs"
        )
    masks = {name: (value, indexes) for name, value, indexes in _masks(host_gpus)}
    if case not in masks:
        pytest.skip("this host has one GPU: a reordered mask needs two")
    value, indexes = masks[case]
    probe = (
        "python3 -c 'import json, torch; from validate.host import nvml; from "
        "validate.host.devices import torch_gpus; print(json.dumps(torch_gpus(torch, [g.uuid "
        "for g in nvml.read_host().gpus])))'"
    )
    done = _run(
        gpu_images["torch"],
        probe,
        {"CUDA_VISIBLE_DEVICES": value, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    by_index = {g.index: g.uuid for g in host_gpus}
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [by_index[i] for i in indexes]
    if (
        indexes
    ):  # the suite's own masking check, and the GPUs the mask leaves computing, under the same mask
        done, report, output = _suite(
            gpu_images["torch"],
            "-k",
            "'cuda_visible_devices or computes_on_gpu'",
            env={"CUDA_VISIBLE_DEVICES": value},
        )
        assert done.returncode == 0, output[-3000:]
        assert not gpuset.masking_problems(report)
        proven = {
            row["gpu"]
            for g in host_gpus
            for row in report[g.uuid]["checks"]
            if row["check"] == "torch matmul correct" and row["verdict"] == "pass"
        }
        assert proven == {by_index[i] for i in indexes}


@pytest.fixture
def ssh_server(tmp_path):
    """The fleet tests' loopback sshd (tests/fleet/servers.py) in front of this host's engine."""
    import servers

    reason = servers.missing(servers.SSHD, "ssh-keygen", "docker")
    if reason:
        pytest.skip(f"sshd test server: {reason}")
    with servers.sshd(tmp_path / "sshd") as server:
        yield server


def test_a_multinode_job_on_one_host_over_two_containers_each_with_its_own_gpus(
    gpu_images, host_gpus, ssh_server, monkeypatch
):
    """The fleet's SSH path on one GPU host: its engine reached twice (127.0.0.1 and localhost, as
    the CPU test does), its whole GPUs split between the two with `--gpus 'URL=0,1;URL=2,3'`; each
    host's suite, then the job over NCCL across both containers, one rank per GPU given."""
    from gpuenv.cli.fleet import run_fleet
    from gpuenv.fleet.modes import FleetOptions
    from gpuenv.fleet.outcome import READY

    if len([g for g in host_gpus if not g.mig_enabled]) < 2:
        pytest.skip(
            "splitting a host's GPUs between two containers needs 2 or more whole GPUs; "
            "this host has fewer"
        )
    monkeypatch.setenv("HOME", str(ssh_server.home))  # the test's SSH key and known_hosts
    names = ("127.0.0.1", "localhost")
    hosts = [f"ssh://{ssh_server.user}@{name}:{ssh_server.port}" for name in names]
    split = gpuset.split_gpus(hosts, host_gpus)
    opts = FleetOptions(
        hosts=hosts, image=gpu_images["torch"], host_gpus=split, parallel=2, time="30"
    )
    suite = ["--quick", "-k", "torch_build or nvml_gpu_count"]
    outcomes = run_fleet(opts, suite, say=lambda text: None)
    assert [o.status for o in outcomes[:2]] == [READY, READY], [o.reason for o in outcomes[:2]]
    for outcome in outcomes[:2]:  # each host's suite saw only the GPUs it was given
        seen = [g["index"] for g in outcome.report["host"]["nvml"]["gpus"]]
        assert len(seen) == len(split[outcome.host].split(",")), (outcome.host, seen)
    joint = outcomes[2] if len(outcomes) > 2 else None
    problems = gpuset.multinode_problems(joint, split)
    assert not problems, (problems, joint and joint.reason, joint and joint.details)
