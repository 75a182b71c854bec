"""Check 7, multi-GPU: NCCL all-reduce bus bandwidth across every GPU against a floor for the
interconnect (moved here from check 5: both run one process per GPU through world.py; reports
saved before keep its old node id, which validate/report/record.py's MOVED_TESTS maps), then
multi-GPU training: a DistributedDataParallel job with one process per GPU (NCCL), as
users launch it, proves the GPUs train together: every rank joins within a bound (a hang is a
fail naming the rank and its GPU), the parameters are bit-identical across ranks afterwards, the
loss falls, no rank drags the others, and the scaling efficiency (speedup / N) is judged against
a cited reference for the interconnect (validate/judge/scaling.yaml), --baseline or the fleet
median. DataParallel runs once after it, in a probe of its own with its own bound, reported and
never judged: its hang or crash is a warning and cannot fail DDP.

On a machine without GPUs (CI) the same code runs with gloo and two processes on the CPU, in the
full suite: --quick skips it there (QUICK_CPU_MULTIGPU_SKIP names why and where it runs), and the
full suite trains the quick sizes there (probe_size)."""

from __future__ import annotations

from typing import Any

import pytest

from validate.checks.world import whole_gpu_env, whole_gpus
from validate.envvars import seconds
from validate.host.devices import uuid_body
from validate.judge.peaks import interconnect_of, load_interconnects, nccl_floor
from validate.judge.scaling import (
    dataparallel_verdict,
    efficiency_verdict,
    identical_verdict,
    load_scaling,
    no_p2p_text,
    rank_labels,
    slowest_rank_verdict,
)
from validate.judge.speed import loss_falls_verdict, throughput_verdict
from validate.judge.verdict import FAIL, PASS, Verdict
from validate.measure.budget import (
    CPU_RANKS,
    QUICK_CPU_MULTIGPU_SKIP,
    multigpu_runs,
)  # CPU_RANKS: two, as CI's two cores allow
from validate.measure.ddp import JOIN_TIMEOUT, RUN_TIMEOUT, node_gpu_batch
from validate.measure.subproc import DEFAULT_TIMEOUT, run_probe

#: The NCCL all-reduce's message size and timed iterations, quick and full (as nccl-tests' busbw).
ALLREDUCE = {"quick": (64 * 2**20, 10), "full": (256 * 2**20, 20)}


def probe_size(suite: Any) -> str:
    """The probes' sizes, "quick" or "full". A host without GPUs trains the quick sizes in the full
    suite too: no published reference judges its figures (a --baseline of the host compares like
    with like), its rows prove the code path (ranks join, identical parameters, the loss falls), and
    the slow-rank fault
    (validate/measure/ddp.py, SLOW_STEP_SECONDS) is sized for those steps."""
    return "quick" if suite.quick or not suite.host.gpus else "full"


def skip_quick_on_cpu(suite: Any) -> None:
    """--quick on a host without GPUs: skip, naming the full suite as where the check runs."""
    if not suite.host.gpus and not multigpu_runs(0, suite.quick):
        pytest.skip(QUICK_CPU_MULTIGPU_SKIP)


def lead_gpu(uuid: str | None, gpus: list[Any]) -> Any:
    """The NVML GPU of rank 0 (None on the CPU). The job's figures are filed under it: a baseline
    then keeps them under its model, and the fleet report compares them with that model's median."""
    return next((g for g in gpus if uuid and uuid_body(g.uuid) == uuid_body(uuid)), None)


