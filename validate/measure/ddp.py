"""Multi-GPU training with PyTorch the way users run it: DistributedDataParallel with one process
per GPU (torch.multiprocessing spawn, as the DDP tutorial does), and DataParallel once in one
process of its own after it (the `dataparallel` probe, so its hang or crash cannot fail DDP).

The launcher runs inside a probe child (`python -m validate.measure.probe ddp ...`) and holds the
rendezvous store. Each rank leaves marker files in a shared folder (`arrived`: it reached the
rendezvous; `joined`: its first collective completed on the device), so a rank that never comes
is named, with its GPU, when the join bound passes, instead of the job hanging in
`init_process_group`. On GPUs (NCCL) the ranks train a wide MLP sized from the GPU (GPU_MODEL,
gpu_batch) for at least MIN_WINDOW_SECONDS; on the CPU (gloo) the small CNN at SIZES.
`VALIDATE_DDP_FAULT=slow:R` or `absent:R` makes rank R slow or absent, and
`VALIDATE_DATAPARALLEL_FAULT=hang` or `abort` DataParallel (it runs in a probe of its own, with
its own bound, so its hang or death cannot fail DDP): the fault tests prove the named failures.
The settings and faults are read through validate/envvars.py, which checks them before the run.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from validate.envvars import dataparallel_fault, ddp_fault, seconds

#: Seconds every rank has, from its spawn, to reach the rendezvous and finish its first collective
#: (a Python start, the framework import, a CUDA context, NCCL's communicator set-up).
JOIN_TIMEOUT = seconds("VALIDATE_DDP_JOIN_TIMEOUT")
#: Seconds the training steps may take once every rank joined.
RUN_TIMEOUT = seconds("VALIDATE_DDP_RUN_TIMEOUT")
#: The slow fault's extra seconds per step on its rank: on the CPU (steps of 10 to 30 ms) a rank
#: at a tenth of its peers' speed or less, well below CPU_MIN_SHARE of their median.
SLOW_STEP_SECONDS = 0.3
#: (timed steps, batch per rank, image side) of the small CNN the CPU ranks (gloo) and the
#: multi-node job train, for the quick and full suite; 3 warm-up steps before. CI's CPUs stay fast.
SIZES = {"quick": (30, 32, 16), "full": (60, 64, 32)}
WARMUP = 3
CLASSES = 10

# --- the GPU ranks' workload: bound by the GPU and the all-reduce, not by kernel launches ---------
#: (width, depth) of the MLP the GPU ranks train: quick 1024 x 4 (4.2M parameters, 17 MB of
#: gradients), full 2048 x 6 (25M, 101 MB: NCCL's all-reduce is bandwidth-bound at that size).
GPU_MODEL = {"quick": (1024, 4), "full": (2048, 6)}
#: The GPU time one step aims at, from the GPU's measured fp32 matmul reference (gpu_peaks.yaml).
TARGET_STEP_SECONDS = 0.02
#: What an eager PyTorch step costs the CPU (kernel launches, autograd, the optimizer): about 0.7
#: to 1.5 ms for a step of some 50 kernels; the GPU time must dominate it.
LAUNCH_SECONDS = 1.5e-3
#: The shortest timed window of each run on a rank: a scheduler pause of a few ms is then noise.
MIN_WINDOW_SECONDS = 1.0
#: The fp32 rate assumed where the peak table has no measured reference for the GPU (an L4's is
#: 10.66): a faster GPU gets a shorter step, and the timed window still lasts MIN_WINDOW_SECONDS.
DEFAULT_FP32_TFLOPS = 10.0
#: Share of the GPU's memory the batch's activations may take, and the batch's bounds.
ACTIVATION_SHARE, MIN_BATCH, MAX_BATCH = 0.05, 64, 16384
#: Timed steps: as many as fill MIN_WINDOW_SECONDS on the slowest rank, within these bounds.
MIN_STEPS, MAX_STEPS = 10, 5000
#: Distinct batches kept on the GPU and reused: the step reads them, nothing is copied per step.
BATCH_POOL = 8


def mlp_flops_per_sample(width: int, depth: int) -> float:
    """Forward 2 and backward 4 flops per weight and sample, for `depth` width x width layers."""
    return 6.0 * depth * width * width


def gpu_batch(quick: bool, fp32_tflops: float | None, memory_bytes: int | None) -> int:
    """The per-rank batch whose step takes about TARGET_STEP_SECONDS at the GPU's measured fp32
    rate, a power of two, its activations within ACTIVATION_SHARE of the GPU's memory."""
    width, depth = GPU_MODEL["quick" if quick else "full"]
    wanted = (
        TARGET_STEP_SECONDS
        * (fp32_tflops or DEFAULT_FP32_TFLOPS)
        * 1e12
        / mlp_flops_per_sample(width, depth)
    )
    cap = MAX_BATCH
    if memory_bytes:
        cap = min(
            cap, int(ACTIVATION_SHARE * memory_bytes / (4 * 4 * width * depth))
        )  # fp32 activations, grads, ReLU masks
    batch = MIN_BATCH
    while batch * 2 <= min(wanted, cap):
        batch *= 2
    return batch


