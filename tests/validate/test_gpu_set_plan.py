"""What the GPU test set (tests/gpu, run with `-m gpu` on a GPU host) runs and expects, checked
here without a GPU: its containers get the product's own run options (the suite's /dev/shm row
passes them on 8 GPUs), its PyTorch is the resolver's build for the host's driver, and its
assertions fail a report whose health rows skipped where NVML reads them, or whose DDP rows did
not cover every GPU. The reports are the suite's own, on replayed captures of real servers."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import gpuset
import pytest

from validate.host import nvml
from validate.host.capture import parse_capture
from validate.host.replay import ReplayNvml
from validate.judge.memory import shm_verdict
from validate.judge.verdict import PASS

ROOT = Path(__file__).resolve().parents[2]

CAPTURES = Path(__file__).parent / "captures" / "nvidia-smi-xml"
H100 = CAPTURES / "h100x8-580.105.08.xml"
A100 = CAPTURES / "a100-sxm4-40gb-570.148.08.xml"
GPU_SET = ROOT / "tests" / "gpu" / "test_gpu_host.py"


def host_gpus(capture: Path) -> list[nvml.GpuInfo]:
    return nvml.read_host(
        ReplayNvml(parse_capture(capture.read_text(encoding="utf-8"), capture.name))
    ).gpus


def replay_report(capture: Path, tmp_path: Path) -> dict:
    """The suite's health rows on a replayed capture, as `python -m validate --json` writes them."""
    out = tmp_path / f"{capture.stem}.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "validate",
            "--replay",
            str(capture),
            "-k",
            "gpu_health_dcgm_watches or shared_memory",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(out.read_text())


# --- the containers (D3) ------------------------------------------------------------------------


def test_the_sets_containers_get_the_products_shm_and_the_suite_passes_it_on_eight_gpus():
    options = gpuset.run_plan("image", "true").options()
    assert shm_verdict(options["shm_size"], 8).verdict == PASS
    assert {u["Name"] for u in options["ulimits"]} == {"memlock", "stack"} and options[
        "init"
    ] is True
    assert options["device_requests"] and options["device_requests"][0]["Count"] == -1  # --gpus all


def test_the_set_runs_its_containers_through_the_engine_not_a_bare_docker_run():
    source = GPU_SET.read_text(encoding="utf-8")
    assert "run_container(" in source and "gpuset.run_plan(" in source
    assert not re.search(r'"docker",\s*"run"', source), (
        "a bare docker run gets Docker's 64 MiB /dev/shm"
    )


def test_the_set_does_not_skip_on_an_engine_without_a_runtime_named_nvidia():
    """`--gpus` works through the toolkit's hook or CDI without a registered nvidia runtime."""
    source = GPU_SET.read_text(encoding="utf-8")
    assert "runtimes()" not in source and "has no nvidia runtime" not in source


# --- the PyTorch build (D17) --------------------------------------------------------------------

#: The newest CUDA each driver branch runs natively (NVIDIA's CUDA Toolkit release notes, table 3:
#: https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html): the base image's
#: NVIDIA_REQUIRE_CUDA must be met, or the container does not start.
NATIVE_CUDA = {"535.161.08": (12, 2), "550.54.15": (12, 4)}


@pytest.mark.parametrize("driver", sorted(NATIVE_CUDA))
def test_the_torch_build_is_pinned_to_the_resolvers_choice_for_the_driver(driver):
    args = gpuset.torch_build_args(driver, ["9.0"])
    assert re.fullmatch(r"torch==[\d.]+\+cu\d+", args["TORCH_REQUIREMENT"]), args
    assert args["TORCH_INDEX"].startswith("https://download.pytorch.org/whl/cu")
    cuda = tuple(int(x) for x in re.search(r"cuda:(\d+)\.(\d+)", args["CUDA_BASE"]).groups())
    assert cuda <= NATIVE_CUDA[driver], args
    assert re.fullmatch(r"tensorflow\[and-cuda\]==[\d.]+", args["TENSORFLOW_REQUIREMENT"]), args
    ubuntu = args["CUDA_BASE"].rsplit("-", 1)[-1]
    assert (
        ubuntu in gpuset.UBUNTU_PYTHON
    )  # the image's python3 is the Python the build was resolved for


# --- what a healthy host's report must hold (D17) -------------------------------------------------


def test_a_healthy_replayed_h100_report_meets_the_sets_health_assertions(tmp_path):
    report, gpus = replay_report(H100, tmp_path), host_gpus(H100)
    assert gpuset.health_problems(report, gpus) == []


