"""The multi-node job's worker, one process per GPU on every node, started by torchrun's elastic
launcher with its c10d rendezvous (`python -m torch.distributed.run ... -m
validate.measure.multinode --out FILE`; gpuenv/fleet/multinode.py writes the job). NCCL on GPUs,
gloo on CPUs.

It measures, in order: an all-reduce over every rank (bus bandwidth as nccl-tests reports it:
busbw = algbw x 2 (n - 1) / n, nccl-tests doc/PERFORMANCE.md); each link of the ring of nodes
alone, on every rail (local rank r of node i sends to local rank r of node i+1, one link at a
time: NCCL's point-to-point uses the NIC nearest that GPU, so every rail is measured and a slow
one named); and a short DDP training run over all ranks of what each node's own DDP check trains
(job_workload: on GPUs the wide MLP at the node's per-GPU batch, on CPUs the small CNN), each rank
generating only its own share of the data (a checksum of the parameters per rank, and each
rank's compute time, so a slow node is named). Each node's first rank also records what the
node has for a fabric (InfiniBand/RoCE ports and their rates, NIC speeds, from sysfs; whether the
verbs library loads) and the network NCCL said it used (its INIT/NET log lines).
Rank 0 writes the result.

`--count-gpus` prints how many whole GPUs (MIG instances left out) this process can use: the
node script runs it where torchrun will run (in the container, or from the prefix) for the ranks
per node."""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import os
import re
import socket
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from validate.envvars import seconds

#: The all-reduce and link message sizes (bytes): large enough to measure bandwidth, not latency.
GPU_BYTES, CPU_BYTES = 256 * 2**20, 16 * 2**20
ITERS = 10
#: The DDP run's sizes are the suite's (validate/measure/ddp.py SIZES, "quick" or "full", as the
#: nodes' own suites ran): the job's samples/s is then comparable with each node's own DDP figure.
TIMEOUT = seconds("VALIDATE_MULTINODE_TIMEOUT")


def node_name(given: str | None = None) -> str:
    """--fleet-node (the fleet's name for this host: its SSH URL, so the same engine reached twice
    is two nodes), else Slurm's name for this node (SLURMD_NODENAME), else GPUENV_NODE, else the
    host name."""
    return (
        given
        or os.environ.get("SLURMD_NODENAME")
        or os.environ.get("GPUENV_NODE")
        or socket.gethostname()
    )


def whole_gpu_count(names: list[str]) -> int:
    """GPUs a rank can run NCCL on, from CUDA's device names: MIG instances ("... MIG 1g.10gb")
    are left out, NCCL does not run across them."""
    return sum(1 for name in names if " MIG " not in f" {name} ")


def count_gpus() -> int:
    """Whole GPUs this process sees (0 without CUDA): what the container or prefix really gets,
    after --gpus, CUDA_VISIBLE_DEVICES or Slurm's GRES narrowed it."""
    import torch

    if not torch.cuda.is_available():
        return 0
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return whole_gpu_count(names)


