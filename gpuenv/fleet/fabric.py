"""The multi-node job's fabric, judged (pure): the network NCCL really used on each node against
what the node has (InfiniBand/RoCE ports from sysfs), and floors for the job's busbw and every
rail's link from the line rate each node reports. validate/measure/multinode.py records the
facts (its `fabric` and `transport` per node); gpuenv/fleet/multinode.py turns these verdicts into
the job's report lines."""

from __future__ import annotations

from typing import Any

from validate.judge.verdict import FAIL, NOT_JUDGED, PASS, Verdict

#: The fabric's floor as a share of the line rate its nodes report: a bar for a broken fabric (a
#: TCP fallback, a link trained down, a dead rail), not a performance target. nccl-tests compares
#: busbw with the hardware's peak bandwidth (doc/PERFORMANCE.md); over RDMA it reaches most of
#: the sum of a node's NIC rates, so half of it is far below any healthy run.
RDMA_FLOOR_SHARE = 0.5
#: Over sockets NCCL reaches less of a NIC's rate (its own copies and threads): a quarter of the
#: fastest NIC still fails only a fabric running at a fraction of its links.
SOCKET_FLOOR_SHARE = 0.25
#: NCCL's names for its verbs (InfiniBand/RoCE) transport: its own NET/IB, and the IB plugin's.
RDMA_NETWORKS = ("IB", "IBext")
SOURCE_TRANSPORT = (
    "NCCL_DEBUG=INFO 'Using network ...' "
    "(NVIDIA/nccl#226, NVIDIA/nccl-tests#185, vllm-project/vllm#9329)"
)


