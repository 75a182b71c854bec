"""The multi-node job's worker, one process per GPU on every node, started by torchrun's elastic
launcher with its c10d rendezvous (`python -m torch.distributed.run ... -m validate.measure.multinode
--out FILE`; gpuenv/fleet/multinode.py writes the job). NCCL on GPUs, gloo on CPUs.

It measures, in order: an all-reduce over every rank (bus bandwidth as nccl-tests reports it:
busbw = algbw x 2 (n - 1) / n, nccl-tests doc/PERFORMANCE.md); each link of the ring of nodes
alone (node i's first rank sends to node i+1's, one link at a time: the slow link is named); and
a short DDP training run over all ranks with a DistributedSampler (a checksum of the parameters
per rank, and each rank's compute time, so a slow node is named). Rank 0 writes the result."""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

#: The all-reduce and link message sizes (bytes): large enough to measure bandwidth, not latency.
GPU_BYTES, CPU_BYTES = 256 * 2**20, 16 * 2**20
ITERS = 10
#: The DDP run's sizes are the suite's (validate/measure/ddp.py SIZES, "quick" or "full", as the
#: nodes' own suites ran): the job's samples/s is then comparable with each node's own DDP figure.
TIMEOUT = float(os.environ.get("VALIDATE_MULTINODE_TIMEOUT", "300"))


def node_name(given: str | None = None) -> str:
    """--fleet-node (the fleet's name for this host: its SSH URL, so the same engine reached twice is two
    nodes), else Slurm's name for this node (SLURMD_NODENAME), else GPUENV_NODE, else the host name."""
    return given or os.environ.get("SLURMD_NODENAME") or os.environ.get("GPUENV_NODE") or socket.gethostname()


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


def _links(torch: Any, dist: Any, device: Any, leaders: list[int], nbytes: int) -> list[dict[str, Any]]:
    """GB/s of each link of the ring of nodes, measured one at a time by its receiving end."""
    rank = dist.get_rank()
    tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    out = []
    for i, source in enumerate(leaders):
        target = leaders[(i + 1) % len(leaders)]
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
        out.append({"source": source, "target": target, "gbs": nbytes / float(seconds.item()) / 1e9})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gpuenv multi-node all-reduce and DDP step (run by torchrun)")
    parser.add_argument("--out", required=True, help="rank 0 writes the result here (JSON)")
    parser.add_argument("--fleet-node", help="this node's name in the result (default: Slurm's, else the host name)")
    parser.add_argument("--sizes", choices=("quick", "full"), default="quick", help="the suite's DDP sizes the nodes' own suites ran")
    args = parser.parse_args(argv)
    import torch
    import torch.distributed as dist

    from validate.measure.ddp import SIZES, WARMUP, dataset, rank_device, small_cnn, state_checksum, train_steps

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device, uuid = rank_device(torch, backend, local_rank, threads=1)
    began = time.perf_counter()
    dist.init_process_group(backend, timeout=timedelta(seconds=TIMEOUT))
    rank, world = dist.get_rank(), dist.get_world_size()
    me = {"rank": rank, "node": node_name(args.fleet_node), "local_rank": local_rank, "uuid": uuid}
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, me)
    joined = time.perf_counter() - began
    nodes = list(dict.fromkeys(r["node"] for r in everyone))
    leaders = [next(r["rank"] for r in everyone if r["node"] == n) for n in nodes]
    nbytes = GPU_BYTES if backend == "nccl" else CPU_BYTES
    seconds = _allreduce(torch, dist, device, nbytes)
    algbw, bus = busbw(nbytes, seconds, world)
    links = _links(torch, dist, device, leaders, nbytes) if len(leaders) >= 2 else []
    steps, batch, image = SIZES[args.sizes]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = small_cnn(torch, image).to(device)
    data = dataset(torch, world * batch * (WARMUP + steps), image)
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(data, batch_size=batch, sampler=sampler, drop_last=True)
    batches = [(x.to(device), y.to(device)) for x, y in loader][: WARMUP + steps]
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if backend == "nccl" else None)
    losses, ddp_seconds = train_steps(torch, ddp, batches, device, 0.0)
    _, local_seconds = train_steps(torch, small_cnn(torch, image).to(device), batches, device, 0.0)  # this rank's compute alone
    mine = {**me, "checksum": state_checksum(ddp.module), "local_samples_per_s": steps * batch / local_seconds,
            "ddp_seconds": ddp_seconds, "first_loss": float(losses[0]), "last_loss": float(losses[-1])}
    ranks: list[Any] = [None] * world
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        result = {
            "format": "gpuenv-multinode/1", "backend": backend, "world": world, "nodes": nodes, "join_seconds": joined,
            "allreduce": {"bytes": nbytes, "seconds": seconds, "algbw_gbs": algbw, "busbw_gbs": bus},
            "links": [{**link, "source": everyone[link["source"]]["node"], "target": everyone[link["target"]]["node"]} for link in links],
            "ddp": {"samples_per_s": steps * batch * world / max(r["ddp_seconds"] for r in ranks), "steps": steps, "batch": batch,
                    "image": image, "sizes": args.sizes},
            "ranks": ranks,
        }
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