def _sysfs(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:  # absent, or a NIC that cannot say (a down link's speed reads EINVAL)
        return None


def verbs_library() -> str | None:
    """The verbs library NCCL's IB/RoCE transport dlopens (libibverbs.so.1), when it loads here."""
    try:
        ctypes.CDLL("libibverbs.so.1")
    except OSError:
        return None
    return "libibverbs.so.1"


def node_fabric(sys_root: Path = Path("/sys")) -> dict[str, Any]:
    """What this node has for a fabric, from sysfs (`sys_root` is /sys; a test gives a tree):
    every InfiniBand/RoCE port with its state and rate (ports/N/rate: "400 Gb/sec (4X NDR)"), and
    every physical network interface (one with a device link: not lo, veth, bridges) with its
    operstate and speed (Mb/s; -1 or unreadable when the link is down: not reported)."""
    ports = []
    for device in sorted((sys_root / "class" / "infiniband").glob("*")):
        for port in sorted((device / "ports").glob("*")):
            rate = re.match(r"\s*([0-9.]+)\s*Gb/sec", _sysfs(port / "rate") or "")
            state = (_sysfs(port / "state") or "").split(":")[-1].strip() or None
            ports.append(
                {
                    "device": device.name,
                    "port": port.name,
                    "gbps": float(rate.group(1)) if rate else None,
                    "state": state,
                    "link_layer": _sysfs(port / "link_layer"),
                }
            )
    nics = []
    for iface in sorted((sys_root / "class" / "net").glob("*")):
        if iface.name == "lo" or not (iface / "device").exists():
            continue
        speed = _sysfs(iface / "speed")
        mbps = int(speed) if speed and re.fullmatch(r"[0-9]+", speed) and int(speed) > 0 else None
        nics.append({"name": iface.name, "mbps": mbps, "state": _sysfs(iface / "operstate")})
    return {"ib_ports": ports, "nics": nics}


#: NCCL's INFO lines that name its network (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET), as in
#: NVIDIA/nccl#226 ("NET/IB : No device found." then "NET/Socket : Using [0]ens3:..."),
#: NVIDIA/nccl-tests#185 ("NET/IB : Using [0]mlx5_10:1/RoCE ...", "Using network IB") and
#: vllm-project/vllm#9329 ("Failed to open libibverbs.so[.1]", then "Using network Socket").
_NETWORK = re.compile(r"NCCL INFO Using (?:non-device )?network (\S+)")
_NET_LINE = re.compile(
    r"NCCL INFO (NET/\S+ : (?:Using .*|No device found\.?)|Failed to open libibverbs\S*)\s*$"
)


def nccl_transport(lines: list[str]) -> dict[str, Any]:
    """The network NCCL said it used ("IB", "IBext", "Socket", a plugin's name; None when its log
    did not say) and its NET/ lines (which devices), from the INFO log of one process."""
    network = None
    said: list[str] = []
    for line in lines:
        match = _NETWORK.search(line)
        if match:
            network = match.group(1)
        match = _NET_LINE.search(line)
        if match and match.group(1) not in said:
            said.append(match.group(1)[:300])
    return {"network": network, "lines": said[:8]}


def nccl_log_env(folder: str) -> dict[str, str]:
    """What makes NCCL write the lines nccl_transport reads into a file of this process's own
    (NCCL_DEBUG_FILE, %p: the pid); a level the caller set (invoke.yaml fleet.env) is kept."""
    return {
        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG") or "INFO",
        "NCCL_DEBUG_SUBSYS": os.environ.get("NCCL_DEBUG_SUBSYS") or "INIT,NET",
        "NCCL_DEBUG_FILE": os.environ.get("NCCL_DEBUG_FILE") or f"{folder}/gpuenv-nccl.%p.log",
    }


def busbw(nbytes: int, seconds: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for an all-reduce of `nbytes` taking `seconds` over `world` ranks."""
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def _sync(torch: Any, device: Any) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _allreduce(torch: Any, dist: Any, device: Any, nbytes: int) -> float:
    """Median seconds of one all-reduce of `nbytes` over every rank (the slowest rank's view:
    each timed call is fenced by a barrier and the max over ranks is taken)."""
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    for _ in range(3):
        dist.all_reduce(tensor)
    samples = []
    for _ in range(ITERS):
        dist.barrier()
        _sync(torch, device)
        started = time.perf_counter()
        dist.all_reduce(tensor)
        _sync(torch, device)
        took = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=device)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        samples.append(float(took.item()))
    return statistics.median(samples)


def link_pairs(everyone: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """(source rank, target rank, rail) of every link of the ring of nodes on every rail: local
    rank r of node i to local rank r of node i+1, for each r every node has."""
    nodes = list(dict.fromkeys(r["node"] for r in everyone))
    if len(nodes) < 2:
        return []
    by_node = {n: {r["local_rank"]: r["rank"] for r in everyone if r["node"] == n} for n in nodes}
    rails = sorted(set.intersection(*(set(ranks) for ranks in by_node.values())))
    return [
        (by_node[n][rail], by_node[nodes[(i + 1) % len(nodes)]][rail], rail)
        for rail in rails
        for i, n in enumerate(nodes)
    ]


def _links(
    torch: Any, dist: Any, device: Any, pairs: list[tuple[int, int, int]], nbytes: int
) -> list[dict[str, Any]]:
    """GB/s of each link of the ring of nodes on each rail, measured one at a time by its
    receiving end."""
    rank = dist.get_rank()
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    out = []
    for source, target, rail in pairs:
        seconds = torch.zeros(1, dtype=torch.float64, device=device)
        dist.barrier()
        if rank in (source, target):
            samples = []
            for _ in range(3):
                _sync(torch, device)
                started = time.perf_counter()
                if rank == source:
                    dist.send(tensor, target)
                else:
                    dist.recv(tensor, source)
                _sync(torch, device)
                samples.append(time.perf_counter() - started)
            if rank == target:
                seconds[0] = min(samples[1:])  # the first transfer sets the connection up
        dist.all_reduce(seconds)  # only the receiver's figure is non-zero
        gbs = nbytes / float(seconds.item()) / 1e9
        out.append({"source": source, "target": target, "rail": rail, "gbs": gbs})
    return out


def job_workload(backend: str, sizes: str, gpu_batch_size: int) -> dict[str, Any]:
    """What a rank of the job trains: what a node's own DDP check trains on that backend
    (validate/checks/test_07_multigpu.py), so the job's rates and the nodes' measure one model.
    Over NCCL the GPU-bound wide MLP (ddp.py GPU_MODEL at `sizes`) at the node's own per-GPU batch
    (`gpu_batch_size`: node_gpu_batch), its steps filling MIN_WINDOW_SECONDS on the slowest rank
    (steps_for; the caller measures them); with gloo on CPUs the small CNN at the quick SIZES, as
    a CPU node's suite trains it in the full suite too (test_07 probe_size; the MLP's step is many
    times the CNN's there, and would prove nothing more)."""
    from validate.measure.ddp import GPU_MODEL, SIZES

    steps, batch, image = SIZES["quick"]
    if backend == "nccl":
        if gpu_batch_size < 1:
            raise ValueError(f"the GPU ranks' batch must be positive, not {gpu_batch_size}")
        width, depth = GPU_MODEL[sizes]
        return {"model": "wide_mlp", "width": width, "depth": depth, "batch": gpu_batch_size}
    return {"model": "small_cnn", "image": image, "batch": batch, "steps": steps}


def node_gpus(torch: Any) -> tuple[list[tuple[str, int | None]], str]:
    """(name, memory bytes) of the whole GPUs this process sees, and where they were read: NVML,
    as the node's own suite reads them (its batch is then the same), matched to CUDA's devices by
    UUID; CUDA's own name and memory only where NVML cannot say ("cuda: NVML ...")."""
    from validate.host.devices import uuid_body
    from validate.host.nvml import read_host

    cuda = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    whole = [p for p in cuda if whole_gpu_count([p.name])]
    seen = {uuid_body(str(p.uuid)) for p in whole}
    host = read_host(nv=None)  # a rank runs outside any suite: this host's own NVML, live
    listed = [g for g in host.gpus if not g.mig_enabled and uuid_body(g.uuid) in seen]
    if whole and len(listed) == len(whole):
        return [(g.name, g.memory_total_bytes) for g in listed], "nvml"
    why = host.error or f"lists {len(listed)} of the {len(whole)} GPUs CUDA sees"
    return [(p.name, int(p.total_memory)) for p in whole], f"cuda: NVML {why}"


def rank_share(torch: Any, samples: int, image: int, rank: int) -> Any:
    """This rank's own `samples` of the suite's learnable data (validate.measure.ddp.dataset's
    classes: the same prototypes on every rank, labels and noise of its own seed). Each rank makes
    only its share, so the bytes per rank do not grow with the world size."""
    from validate.measure.ddp import CLASSES

    prototypes = torch.randn(CLASSES, 3, image, image, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(1 + rank)
    labels = torch.randint(0, CLASSES, (samples,), generator=generator)
    inputs = prototypes[labels] + 0.5 * torch.randn(samples, 3, image, image, generator=generator)
    return inputs, labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="gpuenv multi-node all-reduce and DDP step (run by torchrun)"
    )
    parser.add_argument("--out", help="rank 0 writes the result here (JSON)")
    parser.add_argument(
        "--count-gpus",
        action="store_true",
        help="print how many whole GPUs this process sees, and exit",
    )
    parser.add_argument(
        "--fleet-node", help="this node's name in the result (default: Slurm's, else the host name)"
    )
    parser.add_argument(
        "--sizes",
        choices=("quick", "full"),
        default="quick",
        help="the suite's DDP sizes the nodes' own suites ran",
    )
    args = parser.parse_args(argv)
    if args.count_gpus:
        print(count_gpus())
        return 0
    if not args.out:
        parser.error("--out is required")
    import tempfile

    import torch
    import torch.distributed as dist

    from validate.judge.peaks import load_peaks
    from validate.measure.ddp import (
        BATCH_POOL,
        WARMUP,
        node_gpu_batch,
        paced_batches,
        rank_device,
        small_cnn,
        state_checksum,
        train_steps,
        vector_batches,
        wide_mlp,
    )

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    logs = tempfile.mkdtemp(prefix="gpuenv-nccl-")
    if backend == "nccl":  # read by NCCL when it creates its communicator, after this
        os.environ.update(nccl_log_env(logs))
    device, uuid = rank_device(torch, backend, local_rank, threads=1)
    began = time.perf_counter()
    dist.init_process_group(backend, timeout=timedelta(seconds=TIMEOUT))
    rank, world = dist.get_rank(), dist.get_world_size()
    me = {"rank": rank, "node": node_name(args.fleet_node), "local_rank": local_rank, "uuid": uuid}
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, me)
    joined = time.perf_counter() - began
    nodes = list(dict.fromkeys(r["node"] for r in everyone))
    nbytes = GPU_BYTES if backend == "nccl" else CPU_BYTES
    seconds = _allreduce(torch, dist, device, nbytes)
    algbw, bus = busbw(nbytes, seconds, world)
    links = _links(torch, dist, device, link_pairs(everyone), nbytes)
    node_facts: dict[str, Any] = {}
    if local_rank == 0:  # one per node: its fabric, and the network its NCCL said it used
        lines: list[str] = []
        for log in Path(logs).glob("gpuenv-nccl.*.log"):
            lines += log.read_text(encoding="utf-8", errors="replace").splitlines()
        node_facts = {
            "fabric": {**node_fabric(), "verbs": verbs_library()},
            "transport": nccl_transport(lines) if backend == "nccl" else None,
        }
    gpu_batch_size, sized_from = 0, None
    if backend == "nccl":  # the node's own per-GPU batch, as its suite sized it
        gpus, sized_from = node_gpus(torch)
        gpu_batch_size = node_gpu_batch(args.sizes == "quick", gpus, load_peaks())
    work = job_workload(backend, args.sizes, gpu_batch_size)
    batch, lr = work["batch"], 0.05
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if work["model"] == "wide_mlp":
            model, lr = wide_mlp(torch, work["width"], work["depth"]).to(device), 0.01
        else:
            model = small_cnn(torch, work["image"]).to(device)
    if work["model"] == "wide_mlp":
        pool = vector_batches(torch, BATCH_POOL, batch, work["width"], device, rank)
        samples = BATCH_POOL * batch
        steps, batches = paced_batches(torch, dist, model, pool, device, lr)
    else:
        steps = work["steps"]
        samples = batch * (WARMUP + steps)
        inputs, labels = rank_share(torch, samples, work["image"], rank)
        samples = int(labels.shape[0])  # what this rank generated: its share, not the world's
        batches = [
            (inputs[i : i + batch].to(device), labels[i : i + batch].to(device))
            for i in range(0, samples, batch)
        ]
    alone = copy.deepcopy(model)  # this rank's compute alone, on the same start
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[local_rank] if backend == "nccl" else None
    )
    losses, ddp_seconds = train_steps(torch, ddp, batches, device, 0.0, lr)
    _, local_seconds = train_steps(torch, alone, batches, device, 0.0, lr)
    mine = {
        **me,
        **node_facts,
        "samples": samples,
        "batch": batch,
        "checksum": state_checksum(ddp.module),
        "local_samples_per_s": steps * batch / local_seconds,
        "ddp_seconds": ddp_seconds,
        "first_loss": float(losses[0]),
        "last_loss": float(losses[-1]),
    }
    ranks: list[Any] = [None] * world
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        result = {
            "format": "gpuenv-multinode/1",
            "backend": backend,
            "world": world,
            "nodes": nodes,
            "join_seconds": joined,
            "allreduce": {
                "bytes": nbytes,
                "seconds": seconds,
                "algbw_gbs": algbw,
                "busbw_gbs": bus,
            },
            "links": [
                {
                    **link,
                    "source": everyone[link["source"]]["node"],
                    "target": everyone[link["target"]]["node"],
                }
                for link in links
            ],
            "fabric": {r["node"]: r["fabric"] for r in ranks if r.get("fabric") is not None},
            "transport": {
                r["node"]: r["transport"] for r in ranks if r.get("transport") is not None
            },
            "ddp": {
                "samples_per_s": steps
                * sum(r["batch"] for r in ranks)
                / max(r["ddp_seconds"] for r in ranks),
                "steps": steps,
                "sizes": args.sizes,
                **work,  # the model, its size and this rank's batch: what the fleet compares
                "batches": {r["node"]: r["batch"] for r in ranks},
                "batch_sized_from": sized_from,
            },
            "ranks": [
                {k: v for k, v in r.items() if k not in ("fabric", "transport")} for r in ranks
            ],
        }
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    dist.destroy_process_group()
    import shutil

    shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