def node_gpu_batch(quick: bool, gpus: list[tuple[str, int | None]], peaks: list[Any]) -> int:
    """The GPU ranks' batch on a node whose whole GPUs are `gpus` ((name, memory bytes)): gpu_batch
    at the slowest GPU's measured fp32 matmul reference (`peaks`: gpu_peaks.yaml; ddp.py's default
    where one GPU has none) and the smallest memory. The node's own DDP check and the multi-node
    job both size their batch here, so their samples/s measure the same step."""
    from validate.judge.peaks import peaks_for

    rates = []
    for name, _ in gpus:
        entry = peaks_for(name, peaks)
        reference = entry.reference_for("fp32_tflops") if entry else None
        rates.append(reference.value if reference else None)
    known = [r for r in rates if r]
    rate = min(known) if known and len(known) == len(rates) else None
    memories = [m for _, m in gpus if m]
    return gpu_batch(quick, rate, min(memories) if memories else None)


def wide_mlp(torch: Any, width: int, depth: int) -> Any:
    """The model the GPU ranks train: `depth` width x width layers with ReLU, then a classifier.
    He initialisation keeps the signal's size through the layers, so the loss falls within the
    first steps (PyTorch's default shrinks it at each layer, and a deep MLP then barely learns)."""
    nn = torch.nn
    layers: list[Any] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, CLASSES))
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)
    return model


def vector_batches(
    torch: Any, count: int, batch: int, width: int, device: Any, seed: int
) -> list[tuple[Any, Any]]:
    """`count` learnable batches made on the device (each class a fixed random vector plus noise);
    `seed` differs per rank, as a DistributedSampler's shares do."""
    generator = torch.Generator().manual_seed(0)
    prototypes = torch.randn(CLASSES, width, generator=generator).to(device)
    generator.manual_seed(1 + seed)
    out = []
    for _ in range(count):
        labels = torch.randint(0, CLASSES, (batch,), generator=generator).to(device)
        out.append((prototypes[labels] + 0.5 * torch.randn(batch, width, device=device), labels))
    return out


def steps_for(seconds_per_step: float) -> int:
    """Timed steps that fill MIN_WINDOW_SECONDS at this pace, within MIN_STEPS..MAX_STEPS."""
    if seconds_per_step <= 0:
        return MAX_STEPS
    return max(MIN_STEPS, min(MAX_STEPS, int(MIN_WINDOW_SECONDS / seconds_per_step) + 1))


