"""The PCIe rules: pinned host-to-device copies against the link, and the link's width and
generation under load against what the GPU and slot allow."""

from __future__ import annotations

from validate.judge.verdict import FAIL, INFO, NOT_JUDGED, PASS, SKIP, Verdict, at_least

#: Usable bytes/s per PCIe lane after line encoding, by generation (GB/s).
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

#: Pinned host-to-device copies reach 0.8-0.9 of the link; below half the link is degraded.
MIN_FRACTION_OF_PCIE = 0.5


def pcie_link_theoretical_gbs(generation: int | None, width: int | None) -> float | None:
    """Usable one-direction bandwidth of a PCIe link (GB/s), or None when unknown."""
    if not generation or not width or generation not in PCIE_LANE_GBS:
        return None
    return PCIE_LANE_GBS[generation] * width


def host_to_device_verdict(
    measured_gbs: float, generation: int | None, width: int | None
) -> Verdict:
    """Pinned host-to-device copies against the link NVML says the GPU can run at."""
    link = pcie_link_theoretical_gbs(generation, width)
    if link is None:
        return Verdict(NOT_JUDGED, "PCIe link generation/width unknown")
    return at_least(
        measured_gbs,
        MIN_FRACTION_OF_PCIE * link,
        f">= {MIN_FRACTION_OF_PCIE:.2f} x PCIe gen{generation} x{width} ({link:.1f} GB/s)",
        "pinned host-to-device GB/s",
    )


def pcie_width_verdict(
    current: int | None, maximum: int | None, under_load: bool = False
) -> Verdict:
    """The link width against what the GPU and slot allow together (NVML's maximum is already the
    lower of the two, so an as-built x8 slot reads x8 of x8). Judged only under load: an idle link
    may train down to save power, so a narrow idle reading is information, not a fault."""
    if current is None or maximum is None:
        return Verdict(SKIP, "link width not reported", "NVML does not report the PCIe link width")
    threshold = f"x{maximum} under load"
    if not under_load:
        note = (
            ""
            if current >= maximum
            else f"x{current} of x{maximum} at idle: links narrow at idle, the width is judged "
            "under load"
        )
        return Verdict(INFO, threshold, note)
    if current >= maximum:
        return Verdict(
            PASS,
            threshold,
            "" if maximum >= 16 else f"as built: the slot gives x{maximum} (not a GPU fault)",
        )
    return Verdict(
        FAIL,
        threshold,
        f"PCIe link runs at x{current} under load, the GPU and slot allow x{maximum}: reseat the "
        "GPU or check the riser/slot",
    )


def pcie_gen_verdict(
    under_load: int | None,
    gpu_max: int | None,
    slot_max: int | None = None,
    baseline: int | None = None,
) -> Verdict:
    """The PCIe generation reached under load against the platform: the lower of the GPU's own
    maximum and what GPU and slot allow together (NVML's maximum). Judged under load because an
    idle link drops to Gen1. A slot slower than the GPU (a Gen4 card in a Gen3 host, GB200's gen5
    of device max 6) is how the server is built: information, not a GPU fault. Below the
    platform's maximum, or below what the same model reached before (`baseline`), fails."""
    expected = min(x for x in (gpu_max, slot_max) if x) if (gpu_max or slot_max) else None
    if under_load is None or expected is None:
        return Verdict(
            SKIP,
            "the platform's PCIe generation",
            "NVML does not report the PCIe generation under load",
        )
    threshold = f"gen{expected} (lower of GPU gen{gpu_max or '?'} and slot gen{slot_max or '?'})"
    if under_load < expected:
        return Verdict(
            FAIL,
            threshold,
            f"PCIe link runs at gen{under_load} under load, GPU and slot allow gen{expected}: "
            "reseat the GPU, check the riser and the BIOS PCIe setting",
        )
    if baseline is not None and under_load < baseline:
        return Verdict(
            FAIL,
            f"{threshold}, baseline gen{baseline:.0f}",
            f"PCIe link runs at gen{under_load}, below the gen{baseline:.0f} this model reached "
            "on the baseline server",
        )
    if gpu_max and slot_max and slot_max < gpu_max:
        return Verdict(
            INFO,
            threshold,
            f"as built: the host allows gen{slot_max}, the GPU gen{gpu_max}; not a GPU fault",
        )
    return Verdict(PASS, threshold)
