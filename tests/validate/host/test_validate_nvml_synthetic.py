"""validate/host/nvml.py on SYNTHETIC hosts (hand-typed, invented UUIDs: not recordings): MIG
handles, a lost GPU, library mismatches, power limits, PCIe generations and the sustained-load
sampler, through nvidia-ml-py's real names and exception classes (see nvml_synthetic.py)."""

from __future__ import annotations

import copy

import pytest
from nvml_synthetic import GIB, H100, TWO_H100_HOST, SyntheticNvml

from validate.host import nvml
from validate.judge.health import power_limit_verdict
from validate.judge.pcie import pcie_gen_verdict
from validate.judge.speed import sustained_clocks_verdict
from validate.judge.verdict import FAIL, INFO, PASS, SKIP


def synthetic(host=TWO_H100_HOST) -> SyntheticNvml:
    return SyntheticNvml(copy.deepcopy(host))


def test_healthy_host_reads_every_field():
    host = nvml.read_host(synthetic())
    assert host.error is None and host.unreadable == []
    assert host.driver_version == "550.54.15" and host.cuda_driver_version == "12.4"
    gpu = host.gpus[1]
    assert gpu.uuid.startswith("GPU-9f8e") and gpu.pci_bus_id == "00000000:2A:00.0"
    assert gpu.compute_capability == "9.0" and gpu.memory_total_bytes == 80 * GIB
    assert (gpu.pcie_link_gen, gpu.pcie_link_gen_max, gpu.pcie_link_gen_gpu_max) == (5, 5, 5)
    assert (gpu.power_limit_watts, gpu.power_default_limit_watts) == (700.0, 700.0)
    assert (
        gpu.compute_mode == "Default" and gpu.mig_enabled is False and gpu.nvlink_active_links == 18
    )
    assert gpu.throttle_reasons == ["gpu_idle"]


def test_mig_in_a_container_keeps_the_gpu_and_lists_instances():
    """In a container the MIG parent's memory answers NoPermission: the GPU must stay, memory
    unknown, and its instances come from NVML's MIG handles with their MIG- UUIDs."""
    mig_gpu = {
        **H100,
        "fail": {"nvmlDeviceGetMemoryInfo": "NVMLError_NoPermission"},
        "mig": [
            {"uuid": "MIG-1a2b3c4d-0000-5e6f-7a8b-9c0d1e2f3a4b", "memory": (10 * GIB, 0)},
            None,  # an empty slot: NVML_ERROR_NOT_FOUND
            {"uuid": "MIG-5e6f7a8b-1111-2c3d-4e5f-6a7b8c9d0e1f", "memory": (20 * GIB, 0)},
        ],
    }
    host = nvml.read_host(synthetic({**TWO_H100_HOST, "gpus": [mig_gpu]}))
    assert host.error is None and len(host.gpus) == 1
    gpu = host.gpus[0]
    assert gpu.memory_total_bytes is None and gpu.memory_used_bytes is None
    assert gpu.mig_enabled is True
    assert [(m.index, m.uuid[:8], m.memory_total_bytes) for m in gpu.mig_devices] == [
        (0, "MIG-1a2b", 10 * GIB),
        (2, "MIG-5e6f", 20 * GIB),
    ]
    assert host.mig_gpus == [gpu]


def test_one_lost_gpu_does_not_hide_the_others():
    lost = {**H100, "uuid": "GPU-lost", "fail": {"nvmlDeviceGetName": "NVMLError_GpuIsLost"}}
    host = nvml.read_host(
        synthetic({**TWO_H100_HOST, "gpus": [H100, lost, TWO_H100_HOST["gpus"][1]]})
    )
    assert [g.index for g in host.gpus] == [0, 2]
    assert len(host.unreadable) == 1 and host.unreadable[0].index == 1
    assert "GPU 1" in host.unreadable[0].error and "NVMLError_GpuIsLost" in host.unreadable[0].error
    assert host.to_dict()["unreadable"][0]["index"] == 1


@pytest.mark.parametrize(
    ("init_error", "expected"),
    [
        (
            "NVMLLibraryMismatchError",
            "NVML: initialisation failed: NVMLLibraryMismatchError",
        ),  # not an NVMLError
        (
            "NVMLError_LibRmVersionMismatch",
            "NVML: initialisation failed: NVMLError_LibRmVersionMismatch",
        ),
        ("NVMLError_DriverNotLoaded", "NVML: the NVIDIA kernel driver is not loaded"),
    ],
)
def test_every_init_error_becomes_a_reason(init_error, expected):
    host = nvml.read_host(synthetic({**TWO_H100_HOST, "init_error": init_error}))
    assert host.gpus == [] and host.error is not None and host.error.startswith(expected)