def test_a_health_row_that_skipped_where_nvml_reads_it_is_named(tmp_path):
    report, gpus = replay_report(H100, tmp_path), host_gpus(H100)
    broken = copy.deepcopy(report)
    for row in broken[gpus[3].uuid]["checks"]:
        if row["check"] == "clock event time":
            row["verdict"], row["reason"] = "skip", "not reported"
    assert gpus[3].health.clock_event_us is not None
    assert gpuset.health_problems(broken, gpus) == [
        "GPU 3: 'clock event time' skipped (not reported) though the host's NVML reads it"
    ]


def test_a_reading_the_hosts_nvml_lacks_may_skip(tmp_path):
    """Driver 570 prints no clock-event counters: the row skips, and that is no problem."""
    report, gpus = replay_report(A100, tmp_path), host_gpus(A100)
    rows = {row["check"]: row for row in report[gpus[0].uuid]["checks"]}
    assert rows["clock event time"]["verdict"] == "skip" and gpus[0].health.clock_event_us is None
    assert gpuset.health_problems(report, gpus) == []


def _ddp_report(gpus: list, world: int, tensorflow: bool = True) -> dict:
    checks = [
        {"check": f"{name} ({world} ranks, nccl)", "verdict": "pass"}
        for name in (
            "ddp ranks joined",
            "ddp parameters identical",
            "ddp training loss",
            "ddp slowest rank",
        )
    ]
    if tensorflow:
        checks.append(
            {
                "check": f"tensorflow mirrored variables identical ({world} replicas, nccl "
                "all-reduce)",
                "verdict": "pass",
            }
        )
    return {"host": {"checks": checks}, **{g.uuid: {"checks": []} for g in gpus}}


def test_ddp_rows_must_cover_every_whole_gpu():
    gpus = host_gpus(H100)
    assert gpuset.multigpu_problems(_ddp_report(gpus, 8), gpus, tensorflow=True) == []
    short = gpuset.multigpu_problems(_ddp_report(gpus, 4), gpus, tensorflow=True)
    assert "no passing 'ddp parameters identical (8 ranks, nccl)' row: missing" in short
    assert any("tensorflow mirrored variables identical (8 replicas" in p for p in short)
    assert gpuset.multigpu_problems(
        {"host": {"checks": []}}, gpus, tensorflow=False
    )  # the check never ran


def test_the_shm_assertion_names_the_suites_own_row(tmp_path):
    report = replay_report(H100, tmp_path)
    small = copy.deepcopy(report)
    small["host"]["checks"].append(
        {"check": "/dev/shm size", "verdict": "fail", "reason": "/dev/shm holds only 64 MiB"}
    )
    assert gpuset.shm_problem(small) == "/dev/shm failed: /dev/shm holds only 64 MiB"


# --- masking ran and passed; NVLink hosts all-reduce over NVLink (D17) ---------------------------

LIVE_H200 = Path(__file__).parent / "captures" / "live" / "h200-580.159.04" / "live-quick.json"


def test_the_live_h200_runs_masking_rows_and_all_passed():
    report = json.loads(LIVE_H200.read_text(encoding="utf-8"))
    assert gpuset.masking_problems(report) == []


def test_a_masking_row_that_failed_or_never_ran_is_named():
    report = json.loads(LIVE_H200.read_text(encoding="utf-8"))
    failed = copy.deepcopy(report)
    name = "torch CUDA_VISIBLE_DEVICES=0 (index 0)"
    row = next(r for r in failed["host"]["checks"] if r["check"] == name)
    row["verdict"], row["reason"] = "fail", "saw none, expected GPU-833781d4"
    assert gpuset.masking_problems(failed) == [f"'{name}' fail: saw none, expected GPU-833781d4"]
    skipped = copy.deepcopy(report)
    rows = skipped["host"]["checks"]
    skipped["host"]["checks"] = [r for r in rows if "CUDA_VISIBLE_DEVICES=" not in r["check"]]
    assert gpuset.masking_problems(skipped) == [
        "no 'torch CUDA_VISIBLE_DEVICES=...' masking row: the masking check did not run"
    ]


def _busbw_report(gpus: list, measured: str, verdict: str = "pass") -> dict:
    row = {
        "check": f"nccl all-reduce busbw GB/s ({len(gpus)} GPUs)",
        "measured": measured,
        "verdict": verdict,
    }
    return {"host": {"checks": [row]}, **{g.uuid: {"checks": []} for g in gpus}}