def cpu_threads(world: int) -> int:
    """Threads per rank on the CPU: the cores split between the ranks. More would oversubscribe
    them, and OpenMP threads waiting on each other then run many times slower."""
    return max(1, (os.cpu_count() or 1) // world)


def small_cnn(torch: Any, image: int) -> Any:
    """The model every rank trains: small, real (convolutions, batch norm, a classifier)."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (image // 4) ** 2, CLASSES),
    )


def dataset(torch: Any, samples: int, image: int) -> Any:
    """Learnable synthetic data: each class is a fixed random image, a sample is it plus noise.
    Seeded, so every rank builds the same set and DistributedSampler splits it."""
    generator = torch.Generator().manual_seed(0)
    prototypes = torch.randn(CLASSES, 3, image, image, generator=generator)
    labels = torch.randint(0, CLASSES, (samples,), generator=generator)
    inputs = prototypes[labels] + 0.5 * torch.randn(samples, 3, image, image, generator=generator)
    return torch.utils.data.TensorDataset(inputs, labels)


def state_checksum(module: Any) -> str:
    """sha256 over every parameter's bytes, in order: equal only when bit-identical. Buffers are
    left out on purpose: DDP broadcasts them from rank 0 before each forward, and each rank's last
    forward then updates batch norm's running statistics from its own batch."""
    digest = hashlib.sha256()
    for name, tensor in module.named_parameters():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _mark(folder: str, rank: int, what: str, data: dict[str, Any]) -> None:
    path = Path(folder) / f"rank{rank}.{what}"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def join_first_collective(
    torch: Any, dist: Any, device: Any, folder: str, rank: int, began: float
) -> None:
    """The first all-reduce, then the "joined" marker. On CUDA a collective returns once it is
    enqueued (torch.distributed docs, "Synchronous and asynchronous collective operations"; NCCL's
    "CUDA Stream Semantics"), so the marker waits for the device: a first all-reduce that never
    completes (a P2P or ACS hang) is named as such at the join bound, not as slow training."""
    dist.all_reduce(torch.ones(1, device=device))  # NCCL builds its communicator here, not in init
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    _mark(folder, rank, "joined", {"seconds": time.perf_counter() - began})


def rank_device(torch: Any, backend: str, local_rank: int, threads: int) -> tuple[Any, str | None]:
    """(device, GPU UUID) of a rank on this node: its own GPU with NCCL (made current, as NCCL
    requires), else the CPU with `threads` threads."""
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), str(
            torch.cuda.get_device_properties(local_rank).uuid
        )
    torch.set_num_threads(threads)
    return torch.device("cpu"), None


def _batches(loader: Any, sampler: Any, device: Any, count: int) -> list[tuple[Any, Any]]:
    """`count` batches from the DistributedSampler's share, epoch after epoch (set_epoch
    reshuffles)."""
    out: list[tuple[Any, Any]] = []
    epoch = 0
    while len(out) < count:
        sampler.set_epoch(epoch)
        out += [
            (x.to(device, non_blocking=True), y.to(device, non_blocking=True)) for x, y in loader
        ]
        epoch += 1
    return out[:count]


def train_steps(
    torch: Any,
    model: Any,
    batches: list[tuple[Any, Any]],
    device: Any,
    delay: float,
    lr: float = 0.05,
) -> tuple[list[Any], float]:
    """SGD over `batches`; (losses, seconds of the steps after WARMUP). `delay` is the slow
    fault."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    losses: list[Any] = []
    started = time.perf_counter()
    for number, (inputs, labels) in enumerate(batches):
        if number == WARMUP:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if delay:
            time.sleep(delay)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return losses, time.perf_counter() - started


def paced_batches(
    torch: Any, dist: Any, model: Any, pool: list[Any], device: Any, lr: float
) -> tuple[int, list[Any]]:
    """(steps, the warm-up and timed batches) of a GPU rank: the pace of this GPU is measured on a
    throwaway copy of the model, and the slowest rank's pace sets everyone's steps (an all-reduce
    of the steps each needs), so the timed window fills `steps_for`'s time on the slowest rank.
    Shared by the suite's DDP check and the multi-node job, so both time the same way."""
    _, probe_seconds = train_steps(
        torch,
        copy.deepcopy(model),
        [pool[i % len(pool)] for i in range(WARMUP + 5)],
        device,
        0.0,
        lr,
    )
    needed = torch.tensor([steps_for(probe_seconds / 5)], device=device)
    dist.all_reduce(needed, op=dist.ReduceOp.MAX)
    steps = int(needed.item())
    return steps, [pool[i % len(pool)] for i in range(WARMUP + steps)]