def test_counting_failure_is_a_reason_not_a_crash():
    host = nvml.read_host(synthetic({**TWO_H100_HOST, "count_error": "NVMLLibraryMismatchError"}))
    assert host.error is not None and host.error.startswith(
        "NVML: counting the GPUs failed: NVMLLibraryMismatchError"
    )
    assert host.driver_version == "550.54.15"


def test_old_bindings_use_the_throttle_reasons_name():
    class OldBindings(SyntheticNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # nvidia-ml-py before 12.535

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
            return 0x4 | 0x40

    gpu = nvml.read_host(OldBindings(copy.deepcopy(TWO_H100_HOST))).gpus[0]
    assert gpu.throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"]


def test_power_limit_against_its_default():
    capped = nvml.read_host(
        synthetic({**TWO_H100_HOST, "gpus": [{**H100, "power_mw": (350000, 700000)}]})
    ).gpus[0]
    verdict = power_limit_verdict(capped.power_limit_watts, capped.power_default_limit_watts)
    assert (
        verdict.verdict == FAIL
        and "350 W is below the default 700 W" in verdict.reason
        and "nvidia-smi -pl 700" in verdict.reason
    )
    assert power_limit_verdict(700.0, 700.0).verdict == PASS
    assert power_limit_verdict(None, 700.0).verdict == SKIP


def test_gen5_card_in_a_gen4_slot_is_as_built_and_below_the_slot_fails():
    """NVML's max generation is min(GPU, slot): 4 for a Gen5 H100 in a Gen4 slot. At gen4 the
    link is what the platform allows (information naming the host, not a GPU fault); at gen3 in
    the same slot it fails."""
    gpu = nvml.read_host(
        synthetic({**TWO_H100_HOST, "gpus": [{**H100, "pcie": (4, 4, 5, 16, 16)}]})
    ).gpus[0]
    verdict = pcie_gen_verdict(gpu.pcie_link_gen, gpu.pcie_link_gen_gpu_max, gpu.pcie_link_gen_max)
    assert (
        verdict.verdict == INFO and "as built: the host allows gen4, the GPU gen5" in verdict.reason
    )
    slow = pcie_gen_verdict(3, gpu.pcie_link_gen_gpu_max, gpu.pcie_link_gen_max)
    assert slow.verdict == FAIL and "gen3 under load, GPU and slot allow gen4" in slow.reason
    assert pcie_gen_verdict(5, 5, 5).verdict == PASS
    assert pcie_gen_verdict(None, 5).verdict == SKIP
    # below what the same model reached on the baseline server
    assert pcie_gen_verdict(4, 5, 4, baseline=5).verdict == FAIL


def test_sampler_reads_a_throttling_gpu_under_load():
    """Ten samples of a GPU that overheats halfway: clocks fall and hw_thermal_slowdown shows."""
    hot = {
        **H100,
        "clocks": ([1980] * 5 + [1410] * 5, 1980),
        "reasons": [0x4] * 5 + [0x4 | 0x40] * 5,
        "power_usage_mw": [695000] * 10,
        "pcie": ([5] * 10, 5, 5, 16, 16),
    }
    sampler = nvml.Sampler([hot["uuid"]], synthetic({**TWO_H100_HOST, "gpus": [hot]}))
    samples = [s.to_dict() for _ in range(10) for s in sampler.sample()]
    sampler.close()
    assert len(samples) == 10 and samples[0]["max_sm_clock_mhz"] == 1980
    assert [s["sm_clock_mhz"] for s in samples][4:6] == [1980, 1410]
    verdict = sustained_clocks_verdict(samples)
    assert verdict.verdict == FAIL and "hw_thermal_slowdown in 5/10 samples" in verdict.reason
    # The same GPU at its power cap only (sw_power_cap) is healthy.
    assert (
        sustained_clocks_verdict([{**s, "reasons": ["sw_power_cap"]} for s in samples]).verdict
        == PASS
    )


def test_sampler_without_nvml_says_why():
    sampler = nvml.Sampler(
        ["GPU-x"], synthetic({**TWO_H100_HOST, "init_error": "NVMLError_LibraryNotFound"})
    )
    assert sampler.sample() == [] and "libnvidia-ml.so.1 not found" in (sampler.error or "")
