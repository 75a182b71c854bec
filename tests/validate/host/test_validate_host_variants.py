"""Old schemas, missing sections and faults, replayed from SYNTHETIC variants of the real
captures (tests/validate/host_variants.py says each edit), through the same parser, NVML reader
and verdicts as a live host; and every real capture's GPUs have a known identity."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import host_variants as v
import pytest

from validate.host import nvml
from validate.host.archs import identity_text, load_archs
from validate.host.capture import parse_capture
from validate.host.replay import RecordingNvml, ReplayNvml
from validate.judge.health import (
    clock_events_verdict,
    clocks_verdict,
    compute_processes_verdict,
    fabric_verdict,
    graphics_processes_verdict,
)
from validate.judge.verdict import FAIL, PASS, SKIP

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = Path(__file__).parent.parent / "captures"
RECORDS = sorted([*CAPTURES.glob("nvidia-smi-xml/*.xml"), *CAPTURES.glob("nvidia-smi-text/*.txt")])


def host(text: str) -> nvml.HostInfo:
    return nvml.read_host(ReplayNvml(parse_capture(text, "synthetic")))


def processes(gpu: nvml.GpuInfo) -> tuple:
    def as_dicts(ps: list | None) -> list[dict] | None:
        return None if ps is None else [p.__dict__ for p in ps]

    return (
        compute_processes_verdict(gpu.index, as_dicts(gpu.compute_processes)),
        graphics_processes_verdict(gpu.index, as_dicts(gpu.graphics_processes)),
    )


# --- absence is never health ---------------------------------------------------------------------


def test_driver_340_compute_processes_are_read_and_fail():
    gpu = host(v.driver340_kepler(processes=8)).gpus[0]
    compute, graphics = processes(gpu)
    assert [p.pid for p in gpu.compute_processes] == list(range(5490, 5498))
    assert (
        compute.verdict == FAIL
        and "PID 5490 (/opt/solver/bin/solver) holding 0.10 GiB" in compute.reason
    )
    assert (
        gpu.graphics_processes is None
        and graphics.verdict == SKIP
        and "not reported" in graphics.reason
    )


def test_driver_340_clock_reasons_and_kepler_identity():
    gpu = host(v.driver340_kepler()).gpus[0]
    assert (
        gpu.throttle_reasons is not None and "gpu_idle" in gpu.throttle_reasons
    )  # clocks_throttle_* spelling
    assert (gpu.compute_capability, identity_text(gpu.name, gpu.compute_capability)) == (
        "3.5",
        "Kepler, cc 3.5: legacy, last driver branch R470, last CUDA 11.8",
    )


@pytest.mark.parametrize(
    "text",
    [v.without(v.A100_XML, "processes"), v.section_not_available(v.A100_XML, "processes")],
    ids=["section-missing", "section-N/A"],
)
def test_a_process_list_the_capture_lacks_is_not_reported(text):
    gpu = host(text).gpus[0]
    compute, graphics = processes(gpu)
    assert gpu.compute_processes is None and gpu.graphics_processes is None
    assert (compute.verdict, graphics.verdict) == (SKIP, SKIP) and "not reported" in compute.reason


def test_an_empty_process_list_is_reported_as_none():
    compute, graphics = processes(host(v.A100_XML.read_text(encoding="utf-8")).gpus[0])
    assert (compute.verdict, graphics.verdict) == (PASS, PASS)


@pytest.mark.parametrize("count", [0, 3])
def test_old_text_spelling_compute_processes(count):
    gpu = host(v.text_old_spelling(processes=count)).gpus[0]
    assert [p.pid for p in gpu.compute_processes] == [7000 + n for n in range(count)]
    assert processes(gpu)[0].verdict == (FAIL if count else PASS)
    assert gpu.throttle_reasons is not None  # "Clocks Throttle Reasons"


def _live_like(answers: dict) -> nvml.GpuInfo:
    """The A100 capture's recording with some NVML answers replaced: read through nvml.py as a
    live host whose driver answers so."""
    recording = parse_capture(v.A100_XML.read_text(encoding="utf-8"), "synthetic")
    recording["devices"][0].update(answers)
    for key in [k for k, value in answers.items() if value is None]:
        del recording["devices"][0][key]
    return nvml.read_host(ReplayNvml(recording)).gpus[0]


@pytest.mark.parametrize("error", ["NVMLError_NoPermission", "NVMLError_NotSupported"])
def test_live_process_list_nvml_cannot_read_skips(error):
    gpu = _live_like(
        {
            "nvmlDeviceGetComputeRunningProcesses": {"$error": error},
            "nvmlDeviceGetGraphicsRunningProcesses": {"$error": error},
        }
    )
    assert gpu.compute_processes is None
    assert [x.verdict for x in processes(gpu)] == [SKIP, SKIP]


def test_live_applications_clocks_without_defaults_skip():
    gpu = _live_like(
        {
            "nvmlDeviceGetDefaultApplicationsClock(0)": None,
            "nvmlDeviceGetDefaultApplicationsClock(2)": None,
        }
    )
    assert (
        gpu.applications_clocks_mhz == (1095, 1215) and gpu.default_applications_clocks_mhz is None
    )
    verdict = clocks_verdict(
        gpu.index,
        gpu.applications_clocks_mhz,
        gpu.default_applications_clocks_mhz,
        gpu.throttle_reasons,
    )
    assert verdict.verdict == SKIP and "defaults not reported" in verdict.reason
    set_clocks = clocks_verdict(0, (1095, 1215), None, ["applications_clocks_setting"])
    assert set_clocks.verdict == FAIL  # a clock held by a setting still fails without the defaults


# --- clock event reasons --------------------------------------------------------------------------


def test_power_brake_at_idle_fails_every_gpu_naming_psu_and_bmc():
    gpus = host(v.power_brake_at_idle()).gpus
    assert len(gpus) == 8
    for gpu in gpus:
        verdict = clock_events_verdict(gpu.index, gpu.throttle_reasons)
        assert (
            verdict.verdict == FAIL and "power brake" in verdict.reason and "BMC" in verdict.reason
        )
        assert "hw_slowdown:" not in verdict.reason  # named through its sub-reason


def test_thermal_slowdown_names_cooling():
    verdict = clock_events_verdict(0, host(v.thermal_at_idle()).gpus[0].throttle_reasons)
    assert (
        verdict.verdict == FAIL
        and "hardware slowdown temperature" in verdict.reason
        and "airflow" in verdict.reason
    )


def test_power_cap_and_idle_pass():
    gpu = host(v.power_cap_at_idle()).gpus[0]
    assert "sw_power_cap" in gpu.throttle_reasons
    assert clock_events_verdict(0, gpu.throttle_reasons).verdict == PASS


def test_text_power_brake_is_read():
    verdict = clock_events_verdict(0, host(v.text_power_brake()).gpus[0].throttle_reasons)
    assert verdict.verdict == FAIL and "power brake" in verdict.reason


def test_clock_reasons_a_capture_lacks_skip():
    gpu = host(v.without(v.A100_XML, "clocks_event_reasons")).gpus[0]
    assert gpu.throttle_reasons is None and clock_events_verdict(0, None).verdict == SKIP


# --- the NVSwitch fabric --------------------------------------------------------------------------


@pytest.mark.parametrize("path", [v.H100_XML, v.B200_XML], ids=["hgx-h100", "hgx-b200"])
def test_fabric_not_completed_fails_naming_the_fabric_manager(path):
    for gpu in host(v.fabric(path, "In Progress", "N/A")).gpus:
        verdict = fabric_verdict(gpu.index, gpu.fabric_state, gpu.fabric_status)
        assert (
            verdict.verdict == FAIL
            and "nvidia-fabricmanager" in verdict.reason
            and "system not yet initialized" in verdict.reason
        )


def test_fabric_completed_with_an_error_status_fails():
    gpu = host(v.fabric(v.H100_XML, "Completed", "Insufficient Resources")).gpus[0]
    verdict = fabric_verdict(gpu.index, gpu.fabric_state, gpu.fabric_status)
    assert verdict.verdict == FAIL and "Insufficient Resources" in verdict.reason


def test_fabric_text_capture_and_no_fabric():
    gpu = host(v.text_fabric("Not Started")).gpus[0]
    assert (gpu.fabric_state, fabric_verdict(0, gpu.fabric_state, gpu.fabric_status).verdict) == (
        "Not Started",
        FAIL,
    )
    a100 = host(v.A100_XML.read_text(encoding="utf-8")).gpus[0]  # <state>N/A</state>: no fabric
    assert a100.fabric_state is None and fabric_verdict(0, None, None).verdict == SKIP


def test_fabric_state_survives_gpuenvs_own_recording():
    recorder = RecordingNvml(
        ReplayNvml(parse_capture(v.fabric(v.B200_XML, "In Progress", "N/A"), "synthetic"))
    )
    nvml.read_host(recorder)
    again = nvml.read_host(ReplayNvml(recorder.recording())).gpus
    assert {(g.fabric_state, g.fabric_status) for g in again} == {("In Progress", None)}


# --- identity
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.name)
def test_every_gpu_in_the_records_has_a_known_identity(path):
    for gpu in host(path.read_text(encoding="utf-8")).gpus:
        text = identity_text(gpu.name, gpu.compute_capability)
        assert gpu.compute_capability and "unknown" not in text and "None" not in text, (
            gpu.name,
            text,
        )


@pytest.mark.parametrize(
    "name, expected",
    [
        ("A100-SXM4-40GB", "Ampere, cc 8.0"),  # driver 460 spells it without "NVIDIA "
        ("NVIDIA GB300", "Blackwell Ultra, cc 10.3"),
        ("Tesla K80", "Kepler, cc 3.7: legacy, last driver branch R470, last CUDA 11.8"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "Blackwell, cc 12.0"),
    ],
)
def test_renamed_gpus_are_identified(name, expected):
    gpu = host(v.renamed(v.A100_XML, name)).gpus[0]
    assert identity_text(gpu.name, gpu.compute_capability) == expected


def test_an_unknown_product_says_so_and_what_to_do():
    gpu = host(v.renamed(v.A100_XML, "NVIDIA Imaginary 9000")).gpus[0]
    text = identity_text(gpu.name, gpu.compute_capability)
    assert (
        gpu.compute_capability is None
        and text.startswith("unknown product")
        and "gpu_archs.yaml" in text
    )


def test_the_arch_table_loads_every_entry_with_a_source():
    table = load_archs()
    assert len(table.exact) + len(table.products) > 150
    assert all(known.source for _, known in table.products)


# --- end to end: a fault read by the suite -------------------------------------------------------


def test_replayed_power_brake_host_is_not_ready(tmp_path):
    capture = tmp_path / "h100-power-brake.xml"
    capture.write_text(v.power_brake_at_idle(), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for name in ("GPUENV_STACK_FILE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "validate", "--replay", str(capture)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "power brake" in done.stdout and "BMC" in done.stdout


def test_clock_events_survive_gpuenvs_own_recording():
    recorder = RecordingNvml(ReplayNvml(parse_capture(v.power_brake_at_idle(), "synthetic")))
    nvml.read_host(recorder)
    again = nvml.read_host(ReplayNvml(recorder.recording())).gpus
    assert len(again) == 8
    assert all(clock_events_verdict(g.index, g.throttle_reasons).verdict == FAIL for g in again)


def test_a_recorded_process_list_error_stays_not_reported():
    """A live host whose NVML answered NoPermission for the process list records that error, and
    its replay skips the row as the live run did (never an empty list)."""
    recording = parse_capture(v.A100_XML.read_text(encoding="utf-8"), "synthetic")
    recording["devices"][0]["nvmlDeviceGetComputeRunningProcesses"] = {
        "$error": "NVMLError_NoPermission"
    }
    recorder = RecordingNvml(ReplayNvml(recording))
    live = nvml.read_host(recorder).gpus[0]
    replayed = nvml.read_host(ReplayNvml(recorder.recording())).gpus[0]
    assert live.compute_processes is None and replayed.compute_processes is None
    assert recorder.recording()["devices"][0]["nvmlDeviceGetComputeRunningProcesses"] == {
        "$error": "NVMLError_NoPermission"
    }
