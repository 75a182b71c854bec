"""Check 6, sustained load: every GPU busy at once for 30 s (10 s with --quick), sampled through
NVML twice a second. Judged per GPU: clock-event reasons under load (thermal, hardware and
power-brake slowdowns fail; a GPU at its power cap does not), and the PCIe generation reached
under load against the GPU's own maximum (an idle link drops to Gen1, so only load tells)."""

from __future__ import annotations

import pytest

from validate import bench, nvml
from validate.devices import device_for_gpu, torch_gpus
from validate.thresholds import INFO, Verdict, clock_summary, pcie_gen_verdict, sustained_clocks_verdict

SECONDS = {True: 10.0, False: 30.0}  # --quick, full


def _precision(capability: str | None) -> str:
    major = int((capability or "0.0").split(".")[0])
    return "bf16" if major >= 8 else "fp16" if major >= 7 else "fp32"


def test_sustained_load(torch, suite, record):
    """All GPUs under matmul load at once; clocks, power, PCIe generation and clock-event reasons
    sampled through NVML during the load."""
    suite.require_gpus()
    if torch.version.cuda is None or not torch.cuda.is_available():
        pytest.skip("PyTorch cannot use CUDA here: the visibility checks say why")
    if suite.host.mig_gpus and not suite.selected_mig:
        pytest.skip("a GPU is in MIG mode: each instance is validated in its own run (see the MIG check)")
    visible = torch_gpus(torch, suite.nvml_uuids)
    devices: dict[str, str] = {}
    gpus = {}
    for gpu in suite.host.gpus:
        index = device_for_gpu(gpu, visible)
        if index is not None:
            devices[f"cuda:{index}"] = _precision(gpu.compute_capability)
            gpus[f"cuda:{index}"] = gpu
    if not devices:
        pytest.skip("CUDA_VISIBLE_DEVICES hides every GPU NVML lists from this process")
    sampler = nvml.Sampler([g.uuid for g in gpus.values()])
    samples: list[nvml.Sample] = []
    try:
        tflops = bench.sustained_load(torch, devices, SECONDS[suite.quick], lambda: samples.extend(sampler.sample()))
    finally:
        sampler.close()
    seconds = SECONDS[suite.quick]
    for device, gpu in gpus.items():
        mine = [s.to_dict() for s in samples if s.uuid == gpu.uuid]
        record.add(
            "sustained load",
            f"{tflops[device]:.0f} {devices[device]} TFLOPS for {seconds:.0f} s; {clock_summary(mine)}",
            Verdict(INFO, "", sampler.error or ""),
            gpu=gpu.uuid,
            value=tflops[device],
        )
        record.add("clock events under load", _reasons(mine), sustained_clocks_verdict(mine), gpu=gpu.uuid, seconds=0)
        gens = [s["pcie_link_gen"] for s in mine if s.get("pcie_link_gen") is not None]
        record.add(
            "pcie generation under load",
            f"gen{max(gens)}" if gens else "unknown",
            pcie_gen_verdict(max(gens) if gens else None, gpu.pcie_link_gen_gpu_max, gpu.pcie_link_gen_max),
            gpu=gpu.uuid,
            seconds=0,
        )
    record.finish()


def _reasons(samples: list[dict]) -> str:
    seen = sorted({r for s in samples for r in (s.get("reasons") or [])})
    return ",".join(seen) or "none"