@pytest.mark.isolated
def test_nccl_all_reduce(torch, suite, record):
    """All-reduce bus bandwidth over NCCL across every GPU PyTorch sees (as nccl-tests reports
    busbw), against the floor for the interconnect (NVLink or PCIe)."""
    suite.require_gpus()
    if torch.version.cuda is None:
        pytest.fail("PyTorch is a CPU build: no NCCL", pytrace=False)
    _, env, gpus = whole_gpus(suite, torch, "all-reduce")
    nbytes, iterations = ALLREDUCE["quick" if suite.quick else "full"]
    result = run_probe(["allreduce", str(nbytes), str(iterations)], env)
    if result.error or result.data is None:
        pytest.fail(f"NCCL all-reduce failed: {result.error}", pytrace=False)
    busbw = float(result.data["busbw_gbs"])
    check = f"nccl all-reduce busbw GB/s ({result.data['world']} GPUs)"
    baseline = suite.baseline_for(gpus[0].name, check)
    kind, link = interconnect_of(gpus, suite.peaks)
    floor = nccl_floor(kind, link, load_interconnects())
    if baseline is not None or floor is None:
        verdict = throughput_verdict(check, busbw, baseline)
    else:
        minimum, rule = floor
        verdict = (
            Verdict("pass", rule)
            if busbw >= minimum
            else Verdict(
                "fail", rule, f"{kind} all-reduce busbw {busbw:.1f} GB/s is below {minimum:.1f}"
            )
        )
    record.add(
        check,
        f"{busbw:.1f} GB/s over {kind} (NCCL {result.data['nccl']})",
        verdict,
        value=busbw,
        seconds=result.seconds,
    )
    record.finish()


@pytest.mark.isolated
def test_ddp_training(torch, suite, record):
    """DDP over every GPU (NCCL), or over CPU_RANKS processes with gloo on a machine without
    GPUs."""
    skip_quick_on_cpu(suite)
    if suite.host.gpus:
        if torch.version.cuda is None:
            pytest.fail("PyTorch is a CPU build: no NCCL for the GPUs NVML sees", pytrace=False)
        world, env, gpus = whole_gpus(suite, torch, "DDP training")
        backend = "nccl"
        kind, _ = interconnect_of(gpus, suite.peaks)
    else:
        world, env, gpus, backend, kind = CPU_RANKS, {}, [], "gloo", None
    where = f"{world} ranks, {backend}"
    sized = (
        ["--gpu-batch", str(gpu_batch_for(gpus, suite))] if backend == "nccl" else []
    )  # the CPU keeps the small CNN
    args = ["ddp", str(world), backend, probe_size(suite), *sized]
    result = run_probe(args, env, timeout=JOIN_TIMEOUT + RUN_TIMEOUT + DEFAULT_TIMEOUT)
    data = result.data or {}
    failed = data.get("failed")
    if result.error or failed:
        _record_failure(
            record,
            where,
            failed,
            result.error,
            [g for g in suite.visible_gpus() if not g.mig_enabled],
            world,
            backend,
        )
        record.finish()
    labels = rank_labels(data["uuids"], gpus)
    joins = data["join_seconds"]
    slow_join = max(range(world), key=lambda r: joins[r] or 0)
    record.add(
        f"ddp ranks joined ({where})",
        f"{world}/{world}, last {labels[slow_join]} after {joins[slow_join]:.1f} s",
        Verdict(PASS, f"every rank within {JOIN_TIMEOUT:.0f} s"),
        seconds=result.seconds,
    )
    record.add(
        f"ddp parameters identical ({where})",
        f"sha256 {data['checksums'][0][:12]}... on {world} ranks",
        identical_verdict(data["checksums"], labels),
        seconds=0,
    )
    first, last = max(
        data["losses"], key=lambda pair: pair[1] / pair[0]
    )  # the rank that learnt least
    record.add(
        f"ddp training loss ({where})",
        f"{first:.3f} -> {last:.3f} (worst rank)",
        loss_falls_verdict(first, last),
        seconds=0,
    )
    lead = lead_gpu(data["uuids"][0], gpus)
    model = lead.name if lead else None
    for check, rate in (
        (f"ddp samples/s ({where})", data["samples_per_s"]),
        (
            f"ddp samples/s (per GPU without all-reduce, median of {world}, {backend})",
            data["single_samples_per_s"],
        ),
    ):
        record.add(
            check,
            f"{rate:.0f} samples/s",
            throughput_verdict(check, rate, suite.baseline_for(model, check)),
            value=rate,
            seconds=0,
            gpu=lead.uuid if lead else None,
            fleet_judged=False,
        )  # the baseline judges it; other hosts' CPUs differ
    no_p2p = no_p2p_text(data.get("peer_access"), kind)
    check = f"ddp scaling efficiency ({where})"
    verdict = efficiency_verdict(
        data["efficiency"],
        kind,
        world,
        load_scaling(),
        suite.baseline_for(model, check),
        no_p2p=bool(no_p2p),
    )
    over = no_p2p or (kind and f"over {kind}") or "ranks sharing this CPU"
    record.add(
        check,
        f"{data['efficiency']:.2f} (speedup {data['speedup']:.2f} on {world}; {over})",
        verdict,
        value=data["efficiency"],
        seconds=0,
        gpu=lead.uuid if lead else None,
    )
    measured, verdict = slowest_rank_verdict(
        data["rank_samples_per_s"], labels, on_cpu=backend == "gloo"
    )
    record.add(f"ddp slowest rank ({where})", measured, verdict, seconds=0)
    dp = _dataparallel(world, env, suite, sized)
    measured, verdict = dataparallel_verdict(
        dp.get("samples_per_s"), data["samples_per_s"], dp.get("error")
    )
    record.add(
        f"dataparallel samples/s ({dp.get('gpus', world)} GPUs, one process)",
        measured,
        verdict,
        value=dp.get("samples_per_s"),
        seconds=0,
        gpu=lead.uuid if lead else None,
        fleet_judged=False,
    )  # information only
    record.finish()