def worker(
    rank: int,
    world: int,
    port: int,
    backend: str,
    sizes: tuple[int, int, int],
    folder: str,
    join_timeout: float,
    gpu_mlp: tuple[int, int, int] | None = None,
) -> None:
    """One rank: rendezvous, DDP training with a DistributedSampler and a checksum of the
    parameters, and the same steps as a one-GPU job for the speedup. With `gpu_mlp` (width, depth,
    batch; NCCL) it trains the wide MLP for as many steps as fill MIN_WINDOW_SECONDS on the
    slowest rank; else the small CNN for `sizes`' steps."""
    import torch
    import torch.distributed as dist

    steps, batch, image = sizes
    injected = ddp_fault()
    if injected == ("absent", rank):
        time.sleep(10 * join_timeout)  # never reaches the rendezvous; the launcher's bound ends it
    delay = SLOW_STEP_SECONDS if injected == ("slow", rank) else 0.0
    device, uuid = rank_device(torch, backend, rank, cpu_threads(world))
    _mark(folder, rank, "arrived", {"pid": os.getpid(), "uuid": uuid})
    began = time.perf_counter()
    # The framework's own timeout is longer than the launcher's join bound, so the launcher names
    # the missing rank first (a timeout raised here would blame the rank that waited).
    bound = join_timeout + RUN_TIMEOUT
    dist.init_process_group(
        backend,
        store=rank_store(dist, port, bound),
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=bound),
    )
    join_first_collective(torch, dist, device, folder, rank, began)
    peer_access = None
    if backend == "nccl" and rank == 0:
        peer_access = {
            f"{i}-{j}": bool(torch.cuda.can_device_access_peer(i, j))
            for i in range(world)
            for j in range(world)
            if i != j
        }
    lr = 0.05
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if gpu_mlp:
            width, depth, batch = gpu_mlp
            model, lr = wide_mlp(torch, width, depth).to(device), 0.01
        else:
            model = small_cnn(torch, image).to(device)
    if gpu_mlp:
        pool = vector_batches(torch, BATCH_POOL, batch, width, device, rank)
        steps, batches = paced_batches(torch, dist, model, pool, device, lr)
    else:
        data = dataset(torch, world * batch * 8, image)
        sampler = torch.utils.data.distributed.DistributedSampler(
            data, num_replicas=world, rank=rank, shuffle=True, seed=0
        )
        loader = torch.utils.data.DataLoader(
            data, batch_size=batch, sampler=sampler, drop_last=True
        )
        batches = _batches(loader, sampler, device, WARMUP + steps)
    # The one-GPU job: the same steps on a plain copy of the model (no gradient all-reduce), on
    # every rank at the same time, before and after the DDP steps; the faster of the two counts
    # (other load on the host only ever slows a run down).
    dist.barrier()
    _, local_seconds = train_steps(torch, copy.deepcopy(model), batches, device, delay, lr)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[rank] if backend == "nccl" else None
    )
    dist.barrier()
    losses, seconds = train_steps(torch, ddp, batches, device, delay, lr)
    checksum = state_checksum(ddp.module)
    dist.barrier()
    _, again = train_steps(torch, copy.deepcopy(ddp.module), batches, device, delay, lr)
    local_seconds = min(local_seconds, again)
    values = [float(v) for v in losses]
    _mark(
        folder,
        rank,
        "result",
        {
            "rank": rank,
            "uuid": uuid,
            "checksum": checksum,
            "first_loss": sum(values[:3]) / 3,
            "last_loss": sum(values[-3:]) / 3,
            "ddp_seconds": seconds,
            "local_seconds": local_seconds,
            "timed_steps": steps,
            "batch": batch,
            "peer_access": peer_access,
        },
    )
    dist.destroy_process_group()


def rendezvous_store(seconds: float) -> Any:
    """The rendezvous the ranks meet at: a TCPStore the launcher holds, on a port the system picks
    and keeps bound (port 0). Finding a free port, closing it and handing it on let another process
    take it in between (a crash in init_process_group)."""
    import torch.distributed as dist

    return dist.TCPStore(
        "127.0.0.1", 0, None, True, timedelta(seconds=seconds), wait_for_workers=False
    )


