"""The multi-node job's fabric (review D1, D2, D13, D16): what NCCL really used, judged against
what each node has, and floors from the line rate each node reports.

Pure parts on recorded text: NCCL's INFO lines as posted in public issues
(tests/fleet/fixtures/multinode/nccl-*.log, each with its source), a sysfs tree made in a tmp
folder, and the recorded two-node result edited into an NCCL rack. For real: the worker itself
(validate.measure.multinode) under two torchrun agents on localhost, gloo on the CPU, 2 "nodes" x
2 ranks, named by --fleet-node."""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.fleet import fabric, multinode
from gpuenv.fleet.outcome import FAILED, READY
from validate.measure import multinode as worker

FIXTURES = Path(__file__).parent / "fixtures" / "multinode"


@pytest.fixture
def result() -> dict:
    return json.loads((FIXTURES / "result-gloo-2nodes.json").read_text())


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def test_the_network_nccl_used_is_read_from_its_info_lines():
    roce = worker.nccl_transport(lines("nccl-roce.log"))
    assert roce["network"] == "IB"
    assert roce["lines"] == [
        "NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>"
    ]
    sockets = worker.nccl_transport(lines("nccl-socket.log"))
    assert sockets["network"] == "Socket" and "NET/IB : No device found." in sockets["lines"]
    assert (
        "Failed to open libibverbs.so[.1]" in sockets["lines"]
    )  # a container without the verbs library
    assert worker.nccl_transport(["NCCL version 2.19.3+cuda12.3"]) == {"network": None, "lines": []}
    env = worker.nccl_log_env("/tmp/x")
    assert (
        env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"
        and env["NCCL_DEBUG_FILE"] == "/tmp/x/gpuenv-nccl.%p.log"
    )


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def test_a_nodes_fabric_is_read_from_sysfs(tmp_path):
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    write(port / "rate", "400 Gb/sec (4X NDR)")
    write(port / "state", "4: ACTIVE")
    write(port / "link_layer", "InfiniBand")
    down = tmp_path / "class" / "infiniband" / "mlx5_1" / "ports" / "1"
    write(down / "rate", "10 Gb/sec (4X SDR)")
    write(down / "state", "1: DOWN")
    write(tmp_path / "class" / "net" / "eth0" / "speed", "25000")
    write(tmp_path / "class" / "net" / "eth0" / "operstate", "up")
    (tmp_path / "class" / "net" / "eth0" / "device").mkdir()
    write(tmp_path / "class" / "net" / "eth1" / "speed", "-1")  # a link that is down
    (tmp_path / "class" / "net" / "eth1" / "device").mkdir()
    write(tmp_path / "class" / "net" / "veth12" / "speed", "10000")  # virtual: no device link
    write(tmp_path / "class" / "net" / "lo" / "operstate", "unknown")
    facts = worker.node_fabric(tmp_path)
    assert facts["ib_ports"] == [
        {
            "device": "mlx5_0",
            "port": "1",
            "gbps": 400.0,
            "state": "ACTIVE",
            "link_layer": "InfiniBand",
        },
        {"device": "mlx5_1", "port": "1", "gbps": 10.0, "state": "DOWN", "link_layer": None},
    ]
    assert facts["nics"] == [
        {"name": "eth0", "mbps": 25000, "state": "up"},
        {"name": "eth1", "mbps": None, "state": None},
    ]
    assert fabric.line_rate(facts, rdma=True) == (
        50.0,
        "1 x IB/RoCE port(s), 400 Gb/s",
    )  # the DOWN port does not count
    assert fabric.line_rate(facts, rdma=False) == (3.125, "eth0 25 Gb/s")
    assert worker.node_fabric(tmp_path / "absent") == {"ib_ports": [], "nics": []}