#: DataParallel's own bound (a Python start, the framework import, its steps): its hang is named
#: and warned about when it passes, never the DDP probe's.
DATAPARALLEL_TIMEOUT = seconds("VALIDATE_DATAPARALLEL_TIMEOUT")


def gpu_batch_for(gpus: list[Any], suite: Any) -> int:
    """The GPU ranks' batch, from the slowest GPU's measured fp32 matmul reference
    (gpu_peaks.yaml) and the smallest GPU memory: a step the GPU, not the CPU, sets the pace of
    (node_gpu_batch, which the multi-node job sizes its batch with too)."""
    return node_gpu_batch(suite.quick, [(g.name, g.memory_total_bytes) for g in gpus], suite.peaks)


def _dataparallel(world: int, env: dict, suite: Any, sized: list[str]) -> dict[str, Any]:
    """DataParallel in a probe of its own, after DDP's: a hang (NCCL's broadcast on a broken P2P
    path) or a crash is its own warning, and DDP's figures stand."""
    result = run_probe(
        ["dataparallel", str(world), probe_size(suite), *sized], env, timeout=DATAPARALLEL_TIMEOUT
    )
    data = result.data or {}
    error = result.error or data.get("dataparallel_error")
    return {"error": error, "gpus": world if suite.host.gpus else 0} if error else data


def _record_failure(
    record: Any,
    where: str,
    failed: dict | None,
    error: str | None,
    gpus: list[Any],
    world: int,
    backend: str,
) -> None:
    """`gpus`: the whole GPUs this run sees, in CUDA's order. The named fail of a job that did not
    finish: which rank (and GPU), at which stage, within which bound."""
    if not failed:
        record.add(
            f"ddp training ({where})",
            "-",
            Verdict(FAIL, "the job finishes", f"DDP probe failed: {error}"),
        )
        return
    uuids: list[str | None] = [None] * world
    if (
        backend == "nccl"
    ):  # a rank that never started cannot say its GPU: rank r runs on CUDA's GPU r
        uuids = [gpus[r].uuid if r < len(gpus) else None for r in range(world)]
    labels = rank_labels(uuids, gpus)
    named = (
        ", ".join(labels[r] for r in failed.get("ranks") or [] if r is not None and r < world)
        or "a rank"
    )
    stage = {"join": "ddp ranks joined", "run": "ddp training steps", "crash": "ddp training"}.get(
        failed.get("stage"), "ddp training"
    )
    bound = (
        f"every rank within {failed['bound']:.0f} s"
        if failed.get("bound")
        else "every rank finishes"
    )
    record.add(f"{stage} ({where})", "-", Verdict(FAIL, bound, f"{named} {failed.get('error')}"))