def rank_store(dist: Any, port: int, seconds: float) -> Any:
    """A rank's client of the launcher's rendezvous_store."""
    return dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=seconds))


def _read(folder: str, rank: int, what: str) -> dict[str, Any] | None:
    path = Path(folder) / f"rank{rank}.{what}"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _stop(context: Any) -> None:
    for process in context.processes:
        if process.is_alive():
            process.kill()
    for process in context.processes:
        process.join(5)


def missing_ranks(world: int, arrived: set[int], joined: set[int]) -> tuple[str, list[int]]:
    """Which ranks to blame when the join bound passes: those that never reached the rendezvous,
    else (all came, none got through) those whose first collective did not return."""
    absent = [r for r in range(world) if r not in arrived]
    if absent:
        return "never reached the rendezvous", absent
    return "reached the rendezvous but its first collective did not return", [
        r for r in range(world) if r not in joined
    ]


def launch(
    world: int,
    backend: str,
    quick: bool,
    join_timeout: float = JOIN_TIMEOUT,
    run_timeout: float = RUN_TIMEOUT,
    gpu_batch_size: int = 0,
) -> dict[str, Any]:
    """Spawn `world` ranks and watch them within the bounds; the ranks' results, or which rank
    failed where (`stage` join, run or crash, `ranks`, `error`). `gpu_batch_size`: see worker."""
    import torch.multiprocessing as mp

    sizes = SIZES["quick" if quick else "full"]
    with tempfile.TemporaryDirectory(prefix="gpuenv-ddp-") as folder:
        started = time.perf_counter()
        gpu_mlp = (
            (*GPU_MODEL["quick" if quick else "full"], gpu_batch_size) if gpu_batch_size else None
        )
        store = rendezvous_store(join_timeout + run_timeout)  # held here until the ranks are done
        context = mp.start_processes(
            worker,
            args=(world, store.port, backend, sizes, folder, join_timeout, gpu_mlp),
            nprocs=world,
            join=False,
            start_method="spawn",
        )
        stage, deadline = "join", started + join_timeout
        try:
            while True:
                try:
                    if context.join(timeout=0.2):
                        break
                except (
                    Exception
                ) as err:  # a rank died: ProcessRaisedException / ProcessExitedException
                    rank = getattr(err, "error_index", None)
                    return {
                        "stage": "crash",
                        "ranks": [rank] if rank is not None else [],
                        "error": str(err).strip().splitlines()[-1],
                    }
                joined = {r for r in range(world) if _read(folder, r, "joined")}
                if stage == "join" and len(joined) == world:
                    stage, deadline = "run", time.perf_counter() + run_timeout
                if time.perf_counter() > deadline:
                    if stage == "join":
                        arrived = {r for r in range(world) if _read(folder, r, "arrived")}
                        why, ranks = missing_ranks(world, arrived, joined)
                        return {
                            "stage": "join",
                            "ranks": ranks,
                            "bound": join_timeout,
                            "error": f"{why} within {join_timeout:.0f} s",
                        }
                    late = [r for r in range(world) if not _read(folder, r, "result")]
                    return {
                        "stage": "run",
                        "ranks": late,
                        "bound": run_timeout,
                        "error": f"did not finish its training steps within {run_timeout:.0f} s "
                        "of joining",
                    }
        finally:
            _stop(context)
        ranks = [_read(folder, r, "result") for r in range(world)]
        joins = [(_read(folder, r, "joined") or {}).get("seconds") for r in range(world)]
    return {
        "world": world,
        "backend": backend,
        "ranks": ranks,
        "join_seconds": joins,
        "wall_seconds": time.perf_counter() - started,
    }