def active_ports(fabric: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A node's InfiniBand/RoCE ports that are ACTIVE with a rate."""
    return [
        p
        for p in (fabric or {}).get("ib_ports") or []
        if p.get("state") == "ACTIVE" and p.get("gbps")
    ]


def line_rate(fabric: dict[str, Any] | None, rdma: bool) -> tuple[float, str] | None:
    """(GB/s, what) the node's network can carry in all: the sum of its active IB/RoCE ports when
    NCCL ran over them, else its fastest physical NIC that is up; None when it reports neither."""
    if rdma:
        ports = active_ports(fabric)
        if not ports:
            return None
        return sum(
            p["gbps"] for p in ports
        ) / 8, f"{len(ports)} x IB/RoCE port(s), {sum(p['gbps'] for p in ports):g} Gb/s"
    nics = [n for n in (fabric or {}).get("nics") or [] if n.get("mbps") and n.get("state") == "up"]
    if not nics:
        return None
    fastest = max(nics, key=lambda n: n["mbps"])
    return fastest["mbps"] / 8000, f"{fastest['name']} {fastest['mbps'] / 1000:g} Gb/s"


def rail_rate(fabric: dict[str, Any] | None, rdma: bool) -> tuple[float, str] | None:
    """(GB/s, what) one rail can carry: the slowest active IB/RoCE port (NCCL's point-to-point
    takes the NIC nearest the GPU), or the fastest NIC over sockets."""
    if rdma:
        ports = active_ports(fabric)
        if not ports:
            return None
        slowest = min(ports, key=lambda p: p["gbps"])
        return slowest[
            "gbps"
        ] / 8, f"{slowest['device']}:{slowest['port']} {slowest['gbps']:g} Gb/s"
    return line_rate(fabric, rdma)


def transport_verdict(result: dict[str, Any]) -> tuple[str, Verdict] | None:
    """The network NCCL really used on each node, against what the node has: a node with active
    InfiniBand/RoCE ports whose NCCL ran over sockets is not ready (no devices in the container, no
    verbs library in the image, a wrong NCCL_IB_HCA). None on gloo (no NCCL)."""
    if result.get("backend") != "nccl":
        return None
    fabric, transport = result.get("fabric") or {}, result.get("transport") or {}
    parts, failed, unknown = [], [], []
    for node in result["nodes"]:
        ports = active_ports(fabric.get(node))
        network = (transport.get(node) or {}).get("network")
        names = ", ".join(f"{p['device']}:{p['port']}" for p in ports)
        parts.append(f"{node} {network or 'not reported'}" + (f" (has {names})" if ports else ""))
        if network is None:
            unknown.append(
                f"{node}: NCCL's log did not name its network"
                " (NCCL_DEBUG other than INFO in fleet.env?)"
            )
        elif ports and network not in RDMA_NETWORKS:
            why = f"{node} has active InfiniBand/RoCE port(s) {names} but NCCL ran over {network}"
            if not (fabric.get(node) or {}).get("verbs"):
                why += (
                    " (no verbs library in the image: libibverbs.so.1 does not load;"
                    " install rdma-core or libibverbs1)"
                )
            else:
                why += (
                    " (the container needs --device=/dev/infiniband and IPC_LOCK;"
                    " check NCCL_IB_HCA)"
                )
            failed.append(why)
    threshold = f"IB/RoCE where the node has active ports ({SOURCE_TRANSPORT})"
    if failed:
        return "; ".join(parts), Verdict(FAIL, threshold, "; ".join(failed))
    if unknown:
        missing = [
            n
            for n in result["nodes"]
            if active_ports(fabric.get(n)) and not (fabric.get(n) or {}).get("verbs")
        ]
        reason = "; ".join(unknown) + (
            "; no verbs library (libibverbs.so.1) on " + ", ".join(missing) if missing else ""
        )
        return "; ".join(parts), Verdict(NOT_JUDGED, threshold, reason)
    return "; ".join(parts), Verdict(PASS, threshold)


def _rdma(result: dict[str, Any]) -> bool:
    transport = result.get("transport") or {}
    return bool(result["nodes"]) and all(
        (transport.get(n) or {}).get("network") in RDMA_NETWORKS for n in result["nodes"]
    )


def busbw_floor(result: dict[str, Any]) -> tuple[float, str] | str:
    """(floor GB/s, how) for the job's busbw from the line rate every node reports, or why none."""
    if result.get("backend") != "nccl":
        return "gloo on CPUs: the all-reduce is bound by the CPUs, not the NICs"
    rdma = _rdma(result)
    share = RDMA_FLOOR_SHARE if rdma else SOCKET_FLOOR_SHARE
    rates = {n: line_rate((result.get("fabric") or {}).get(n), rdma) for n in result["nodes"]}
    missing = [n for n, rate in rates.items() if rate is None]
    if missing:
        return f"no NIC line rate reported by {', '.join(missing)}"
    node = min(rates, key=lambda n: rates[n][0])  # type: ignore[index]
    rate, what = rates[node]  # type: ignore[misc]
    return (
        share * rate,
        f">= {share:.2f} x the slowest node's line rate ({node}: {what}, {rate:.1f} GB/s)",
    )


def link_floor_records(result: dict[str, Any]) -> tuple[str, Verdict, float | None] | None:
    """Every link (each rail) against the line rate of the NICs at its two ends, the slowest
    named."""
    links = result.get("links") or []
    if result.get("backend") != "nccl" or not links:
        return None
    rdma = _rdma(result)
    share = RDMA_FLOOR_SHARE if rdma else SOCKET_FLOOR_SHARE
    fabric = result.get("fabric") or {}
    below, judged, missing = [], 0, set()
    for link in links:
        ends = [rail_rate(fabric.get(link[k]), rdma) for k in ("source", "target")]
        if None in ends:
            missing.update(link[k] for k, end in zip(("source", "target"), ends) if end is None)
            continue
        judged += 1
        rate = min(end[0] for end in ends)  # type: ignore[index]
        if float(link["gbs"]) < share * rate:
            below.append(
                f"link {link_name(link, links)} {float(link['gbs']):.2f} GB/s"
                f" < {share:.2f} x {rate:.1f} GB/s"
            )
    weakest = min(links, key=lambda link: float(link["gbs"]))
    measured = (
        f"slowest link {link_name(weakest, links)}: {float(weakest['gbs']):.2f} GB/s;"
        f" {judged} of {len(links)} links judged"
    )
    per_rail = "IB/RoCE port" if rdma else "fastest NIC"
    threshold = f">= {share:.2f} x the line rate of one rail at both ends ({per_rail})"
    if below:
        return measured, Verdict(FAIL, threshold, "; ".join(below)), float(weakest["gbs"])
    if missing:
        return (
            measured,
            Verdict(
                NOT_JUDGED, threshold, f"no NIC line rate reported by {', '.join(sorted(missing))}"
            ),
            None,
        )
    return measured, Verdict(PASS, threshold), float(weakest["gbs"])


def link_name(link: dict[str, Any], links: list[dict[str, Any]]) -> str:
    """'gpu01 -> gpu02', with its rail (local rank) when the job measured more than one."""
    rails = {other.get("rail") for other in links}
    return f"{link['source']} -> {link['target']}" + (
        f" rail {link.get('rail')}" if len(rails) > 1 else ""
    )
