"""Check 6, sustained load: every GPU busy at once for 30 s (10 s with --quick), each driven and
timed on its own (a slow GPU slows only its own figure), sampled through NVML twice a second.
Judged per GPU: its sustained matmul TFLOPS against 75% of the model's measured reference (the
same n = 8192 as the speed check; DCGM's targeted stress uses its short-test figure too) and
against the median of the same-model GPUs loaded with it; clock-event reasons under load
(thermal, hardware and power-brake slowdowns fail; a GPU at its power cap does not); and the PCIe
generation and width reached under load against what GPU and slot allow (an idle link drops to
Gen1 and may narrow, so only load tells); and the PCIe replay counter read at the first and last
sample, whose growth per minute DCGM's PCIe health watch judges."""

from __future__ import annotations

import pytest

from validate.host import nvml
from validate.host.devices import device_for_gpu, torch_gpus
from validate.judge import health_watches as watches
from validate.judge.pcie import pcie_gen_verdict, pcie_width_verdict
from validate.judge.speed import clock_summary, peer_verdict, sustained_clocks_verdict
from validate.judge.verdict import INFO, Verdict
from validate.measure import bench

SECONDS = {True: 10.0, False: 30.0}  # --quick, full


def _precision(capability: str | None) -> str:
    """The fastest matmul precision the GPU has (bf16 from Ampere, fp16 from Volta, else fp32)."""
    return bench.precisions_for(capability)[-1]


def test_sustained_load(torch, suite, record):
    """All GPUs under matmul load at once; per GPU: its own TFLOPS, clocks, power, PCIe generation
    and clock-event reasons sampled through NVML during the load."""
    suite.require_gpus()
    if torch.version.cuda is None or not torch.cuda.is_available():
        pytest.skip("PyTorch cannot use CUDA here: the visibility checks say why")
    # MIG GPUs take part only through the instance this run validates; the others keep the check.
    gpus_here = [
        g for g in suite.host.gpus if not g.mig_enabled or suite.selected_mig_device(g) is not None
    ]
    if not gpus_here:
        pytest.skip(
            "every GPU is in MIG mode: each instance is validated in its own run (see the MIG "
            "check)"
        )
    visible = torch_gpus(torch, suite.nvml_uuids)
    devices: dict[str, str] = {}
    gpus: dict[str, nvml.GpuInfo] = {}
    for gpu in gpus_here:
        index = device_for_gpu(gpu, visible)
        if index is not None:
            devices[f"cuda:{index}"] = _precision(gpu.compute_capability)
            gpus[f"cuda:{index}"] = gpu
    if not devices:
        pytest.skip("CUDA_VISIBLE_DEVICES hides every GPU NVML lists from this process")
    seconds = SECONDS[suite.quick]
    suite.say_now(f"validate: sustained load on {len(devices)} GPU(s) for {seconds:.0f} s")
    sampler = nvml.Sampler([g.uuid for g in gpus.values()], suite.nvml)
    samples: list[nvml.Sample] = []
    try:
        tflops = bench.sustained_load(
            torch, devices, seconds, lambda: samples.extend(sampler.sample())
        )
    finally:
        sampler.close()
    for device, gpu in gpus.items():
        precision = devices[device]
        mine = [s.to_dict() for s in samples if s.uuid == gpu.uuid]
        check = "sustained load"  # the name baselines and the fleet report know
        measured, verdict = suite.judge(gpu, check, f"{precision}_tflops", tflops[device], "TFLOPS")
        record.add(
            check,
            f"{measured} {precision} for {seconds:.0f} s; {clock_summary(mine)}",
            verdict,
            gpu=gpu.uuid,
            value=tflops[device],
        )
        if sampler.error:
            record.add(
                "nvml sampling under load",
                "-",
                Verdict(INFO, "", sampler.error),
                gpu=gpu.uuid,
                seconds=0,
            )
        if not gpu.mig_enabled:
            peers = [
                tflops[d]
                for d, g in gpus.items()
                if g.name == gpu.name and devices[d] == precision and not g.mig_enabled
            ]
            peer = peer_verdict(tflops[device], peers)
            record.add(
                "sustained vs same-model GPUs",
                f"{tflops[device]:.1f} TFLOPS",
                peer,
                gpu=gpu.uuid,
                seconds=0,
            )
        record.add(
            "clock events under load",
            _reasons(mine),
            sustained_clocks_verdict(mine),
            gpu=gpu.uuid,
            seconds=0,
        )
        gens = [s["pcie_link_gen"] for s in mine if s.get("pcie_link_gen") is not None]
        check = "pcie generation under load"
        record.add(
            check,
            f"gen{max(gens)}" if gens else "unknown",
            pcie_gen_verdict(
                max(gens) if gens else None,
                gpu.pcie_link_gen_gpu_max,
                gpu.pcie_link_gen_max,
                suite.baseline_for(gpu.name, check),
            ),
            gpu=gpu.uuid,
            value=float(max(gens)) if gens else None,
            seconds=0,
        )
        widths = [s["pcie_link_width"] for s in mine if s.get("pcie_link_width") is not None]
        record.add(
            "pcie link width under load",
            f"x{max(widths)}" if widths else "unknown",
            pcie_width_verdict(
                max(widths) if widths else None, gpu.pcie_link_width_max, under_load=True
            ),
            gpu=gpu.uuid,
            seconds=0,
        )
        _replay_rate(
            gpu, mine, max(gens) if gens else None, max(widths) if widths else None, record
        )
        measured, verdict = watches.temperature_under_load(gpu.index, gpu.health, mine)
        record.add("temperature under load", measured, verdict, gpu=gpu.uuid, seconds=0)
    record.finish()


def _replay_rate(
    gpu: nvml.GpuInfo, samples: list[dict], gen: int | None, width: int | None, record
) -> None:
    """PCIe replays per minute between the first and the last sample of the load."""
    read = [(s["seconds"], s["pcie_replays"]) for s in samples if s.get("pcie_replays") is not None]
    first, last = (read[0][1], read[-1][1]) if len(read) > 1 else (None, None)
    minutes = (read[-1][0] - read[0][0]) / 60 if len(read) > 1 else 0.0
    measured = (
        "not read twice"
        if first is None
        else f"{abs(last - first)} replays in {minutes * 60:.0f} s"
    )
    verdict = watches.pcie_replay_rate_verdict(
        gpu.index, first, last, minutes, gen, width, watches.load_limits()
    )
    record.add("pcie replay rate under load", measured, verdict, gpu=gpu.uuid, seconds=0)


def _reasons(samples: list[dict]) -> str:
    seen = sorted({r for s in samples for r in (s.get("reasons") or [])})
    return ",".join(seen) or "none"