def dataparallel(world: int, quick: bool, gpu_batch_size: int = 0) -> dict[str, Any]:
    """The same model and global batch as DDP's, trained with torch.nn.DataParallel in this one
    process (over every visible GPU; on a machine without GPUs DataParallel runs the plain
    module)."""
    import torch

    injected = dataparallel_fault()
    if injected == "hang":
        time.sleep(3600)  # the probe's own bound ends it
    elif injected == "abort":
        os.abort()
    steps, batch, image = SIZES["quick" if quick else "full"]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device = torch.device("cuda", 0) if gpus else torch.device("cpu")
    if not gpus:
        torch.set_num_threads(
            cpu_threads(world)
        )  # as one DDP rank: on the CPU DataParallel is the plain module
    lr = 0.05
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if gpus and gpu_batch_size:
            width, depth = GPU_MODEL["quick" if quick else "full"]
            module, batch, lr = wide_mlp(torch, width, depth), gpu_batch_size, 0.01
        else:
            module = small_cnn(torch, image)
        model = torch.nn.DataParallel(module.to(device))
    if gpus and gpu_batch_size:
        pool = vector_batches(torch, BATCH_POOL, world * batch, width, device, 0)
        _, probe_seconds = train_steps(
            torch, model, [pool[i % BATCH_POOL] for i in range(WARMUP + 5)], device, 0.0, lr
        )
        steps = steps_for(probe_seconds / 5)
        batches = [pool[i % BATCH_POOL] for i in range(WARMUP + steps)]
    else:
        data = dataset(torch, world * batch * 8, image)
        loader = torch.utils.data.DataLoader(
            data,
            batch_size=world * batch,
            shuffle=True,
            generator=torch.Generator().manual_seed(0),
            drop_last=True,
        )
        batches = []
        while len(batches) < WARMUP + steps:
            batches += [(x.to(device), y.to(device)) for x, y in loader]
        batches = batches[: WARMUP + steps]
    losses, seconds = train_steps(torch, model, batches, device, 0.0, lr)
    values = [float(v) for v in losses]
    return {
        "gpus": gpus,
        "samples_per_s": steps * world * batch / seconds if seconds > 0 else None,
        "first_loss": sum(values[:3]) / 3,
        "last_loss": sum(values[-3:]) / 3,
    }


def summarise(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's figures from each rank's result: samples/s on N (the slowest rank sets the pace),
    the one-GPU rate (median rank), speedup / N, each rank's one-GPU rate, and the checksums."""
    world = len(ranks)
    batch, steps = ranks[0]["batch"], ranks[0]["timed_steps"]
    ddp_seconds = max(r["ddp_seconds"] for r in ranks)
    per_rank = [steps * batch / r["local_seconds"] for r in ranks]
    single = statistics.median(per_rank)
    total = steps * batch * world / ddp_seconds
    return {
        "world": world,
        "samples_per_s": total,
        "single_samples_per_s": single,
        "speedup": total / single,
        "efficiency": total / single / world,
        "rank_samples_per_s": per_rank,
        "checksums": [r["checksum"] for r in ranks],
        "losses": [(r["first_loss"], r["last_loss"]) for r in ranks],
        "uuids": [r.get("uuid") for r in ranks],
        "peer_access": ranks[0].get("peer_access"),
    }


def probe(
    world: int, backend: str, quick: bool, with_dataparallel: bool = False, gpu_batch_size: int = 0
) -> dict[str, Any]:
    """The probe command: the DDP job, its summary, and (asked for, in the same process)
    DataParallel's run after it. The suite runs DataParallel in a probe of its own
    (`dataparallel_probe`), so its hang or crash cannot take DDP's figures with it."""
    job = launch(world, backend, quick, gpu_batch_size=gpu_batch_size)
    if "stage" in job:
        return {"failed": job}
    out: dict[str, Any] = {
        "backend": backend,
        "wall_seconds": job["wall_seconds"],
        "join_seconds": job["join_seconds"],
        **summarise(job["ranks"]),
    }
    if with_dataparallel:
        try:
            out["dataparallel"] = dataparallel(world, quick, gpu_batch_size)
        except Exception as err:  # DataParallel never fails a host: its error is reported
            out["dataparallel"] = {"error": f"{type(err).__name__}: {err}"}
    return out


def dataparallel_probe(world: int, quick: bool, gpu_batch_size: int = 0) -> dict[str, Any]:
    """The `dataparallel` probe command: DataParallel alone, its error as a result."""
    try:
        return dataparallel(world, quick, gpu_batch_size)
    except Exception as err:  # DataParallel never fails a host: its error is reported
        return {"dataparallel_error": f"{type(err).__name__}: {err}"}