def rack(
    result: dict, network: str | None, busbw: float, link_gbs: list[float], verbs: bool = True
) -> dict:
    """The recorded result as 2 nodes x 2 GPUs with NCCL, each node with two 400 Gb/s InfiniBand
    ports; `network` is what NCCL said on each node, `link_gbs` the four links (two per rail)."""
    out = copy.deepcopy(result)
    out["backend"], out["world"] = "nccl", 4
    out["allreduce"] = {**out["allreduce"], "bytes": 256 * 2**20, "busbw_gbs": busbw}
    out["ranks"] = [
        {**r, "rank": 2 * i + local, "local_rank": local, "uuid": f"GPU-{r['node']}-{local}"}
        for i, r in enumerate(result["ranks"])
        for local in (0, 1)
    ]
    out["links"] = [
        {"source": s, "target": t, "rail": rail, "gbs": gbs}
        for (s, t, rail), gbs in zip(
            [
                ("node0", "node1", 0),
                ("node1", "node0", 0),
                ("node0", "node1", 1),
                ("node1", "node0", 1),
            ],
            link_gbs,
        )
    ]
    ports = [
        {
            "device": f"mlx5_{i}",
            "port": "1",
            "gbps": 400.0,
            "state": "ACTIVE",
            "link_layer": "InfiniBand",
        }
        for i in (0, 1)
    ]
    out["fabric"] = {
        n: {
            "ib_ports": ports,
            "nics": [{"name": "eth0", "mbps": 25000, "state": "up"}],
            "verbs": "libibverbs.so.1" if verbs else None,
        }
        for n in out["nodes"]
    }
    out["transport"] = {n: {"network": network, "lines": []} for n in out["nodes"]}
    return out


def row(outcome, name: str) -> dict:
    return next(r for r in outcome.report["host"]["checks"] if r["check"].startswith(name))


def test_an_infiniband_rack_that_ran_over_sockets_is_not_ready(result):
    """The review's reproduction (D1, D2): every link equally slow at 0.11 GB/s and busbw 0.11 GB/s
    read READY. Now the transport and both floors fail, each naming why."""
    job = rack(result, "Socket", 0.11, [0.11] * 4, verbs=False)
    outcome = multinode.multinode_outcome(["node0", "node1"], "7", None, job, {}, {}, {})
    assert outcome.status == FAILED
    transport = row(outcome, "multi-node fabric transport")
    assert (
        transport["verdict"] == "fail"
        and "node0 has active InfiniBand/RoCE port(s) mlx5_0:1, mlx5_1:1 but NCCL ran over Socket"
        in transport["reason"]
        and "libibverbs.so.1 does not load" in transport["reason"]
    )
    busbw = row(outcome, "multi-node all-reduce busbw")
    assert (
        busbw["verdict"] == "fail"
        and ">= 0.25 x the slowest node's line rate (node0: eth0 25 Gb/s, 3.1 GB/s)"
        in busbw["threshold"]
    )
    assert (
        row(outcome, "multi-node slowest link")["verdict"] == "pass"
    )  # equal links: only the floor sees them
    assert row(outcome, "multi-node links against their line rate")["verdict"] == "fail"


def test_busbw_and_every_rail_have_a_floor_from_the_line_rate(result):
    healthy = rack(result, "IB", 80.0, [45.0, 46.0, 44.0, 45.0])
    outcome = multinode.multinode_outcome(["node0", "node1"], "7", None, healthy, {}, {}, {})
    assert outcome.status == READY, outcome.reason
    assert row(outcome, "multi-node all-reduce busbw")["verdict"] == "pass"
    assert (
        ">= 0.50 x the slowest node's line rate (node0: 2 x IB/RoCE port(s), 800 Gb/s, 100.0 GB/s)"
        in row(outcome, "multi-node all-reduce busbw")["threshold"]
    )
    assert row(outcome, "multi-node fabric transport")["verdict"] == "pass"
    slow_bus = multinode.multinode_outcome(
        ["node0", "node1"], "7", None, rack(result, "IB", 20.0, [45.0] * 4), {}, {}, {}
    )
    assert (
        slow_bus.status == FAILED
        and "below 50.0 GB/s" in row(slow_bus, "multi-node all-reduce busbw")["reason"]
    )
    # one rail's HCA trained down: its two links are below half a 400 Gb/s port (25 GB/s), named by
    # rail
    rail = multinode.multinode_outcome(
        ["node0", "node1"],
        "7",
        None,
        rack(result, "IB", 80.0, [45.0, 45.0, 12.0, 12.5]),
        {},
        {},
        {},
    )
    floor = row(rail, "multi-node links against their line rate")
    assert (
        floor["verdict"] == "fail"
        and "link node0 -> node1 rail 1 12.00 GB/s < 0.50 x 50.0 GB/s" in floor["reason"]
    )


