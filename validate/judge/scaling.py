"""Verdicts for multi-GPU training (validate/checks/test_07_multigpu.py): every rank joined, the
parameters are bit-identical across ranks, no rank drags the others, and the scaling efficiency
(speedup / N) against a cited reference for the interconnect (scaling.yaml). Pure functions."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from validate.host.devices import uuid_body
from validate.judge.speed import MIN_SHARE_OF_PEERS, REFERENCE_FRACTION, throughput_verdict
from validate.judge.verdict import FAIL, INFO, NOT_JUDGED, PASS, WARN, Verdict
from validate.simpleyaml import TableError, load_table

SCALING_FILE = Path(__file__).with_name("scaling.yaml")
#: Ranks that share one CPU (gloo in CI) vary with whatever else runs there: two suites on one
#: busy two-core machine put a healthy rank at 0.45 of the median. Only a rank below a quarter of
#: it is named slow there. GPUs each run alone, so the peers' rule (0.85 of the median) holds.
CPU_MIN_SHARE = 0.25
INTERCONNECTS = ("nvlink", "pcie", "infiniband", "ethernet")


@dataclass(frozen=True)
class ScalingReference:
    """One published scaling figure (see scaling.yaml for the fields)."""

    interconnect: str
    gpus: int
    efficiency: float
    workload: str
    like_suite: bool
    source: str
    note: str = ""

    def describe(self) -> str:
        return f"{self.workload}, {self.gpus} GPUs: {self.efficiency:.2f}; {self.source}"


def parse_scaling(data: Any) -> list[ScalingReference]:
    """Validate the 'scaling:' list; every row needs a figure in (0, 1] and an https:// source."""
    rows = data.get("scaling") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise TableError("the scaling table needs a top-level 'scaling:' list")
    out = []
    for position, row in enumerate(rows):
        where = f"scaling[{position}]"
        if not isinstance(row, dict) or row.get("interconnect") not in INTERCONNECTS:
            raise TableError(f"{where}: 'interconnect' must be one of {', '.join(INTERCONNECTS)}")
        efficiency, gpus = row.get("efficiency"), row.get("gpus")
        if (
            isinstance(efficiency, bool)
            or not isinstance(efficiency, (int, float))
            or not 0 < efficiency <= 1
        ):
            raise TableError(f"{where}: 'efficiency' must be a number in (0, 1]")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 2:
            raise TableError(f"{where}: 'gpus' must be a count of 2 or more")
        source = row.get("source")
        if not isinstance(source, str) or not source.startswith("https://"):
            raise TableError(
                f"{where}: 'source' must be an https:// URL a reader can open, got {source!r}"
            )
        if not isinstance(row.get("workload"), str) or not isinstance(row.get("like_suite"), bool):
            raise TableError(f"{where}: needs 'workload' (text) and 'like_suite' (true or false)")
        out.append(
            ScalingReference(
                row["interconnect"],
                gpus,
                float(efficiency),
                row["workload"],
                row["like_suite"],
                source,
                str(row.get("note") or ""),
            )
        )
    return out


def load_scaling(path: Path = SCALING_FILE) -> list[ScalingReference]:
    return parse_scaling(load_table(path))


def identical_verdict(checksums: list[str], labels: list[str]) -> Verdict:
    """Every rank's parameter checksum equals rank 0's; else name the ranks that differ."""
    threshold = "one sha256 of the parameters on every rank"
    differ = [label for label, checksum in zip(labels, checksums) if checksum != checksums[0]]
    if not differ:
        return Verdict(PASS, threshold)
    return Verdict(
        FAIL,
        threshold,
        f"parameters differ from {labels[0]}'s after the same steps on {', '.join(differ)}: "
        "gradients were not all-reduced alike",
    )


def slowest_rank_verdict(
    rates: list[float], labels: list[str], on_cpu: bool
) -> tuple[str, Verdict]:
    """(measured text, verdict) for the slowest rank's one-GPU samples/s against the ranks' median,
    naming its rank and GPU."""
    share = CPU_MIN_SHARE if on_cpu else MIN_SHARE_OF_PEERS
    median = statistics.median(rates)
    slowest = min(range(len(rates)), key=lambda i: rates[i])
    measured = (
        f"{labels[slowest]} {rates[slowest]:.0f} samples/s, {rates[slowest] / median:.2f} of the "
        f"median {median:.0f}"
    )
    threshold = f">= {share:.2f} x the ranks' median" + (
        " (ranks share this CPU)" if on_cpu else ""
    )
    if rates[slowest] >= share * median:
        return measured, Verdict(PASS, threshold)
    return measured, Verdict(
        FAIL,
        threshold,
        f"{labels[slowest]} trains at {rates[slowest] / median:.2f} of the other ranks' "
        "median: it drags every step of the job (its GPU's clocks, NUMA node or link)",
    )


