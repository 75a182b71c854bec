"""Matching framework devices to NVML (issue 11 items 5 and 6): MIG instances keep their MIG-
UUIDs, a MIG GPU is validated per instance, and the suite runs in PCI bus order."""

from __future__ import annotations

from validate.host.devices import all_nvml_uuids, device_for_gpu, nvml_uuid, uuid_body
from validate.host.nvml import GpuInfo, MigDevice
from validate.judge.verdict import FAIL, PASS
from validate.judge.visibility import mig_verdict

GPU0 = "GPU-4b2c1e0a-93d1-7f3c-5a8e-1c2d3e4f5a60"
MIG0 = "MIG-1a2b3c4d-0000-5e6f-7a8b-9c0d1e2f3a4b"
MIG1 = "MIG-5e6f7a8b-1111-2c3d-4e5f-6a7b8c9d0e1f"


def _mig_gpu() -> GpuInfo:
    return GpuInfo(
        0,
        "NVIDIA A100-SXM4-80GB",
        GPU0,
        "00000000:18:00.0",
        "8.0",
        None,
        None,
        mig_enabled=True,
        mig_devices=[MigDevice(0, MIG0, 10 * 2**30), MigDevice(2, MIG1, 20 * 2**30)],
    )


def test_torch_uuid_of_a_mig_instance_is_not_rewritten_as_a_gpu():
    # torch.cuda.get_device_properties(i).uuid prints the bare body for MIG instances too.
    body = MIG1.removeprefix("MIG-")
    uuids = all_nvml_uuids([_mig_gpu()])
    assert uuids == [GPU0, MIG0, MIG1]
    assert nvml_uuid(body, uuids) == MIG1
    assert nvml_uuid(GPU0.removeprefix("GPU-"), uuids) == GPU0
    assert (
        nvml_uuid("0badc0de-0000-0000-0000-000000000000", uuids)
        == "GPU-0badc0de-0000-0000-0000-000000000000"
    )
    assert uuid_body("MIG-ABC") == uuid_body("abc")


def test_the_gpu_maps_to_the_selected_instance():
    gpu = _mig_gpu()
    assert device_for_gpu(gpu, [MIG1]) == 0
    assert device_for_gpu(gpu, ["GPU-other", GPU0]) == 1
    assert device_for_gpu(gpu, ["GPU-other"]) is None


def test_a_healthy_mig_gpu_passes_and_names_how_to_run_an_instance():
    """MIG is a normal way to run: a GPU with instances passes; only one with none fails."""
    verdict = mig_verdict(0, [MIG0, MIG1], None)
    assert verdict.verdict == PASS and "2 instance(s)" in verdict.reason
    assert f"CUDA_VISIBLE_DEVICES={MIG0} python -m validate" in verdict.reason
    assert mig_verdict(0, [MIG0, MIG1], MIG1).verdict == PASS
    empty = mig_verdict(3, [], None)
    assert empty.verdict == FAIL and "no instance" in empty.reason and "GPU 3" in empty.reason
