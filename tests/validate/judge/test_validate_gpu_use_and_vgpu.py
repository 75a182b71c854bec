"""Issue 34, items 1, 2 and 5: verdicts an operator gives on a busy GPU whose processes are not
listed, a desktop whose processes hold most of the memory, vGPU guests and hypervisors, and
captures cut short or excerpted. Each case is a SYNTHETIC variant of a real capture
(tests/validate/vgpu_variants.py names the edit and where its spelling comes from), replayed end
to end (`python -m validate --replay`), beside the real captures that must keep their verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import vgpu_variants as v
from vgpu_variants import CASES

from validate.host import nvml
from validate.host.capture import parse_capture
from validate.host.replay import ReplayNvml
from validate.judge.gpu_use import gpu_in_use_verdict

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = Path(__file__).parent.parent / "captures"
GIB = 2**30


def _run(path: Path, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "validate", "--replay", str(path), "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    return {"status": done.returncode, "out": done.stdout + done.stderr, "json": report}


@pytest.fixture(scope="module")
def replays(tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("issue34")
    jobs = []
    for name, make in CASES.items():
        path = tmp / name
        path.write_text(make(), encoding="utf-8")
        jobs.append((name, path))
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(lambda job: (job[0], _run(job[1], tmp / f"{job[0]}.json")), jobs))


def rows(result: dict, check: str) -> list[dict]:
    return [
        c
        for s in result["json"].values()
        if isinstance(s, dict)
        for c in s.get("checks", [])
        if c["check"] == check
    ]


def failed(result: dict) -> dict[str, str]:
    return {
        c["check"]: c["reason"]
        for s in result["json"].values()
        if isinstance(s, dict)
        for c in s.get("checks", [])
        if c["verdict"] == "fail"
    }


# --- item 1: GPU use judged from what the GPU reports ------------------------------------------


@pytest.mark.parametrize("name", ["foreign-xml.xml", "foreign-text.txt", "foreign-no-reserve.xml"])
def test_a_busy_gpu_with_no_listed_process_is_foreign_work(name, replays):
    result = replays[name]
    assert result["status"] == 1 and "NOT READY" in result["out"], result["out"][-2000:]
    reason = failed(result)["gpu in use"]
    assert "65% utilisation" in reason and "no process is listed" in reason
    assert "another container's, VM's or MIG tenant's" in reason
    assert rows(result, "other compute processes")[0]["verdict"] == "pass", (
        "the process list alone said ready"
    )


def test_a_desktop_whose_processes_hold_most_memory_is_not_ready(replays):
    """807 of 1024 MiB held, five processes listed: they are not foreign, but no job fits."""
    result = replays["desktop-full.txt"]
    assert result["status"] == 1, result["out"][-2000:]
    reason = failed(result)["gpu in use"]
    assert (
        "0.79 GiB of 1.00 GiB in use" in reason
        and "5 listed process(es)" in reason
        and "no training job" in reason
    )


def test_an_idle_gpu_with_its_driver_reserve_in_used_stays_ready(replays):
    """Drivers that give only NVML's version-1 figures count the reserve (518 MiB on this A100)
    as used: no process, 0% busy: ready."""
    result = replays["idle-v1-reserve.xml"]
    assert result["status"] == 0, result["out"][-2000:]
    assert rows(result, "gpu in use")[0]["verdict"] == "pass"


@pytest.mark.parametrize(
    "path",
    sorted([*CAPTURES.glob("nvidia-smi-xml/*.xml"), *CAPTURES.glob("nvidia-smi-text/*.txt")]),
    ids=lambda p: p.name,
)
def test_no_real_capture_reads_as_foreign_work(path):
    """Every real capture (idle datacenter GPUs with a reserve, MIG parents, desktops, the L40S at
    100% with nothing in memory) keeps clear of the failing side of the rule."""
    host = nvml.read_host(ReplayNvml(parse_capture(path.read_text(encoding="utf-8"), str(path))))
    for gpu in host.gpus:
        listed = [
            p
            for group in (gpu.compute_processes or [], gpu.graphics_processes or [])
            for p in group
        ]
        used = (
            gpu.memory_allocated_bytes
            if gpu.memory_allocated_bytes is not None
            else gpu.memory_used_bytes
        )
        verdict = gpu_in_use_verdict(
            gpu.index,
            gpu.utilization_percent,
            used,
            gpu.memory_total_bytes,
            gpu.memory_allocated_bytes is not None,
            sum(p.used_bytes or 0 for p in listed),
            len(listed),
        )
        assert verdict.verdict in ("pass", "warn"), (path.name, verdict)


def test_the_rule_on_live_readings():
    """Live NVML without the v2 query: an idle H100 reads about 500 MiB used (the reserve): free;
    9 of 10 GiB with no listed process: foreign; the process lists not reported: still judged."""
    assert gpu_in_use_verdict(0, 0, 512 * 2**20, 80 * GIB, False, None, None).verdict == "pass"
    busy = gpu_in_use_verdict(2, 65, 9 * GIB, 10 * GIB, False, None, None)
    assert busy.verdict == "fail" and "the process list is not reported" in busy.reason
    assert "another container's, VM's or MIG tenant's" in busy.reason
    # Foreign work that leaves most of the memory free is foreign all the same (not "too full").
    small = gpu_in_use_verdict(1, 65, 5 * GIB, 16 * GIB, False, 0, 0)
    assert small.verdict == "fail" and "running work this host cannot see" in small.reason
    wddm = gpu_in_use_verdict(
        0, 30, 3 * GIB, 16 * GIB, True, None, 4
    )  # Windows: processes, memory not reported
    assert wddm.verdict == "pass"


# --- item 2: vGPU licence and mode ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["guest-unlicensed.txt", "guest-unlicensed.xml"])
def test_an_unlicensed_vgpu_guest_fails(name, replays):
    result = replays[name]
    assert result["status"] == 1, result["out"][-2000:]
    reason = failed(result)["virtualization"]
    assert (
        "unlicensed vGPU guest" in reason
        and "CUDA disabled" in reason
        and "docs.nvidia.com/vgpu" in reason
    )
    assert "licence" in rows(result, "virtualization")[0]["measured"]


@pytest.mark.parametrize("name", ["guest-licensed.txt", "guest-licensed.xml"])
def test_a_licensed_vgpu_guest_is_fine(name, replays):
    result = replays[name]
    assert result["status"] == 0, result["out"][-2000:]
    row = rows(result, "virtualization")[0]
    assert row["verdict"] == "pass" and "Licensed (Expiry: 2024-10-19" in row["measured"]


@pytest.mark.parametrize("name", ["hypervisor.xml", "hypervisor.txt"])
def test_a_vgpu_hypervisor_is_not_a_cuda_host(name, replays):
    result = replays[name]
    assert result["status"] == 1, result["out"][-2000:]
    reason = failed(result)["virtualization"]
    assert (
        "not a CUDA host for containers" in reason
        and "Host VGPU" in reason
        and "CUDA Version: Not Found" in reason
    )


def test_bare_metal_and_pass_through_read_as_such():
    a100 = nvml.read_host(ReplayNvml(parse_capture(v.A100_XML.read_text(encoding="utf-8"))))
    desktop = nvml.read_host(ReplayNvml(parse_capture(v.DESKTOP_TEXT.read_text(encoding="utf-8"))))
    assert (a100.gpus[0].virtualization_mode, desktop.gpus[0].virtualization_mode) == (
        "Pass-Through",
        "None",
    )
    assert a100.gpus[0].vgpu_licensed is None


# --- item 5: captures read as what they are ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "missing"),
    [("cut-text.txt", "3 of 4 GPUs missing"), ("cut-xml.xml", "7 of 8 GPUs missing")],
)
def test_a_capture_cut_short_is_not_ready(name, missing, replays):
    result = replays[name]
    assert result["status"] == 1, result["out"][-2000:]
    assert missing in failed(result)["capture holds every GPU"]


@pytest.mark.parametrize("name", ["excerpt.xml", "excerpt.txt"])
def test_an_excerpt_is_judged_on_what_it_holds(name, replays):
    """No header block: not refused (exit 2) but read; its pending row remap fails, and the report
    says the driver, CUDA version and GPU count are not in it."""
    result = replays[name]
    assert result["status"] == 1, result["out"][-2000:]
    assert "row remap pending" in failed(result)["row remapping"]
    scope = rows(result, "capture holds every GPU")[0]
    assert scope["verdict"] == "warn" and "the driver version, the CUDA version" in scope["reason"]


@pytest.mark.parametrize(
    "state, words, verdict",
    [
        (0, "Unlicensed (Unrestricted)", "fail"),
        (1, "Licensed (Expiry: 2024-10-19 6:51:17 GMT)", "pass"),
    ],
)
def test_a_live_vgpu_guest_licence_is_read_from_nvmls_own_structure(state, words, verdict):
    """Live NVML answers nvmlDeviceGetGridLicensableFeatures with nvidia-ml-py's ctypes structure
    (v4: char arrays, three feature slots) and the virtualization mode as an enum: the same reader
    the captures go through gives the licence, and the verdict follows it."""
    import pynvml

    from validate.host.virtualization import read_vgpu_license, read_virtualization
    from validate.judge.virtualization import virtualization_verdict

    features = pynvml.c_nvmlGridLicensableFeatures_v4_t()
    features.isGridLicenseSupported, features.licensableFeaturesCount = 1, 1
    feature = features.gridLicensableFeatures[0]
    feature.featureState, feature.featureEnabled = state, 1
    feature.licenseInfo, feature.productName = words.encode(), b"NVIDIA Virtual Compute Server"

    class Live:
        def nvmlDeviceGetGridLicensableFeatures(self, handle):
            return features

        def nvmlDeviceGetVirtualizationMode(self, handle):
            return pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU

        def nvmlDeviceGetHostVgpuMode(self, handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def field(read):
        try:
            return read()
        except pynvml.NVMLError:
            return None

    mode, host_mode = read_virtualization(Live(), None, field)
    licensed, text = read_vgpu_license(Live(), None, field, str)
    assert (mode, host_mode, licensed) == ("VGPU", None, bool(state))
    assert text == f"NVIDIA Virtual Compute Server: {words}"
    assert virtualization_verdict(0, mode, host_mode, licensed, text, "13.0").verdict == verdict