def efficiency_verdict(
    efficiency: float,
    interconnect: str | None,
    world: int,
    references: list[ScalingReference],
    baseline: float | None = None,
    no_p2p: bool = False,
) -> Verdict:
    """Scaling efficiency (speedup / N), higher is better, by the speed floors' rules:
    --baseline first; a like-for-like reference for the interconnect fails below 0.75 of it;
    another workload's reference only warns; none (or the CPU, interconnect None) is not judged.
    A PCIe server without peer-to-peer is slower by design: below a reference it warns, naming
    it."""
    metric = f"ddp scaling efficiency ({world} ranks)"
    if baseline is not None:
        return throughput_verdict(metric, efficiency, baseline)
    rows = [r for r in references if r.interconnect == interconnect]
    if not rows:
        where = "ranks sharing a CPU" if interconnect is None else f"{interconnect} servers"
        return Verdict(NOT_JUDGED, f"no published scaling figure for {where}, no --baseline")
    # A figure on as many GPUs as this job ran first: efficiency falls as GPUs are added, so a
    # 2-GPU figure is no like-for-like bar for 8 (it only warns, saying so).
    same_count = [r for r in rows if r.gpus == world]
    rows = same_count or rows
    like = [r for r in rows if r.like_suite]
    reference = max(like or rows, key=lambda r: r.efficiency)
    minimum = REFERENCE_FRACTION * reference.efficiency
    kind = "measured reference" if reference.like_suite else "reference of another workload"
    threshold = (
        f">= {REFERENCE_FRACTION:.2f} x {kind} {reference.efficiency:.2f} ({reference.describe()})"
    )
    if efficiency >= minimum:
        return Verdict(PASS, threshold)
    reason = f"{metric} {efficiency:.2f} is below {minimum:.2f}"
    if no_p2p:
        return Verdict(
            WARN,
            threshold,
            f"{reason}: a PCIe server without peer-to-peer copies through host memory (named, "
            "not failed)",
        )
    if reference.gpus != world:
        return Verdict(
            WARN,
            threshold,
            f"{reason}, but the reference ran on {reference.gpus} GPUs and this job on {world}: "
            "confirm with --baseline or the fleet median",
        )
    if not reference.like_suite:
        return Verdict(
            WARN,
            threshold,
            f"{reason}, but the reference trained another model: confirm with --baseline or the "
            "fleet median",
        )
    return Verdict(FAIL, threshold, reason)


def dataparallel_verdict(
    dp_rate: float | None, ddp_rate: float, error: str | None = None
) -> tuple[str, Verdict]:
    """DataParallel's samples/s beside DDP's, with the gap: information only, never a fail."""
    threshold = "reported beside DDP, never judged"
    if error or not dp_rate:
        return "-", Verdict(WARN, threshold, f"DataParallel did not run: {error or 'no figure'}")
    return (
        f"{dp_rate:.0f} samples/s; DDP's {ddp_rate:.0f} is {ddp_rate / dp_rate:.2f}x it",
        Verdict(INFO, threshold),
    )


def rank_labels(uuids: list[str | None], gpus: list[Any]) -> list[str]:
    """'rank 1 (GPU 1 GPU-3f2a6b...)' per rank, matched to NVML by UUID; 'rank 1 (cpu)' on the
    CPU."""
    labels = []
    for rank, uuid in enumerate(uuids):
        gpu = next((g for g in gpus if uuid and uuid_body(g.uuid) == uuid_body(uuid)), None)
        where = (
            f"GPU {gpu.index} {gpu.uuid[:12]}"
            if gpu
            else (f"GPU {uuid_body(uuid)[:8]}" if uuid else "cpu")
        )
        labels.append(f"rank {rank} ({where})")
    return labels


def no_p2p_text(peer_access: dict[str, bool] | None, kind: str | None) -> str | None:
    """'PCIe without P2P between 0-1, 1-0' (the GPU pairs without peer access) on a PCIe host, else
    None."""
    if kind != "pcie" or not peer_access:
        return None
    off = sorted(pair for pair, ok in peer_access.items() if not ok)
    return f"PCIe without P2P between {', '.join(off)}" if off else None