def test_an_sxm_hosts_busbw_row_must_say_over_nvlink():
    """gpu_peaks.yaml counts the H100 SXM's 18 NVLinks: its all-reduce must run over them."""
    from validate.judge.peaks import load_peaks

    peaks, gpus = load_peaks(), host_gpus(H100)
    assert gpuset.nvlink_expected(gpus, peaks)
    nvlink = _busbw_report(gpus, "371.2 GB/s over nvlink (NCCL 2.21.5)")
    assert gpuset.interconnect_problem(nvlink, gpus, peaks) is None
    pcie = _busbw_report(gpus, "21.0 GB/s over pcie (NCCL 2.21.5)")
    assert gpuset.interconnect_problem(pcie, gpus, peaks) == (
        "'nccl all-reduce busbw GB/s (8 GPUs)' ran '21.0 GB/s over pcie (NCCL 2.21.5)', "
        "not over nvlink, on an NVLink host"
    )
    skipped = _busbw_report(gpus, "-", "skip")
    assert gpuset.interconnect_problem(skipped, gpus, peaks) == (
        "'nccl all-reduce busbw GB/s (8 GPUs)' skip: -"
    )
    assert gpuset.interconnect_problem({"host": {"checks": []}}, gpus, peaks) == (
        "no 'nccl all-reduce busbw' row on an NVLink host"
    )


def test_a_pcie_host_or_one_gpu_expects_no_nvlink():
    import dataclasses

    from validate.judge.peaks import load_peaks

    peaks, gpus = load_peaks(), host_gpus(H100)
    pcie = [dataclasses.replace(g, name="NVIDIA L4") for g in gpus]  # a product without NVLink
    assert not gpuset.nvlink_expected(pcie, peaks)
    report = _busbw_report(pcie, "21.0 GB/s over pcie (NCCL 2.21.5)")
    assert gpuset.interconnect_problem(report, pcie, peaks) is None
    assert not gpuset.nvlink_expected(host_gpus(H100)[:1], peaks)


# --- a multi-node job on one host, its GPUs split between two containers (D17) ----------------

TWO = ["ssh://ops@127.0.0.1:2222", "ssh://ops@localhost:2222"]


def test_an_eight_gpu_host_splits_four_and_four_and_the_fleet_takes_the_split():
    from gpuenv.fleet.modes import merge_options

    split = gpuset.split_gpus(TWO, host_gpus(H100))
    assert split == {TWO[0]: "0,1,2,3", TWO[1]: "4,5,6,7"}
    given = ";".join(f"{host}={value}" for host, value in split.items())
    assert merge_options({"hosts": ",".join(TWO), "gpus": given}, {}).host_gpus == split
    assert gpuset.split_gpus(TWO, host_gpus(H100)[:3]) == {TWO[0]: "0,1", TWO[1]: "2"}


def _joint(split: dict[str, str], status: str = "ready", backend: str = "nccl") -> object:
    from gpuenv.fleet.outcome import HostOutcome

    given = [
        (host, local, index)
        for host, value in split.items()
        for local, index in enumerate(value.split(","))
    ]
    ranks = [
        {"rank": r, "node": host, "local_rank": local, "uuid": f"GPU-{index}"}
        for r, (host, local, index) in enumerate(given)
    ]
    result = {"backend": backend, "world": len(ranks), "ranks": ranks}
    reason = "" if status == "ready" else "rendezvous timed out"
    return HostOutcome("multi-node job", status, reason, report={"multinode": result})


def test_the_multinode_assertions_pass_a_split_job_and_name_what_is_wrong():
    split = {TWO[0]: "0,1", TWO[1]: "2,3"}
    assert gpuset.multinode_problems(_joint(split), split) == []
    assert gpuset.multinode_problems(None, split) == ["no multi-node job ran"]
    gloo = gpuset.multinode_problems(_joint(split, backend="gloo"), split)
    assert gloo == ["ran gloo over 4 ranks, not nccl over 4"]
    short = gpuset.multinode_problems(_joint({TWO[0]: "0,1", TWO[1]: "2"}), split)
    assert f"{TWO[1]}: local ranks [0], not one per GPU of 2,3" in short
    failed = gpuset.multinode_problems(_joint(split, status="not ready"), split)
    assert failed[0] == "the job is not ready: rendezvous timed out"
    shared = _joint(split)
    for rank in shared.report["multinode"]["ranks"]:  # type: ignore[attr-defined]
        rank["uuid"] = "GPU-0"  # both containers given every GPU: ranks share one
    problems = gpuset.multinode_problems(shared, split)
    assert any("do not each hold a GPU of their own" in p for p in problems)