def test_without_a_line_rate_or_nccls_word_nothing_is_made_up(result):
    job = rack(result, None, 80.0, [45.0] * 4, verbs=False)
    for node in job["fabric"].values():
        node["nics"] = []
    outcome = multinode.multinode_outcome(["node0", "node1"], "7", None, job, {}, {}, {})
    transport = row(outcome, "multi-node fabric transport")
    assert (
        transport["verdict"] == "not judged"
        and "NCCL's log did not name its network" in transport["reason"]
    )
    assert "no verbs library (libibverbs.so.1) on node0, node1" in transport["reason"]
    busbw = row(outcome, "multi-node all-reduce busbw")
    assert busbw["verdict"] == "not judged" and busbw["reason"].startswith(
        "no NIC line rate reported by node0, node1"
    )
    # gloo (CPU nodes): no NCCL, so no transport row, and its busbw is the CPUs'
    gloo = multinode.multinode_outcome(["node0", "node1"], "7", None, result, {}, {}, {})
    assert not [r for r in gloo.report["host"]["checks"] if "fabric transport" in r["check"]]
    assert row(gloo, "multi-node all-reduce busbw")["reason"].startswith("gloo on CPUs")


def test_links_cover_every_rail_and_ranks_count_whole_gpus():
    everyone = [{"rank": r, "node": f"n{r // 2}", "local_rank": r % 2} for r in range(4)]
    assert worker.link_pairs(everyone) == [(0, 2, 0), (2, 0, 0), (1, 3, 1), (3, 1, 1)]
    assert worker.link_pairs(everyone[:2]) == []  # one node: no link
    assert (
        worker.whole_gpu_count(
            ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA A100-SXM4-40GB"]
        )
        == 2
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.frameworks
def test_two_nodes_of_two_ranks_measure_every_rail_each_rank_making_only_its_share(tmp_path):
    """The worker under two torchrun agents on localhost (gloo on the CPU), named node-a and
    node-b: a link per rail each way, and every rank generated only its own samples."""
    pytest.importorskip("torch", reason="the worker trains with PyTorch")
    port = free_port()
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "result.json"
    procs = []
    for index, node in enumerate(("node-a", "node-b")):
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--nproc-per-node=2",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=fabric-test",
            f"--rdzv-conf=is_host={int(index == 0)},join_timeout=120",
            "--max-restarts=0",
            "--local-addr=127.0.0.1",
            "-m",
            "validate.measure.multinode",
            "--out",
            str(out),
            "--sizes",
            "quick",
            "--fleet-node",
            node,
        ]
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=root,
                env={
                    **__import__("os").environ,
                    "PYTHONPATH": str(root),
                    "GLOO_SOCKET_IFNAME": "lo",
                },
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = [p.communicate(timeout=400)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-2000:] for log in logs)
    data = json.loads(out.read_text())
    assert data["world"] == 4 and data["nodes"] == ["node-a", "node-b"]
    assert sorted((link["source"], link["target"], link["rail"]) for link in data["links"]) == [
        ("node-a", "node-b", 0),
        ("node-a", "node-b", 1),
        ("node-b", "node-a", 0),
        ("node-b", "node-a", 1),
    ]
    from validate.measure.ddp import SIZES, WARMUP

    steps, batch, _ = SIZES["quick"]
    assert {r["samples"] for r in data["ranks"]} == {batch * (WARMUP + steps)}  # not world x that
    # on CPUs the job trains what a CPU node's own DDP trains, and says so: the small CNN at SIZES
    ddp = data["ddp"]
    assert (ddp["model"], ddp["batch"], ddp["steps"], ddp["sizes"]) == (
        "small_cnn",
        batch,
        steps,
        "quick",
    )
    assert ddp["model"] == multinode.NODE_DDP_MODEL["gloo"] and ddp["batch_sized_from"] is None
    assert ddp["batches"] == {"node-a": batch, "node-b": batch}
    assert (
        set(data["fabric"]) == {"node-a", "node-b"} and data["transport"] == {}
    )  # gloo: no NCCL log
    assert len({r["checksum"] for r in data["ranks"]}) == 1