#: Logical CPU devices MirroredStrategy runs over on a machine without GPUs.
CPU_REPLICAS = 2


@pytest.mark.isolated
def test_tensorflow_mirrored(suite, record):
    """tf.distribute.MirroredStrategy over every GPU TensorFlow sees (NCCL all-reduce), or over
    CPU_REPLICAS logical CPU devices without GPUs: identical variables on every replica, the loss
    falls, samples/s on N and on one replica, and the efficiency. One process: a hang is the
    probe's timeout, which kills it and says so."""
    skip_quick_on_cpu(suite)
    args = ["tf-mirrored", str(CPU_REPLICAS), probe_size(suite)] + (
        [] if suite.host.gpus else ["--cpu"]
    )
    env, _ = whole_gpu_env(
        suite
    )  # on a MIG host: whole GPUs only, as DDP (NCCL does not run across MIG instances)
    result = run_probe(args, env)
    data = result.data or {}
    if data.get("missing") == "tensorflow":
        pytest.skip(f"TensorFlow is not installed here ({data['error']})")
    if result.error:
        pytest.fail(f"MirroredStrategy training failed: {result.error}", pytrace=False)
    replicas = data["replicas"]
    if replicas < 2:
        pytest.skip(
            f"MirroredStrategy needs 2 or more GPUs; TensorFlow sees {replicas} (a CPU build "
            "sees none)"
        )
    on_gpus = str(data["devices"][0]).startswith("/gpu")
    where = f"{replicas} replicas, {data['reduction']}"
    labels = [f"replica {i} ({device})" for i, device in enumerate(data["devices"])]
    record.add(
        f"tensorflow mirrored variables identical ({where})",
        f"sha256 {data['checksums'][0][:12]}... on {replicas} replicas",
        identical_verdict(data["checksums"], labels),
        seconds=result.seconds,
    )
    record.add(
        f"tensorflow mirrored training loss ({where})",
        f"{data['first_loss']:.3f} -> {data['last_loss']:.3f}",
        loss_falls_verdict(data["first_loss"], data["last_loss"]),
        seconds=0,
    )
    visible = [g for g in suite.visible_gpus() if not g.mig_enabled] if on_gpus else []
    lead = visible[0] if visible else None  # TensorFlow's /gpu:0
    model = lead.name if lead else None
    for check, rate in (
        (f"tensorflow mirrored samples/s ({where})", data["samples_per_s"]),
        (
            f"tensorflow mirrored samples/s (1 replica, {'gpu' if on_gpus else 'cpu'})",
            data["single_samples_per_s"],
        ),
    ):
        record.add(
            check,
            f"{rate:.0f} samples/s",
            throughput_verdict(check, rate, suite.baseline_for(model, check)),
            value=rate,
            seconds=0,
            gpu=lead.uuid if lead else None,
            fleet_judged=False,
        )  # the baseline judges it; other hosts' CPUs differ
    kind = interconnect_of(visible, suite.peaks)[0] if len(visible) >= 2 else None
    check = f"tensorflow mirrored scaling efficiency ({where})"
    verdict = efficiency_verdict(
        data["efficiency"], kind, replicas, load_scaling(), suite.baseline_for(model, check)
    )
    over = (
        f"over {kind}"
        if kind
        else ("replicas sharing this CPU" if not on_gpus else "interconnect unknown")
    )
    record.add(
        check,
        f"{data['efficiency']:.2f} (speedup {data['speedup']:.2f} on {replicas}; {over})",
        verdict,
        value=data["efficiency"],
        seconds=0,
        gpu=lead.uuid if lead else None,
    )
    record.finish()
