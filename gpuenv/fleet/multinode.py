"""The fleet's multi-node job: after every node ran its own suite, one Slurm job over those nodes
runs `validate.measure.multinode` with torchrun's c10d rendezvous (one process per GPU on every
node; NCCL on GPUs, gloo on CPUs): an all-reduce over every GPU (busbw as nccl-tests reports
it), each link of the ring of nodes alone, and a short DDP run.

Its result comes back as one more HostOutcome, "multi-node job (NODES)", whose report has the
suite's shape (gpuenv-validate-report/1): every renderer of the fleet report (text, JSON, JUnit,
HTML) shows it as its own row, the slowest node and link named in its reason. Scripts and
verdicts are pure functions tested on recorded output; `run_multinode` submits and waits, with
slurm.py's commands (the module that owns Slurm).

The rendezvous port. Each run takes its own, from its id: a fixed port is met by whatever an
earlier run left on it (a torchrun agent holds its store up to 300 s in its exit barrier; a killed
step can leave its container), and the new head then cannot host its store while the other agents
join the stale one. Slurm jobs take SLURM_PORTS (the job id modulo its size, computed by every
node from SLURM_JOB_ID: no node can tell another of a change), SSH runs SSH_PORTS
(sshmultinode.py): the two halves never meet, so a Slurm job and an SSH run on the same hosts (or
this project's tests, which run both on 127.0.0.1 side by side) cannot compute one port. On Slurm
the head's node script then checks its port before torchrun (a TCP connect to it on 127.0.0.1 and
on its NodeAddr, PORT_PROBE_S each): a port that answers is a named failure, exit PORT_BUSY_EXIT
with the port in its error line and log, which the job's reason shows, not a job that fails at the
rendezvous. The other nodes cannot move to another port, so the job ends there."""

from __future__ import annotations

import os
import re
import shlex
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv.fleet import slurm, slurm_job, slurm_queue
from gpuenv.fleet.fabric import busbw_floor, link_floor_records, link_name, transport_verdict
from gpuenv.fleet.outcome import (
    CANCELLED,
    FAILED,
    MULTINODE_HOST,
    MULTINODE_TEST,
    READY,
    TIMEOUT,
    HostOutcome,
    host_checks,
)
from validate.judge.scaling import CPU_MIN_SHARE, identical_verdict
from validate.judge.speed import MIN_SHARE_OF_PEERS, loss_falls_verdict
from validate.judge.verdict import FAIL, INFO, NOT_JUDGED, PASS, WARN, Verdict
from validate.report.record import Record, build_json

FOLDER = "multinode"
BATCH_SCRIPT = "multinode-job.sh"
NODE_SCRIPT = "multinode.sh"
RESULT = "result.json"
JOB_NAME = "gpuenv-multinode"
#: The rendezvous ports on the first node (torchrun's default is 29500: ours keep clear of a
#: user's job): Slurm jobs take the lower half, SSH runs the upper (the module's docstring).
SLURM_PORTS = range(29600, 29800)
SSH_PORTS = range(29800, 30000)
#: The head's node script's exit status when something already listens on the job's port.
PORT_BUSY_EXIT = 4
#: Seconds the head's check waits for one connection to its port (a free one refuses at once).
PORT_PROBE_S = 1
#: Seconds every node's agent waits at the rendezvous for the others (torchrun's join_timeout).
JOIN_TIMEOUT = 120
#: The multi-node job's own time limit when --time is not given (Slurm's minutes).
DEFAULT_TIME = "15"
SOURCE_BUSBW = "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md"


# ---------------------------------------------------------------- scripts (pure)


def rendezvous_port(job_id: str) -> int:
    """A Slurm job's rendezvous port: its id (digits) modulo SLURM_PORTS, as the node script
    computes it from SLURM_JOB_ID in shell (PORT_SHELL). Two jobs after each other (ids n and n+1)
    never share a port."""
    return SLURM_PORTS[int(job_id) % len(SLURM_PORTS)]


#: The node script's own computation of rendezvous_port from the job id (the same on every node).
PORT_SHELL = f"port=$(( {SLURM_PORTS.start} + SLURM_JOB_ID % {len(SLURM_PORTS)} ))"
#: The head's check that nothing listens on the port yet (bash's /dev/tcp, bounded by `timeout`):
#: on 127.0.0.1 (a store or service on every address or loopback) and on its NodeAddr (one bound
#: to that address alone). A connection refused, or no answer in time, is a free port.
PORT_CHECK = [
    'if [ "$is_host" = 1 ]; then',
    '    for probe in 127.0.0.1 "$addr"; do',
    f'        if timeout {PORT_PROBE_S} bash -c \': < "/dev/tcp/$1/$2"\' _ "$probe" '
    '"$port" 2>/dev/null; then',
    '            echo "the rendezvous port $port is in use on the first node $head (something '
    "listens at $probe:$port: an earlier job's torchrun agent, which keeps its store up to 300 s, "
    "or another service): see it with ss -ltnp 'sport = :$port', stop it or wait, then run "
    'again (a new job takes another port)" | tee "$out/error-$node" >&2',
    f'            echo {PORT_BUSY_EXIT} > "$out/exit-$node"',
    f"            exit {PORT_BUSY_EXIT}",
    "        fi",
    "    done",
    "fi",
]
#: The label every multi-node container carries (with the run's id), as the suite's containers do.
LABEL = "io.gpuenv.fleet"
RUN_LABEL = "io.gpuenv.fleet.run"


def sbatch_command(job: slurm_job.SlurmJob, nodes: list[str], gpus: int = 0) -> list[str]:
    """`sbatch` for one task on each of `nodes`, the nodes whose own suite ran, each whole
    (--exclusive) with the `gpus` GPUs its suite saw (slurm_job.resource_options)."""
    folder = f"{job.rundir}/{FOLDER}"
    cmd = [
        "sbatch",
        "--parsable",
        f"--job-name={JOB_NAME}",
        f"--output={folder}/slurm-%j.out",
        f"--chdir={job.rundir}",
        "--ntasks-per-node=1",
        f"--nodes={len(nodes)}",
        f"--nodelist={','.join(nodes)}",
        f"--time={job.time or DEFAULT_TIME}",
    ]
    if job.partition:
        cmd.append(f"--partition={job.partition}")
    cmd += slurm_job.resource_options(job, gpus)
    return [*cmd, *job.extra_sbatch, f"{job.rundir}/{BATCH_SCRIPT}"]


def render_batch_script(job: slurm_job.SlurmJob) -> str:
    """One srun task per node with the node's CPUs; a node that fails ends the job (the others
    would wait at the rendezvous)."""
    return (
        "#!/bin/bash\n"
        "# gpuenv multi-node job (written by gpuenv): torchrun on every node, one rendezvous.\n"
        f"exec srun --ntasks-per-node=1 {slurm_job.srun_cpus(job)} --kill-on-bad-exit=1 "
        f"bash {shlex.quote(job.rundir + '/' + NODE_SCRIPT)}\n"
    )


def ddp_sizes(suite_args: list[str]) -> str:
    """The suite's DDP sizes the nodes' own suites ran ("quick" with --quick): the job trains with
    the same, so its rate compares with the sum of theirs."""
    return "quick" if "--quick" in suite_args else "full"


def torchrun_words(python: str, out: str, sizes: str = "quick") -> str:
    """torchrun's command line on a node; $nnodes, $gpus, $addr, $port, $is_host come from the
    node script."""
    return (
        f'{python} -m torch.distributed.run --nnodes="$nnodes" --nproc-per-node="$gpus" '
        "--rdzv-backend=c10d "
        f'--rdzv-endpoint="$addr:$port" --rdzv-id="gpuenv-$SLURM_JOB_ID" '
        f'--rdzv-conf="is_host=$is_host,join_timeout={JOIN_TIMEOUT}" --max-restarts=0 '
        f"-m validate.measure.multinode --out {out} --sizes {sizes}"
    )


def render_node_script(
    job: slurm_job.SlurmJob, expect_gpus: int = 0, sys_root: str = "/sys"
) -> str:
    """What each node runs: the rendezvous address is the first node's NodeAddr (Slurm's own
    address for it), in the image with the host's network and IPC (NCCL's sockets, RDMA and shared
    memory) or from the prefix. One process per whole GPU counted where torchrun runs (inside the
    container, after --gpus; or the prefix's, after Slurm's GRES), one without GPUs; fewer than
    `expect_gpus` (what the node's own suite saw) is a named failure, not a quiet gloo job.
    The first node checks its rendezvous port first (PORT_CHECK): in use is exit PORT_BUSY_EXIT,
    naming the port, before any container.
    A node with InfiniBand/RoCE ports (/sys/class/infiniband not empty) gives the container its
    verbs devices and IPC_LOCK (NCCL's IB transport registers memory). `job.env` (invoke.yaml
    fleet.env) reaches the container (-e) and the prefix run (export). `sys_root`: /sys (a test
    gives a tree of its own)."""
    folder = shlex.quote(f"{job.rundir}/{FOLDER}")
    gpus = f"--gpus {shlex.quote(job.gpus)}"
    if job.gpus.strip().lower() == "none":
        gpus = "-e NVIDIA_VISIBLE_DEVICES=void"
    env = "".join(f"-e {shlex.quote(f'{k}={v}')} " for k, v in job.env.items())
    # As the caller (rank 0 writes result.json into the caller's run folder), named and labelled
    # with the job id: the trap removes it when the step ends or is killed, and a run's leftovers
    # can be found by label. Started in the background so a TERM runs the trap at once (bash runs
    # a trap only after a foreground command returns).
    caller = (
        f'--label {LABEL}=multinode --label {RUN_LABEL}="$SLURM_JOB_ID" '
        '-u "$(id -u):$(id -g)" -e HOME=/tmp'
    )
    image = shlex.quote(job.image or "")
    count = '-m validate.measure.multinode --count-gpus 2>"$out/count-$node.log" | tail -n 1'
    sizes = ddp_sizes(job.suite_args)
    docker = (
        f'docker run --rm --init --name "$name" {caller} --network host --ipc host '
        f"--ulimit memlock=-1 --ulimit stack=67108864 $ib {gpus} {env}"
        '-e SLURMD_NODENAME="$node" -e SLURM_JOB_ID="$SLURM_JOB_ID" '
        f'-v "$out":/gpuenv-out {image} ' + torchrun_words("python", "/gpuenv-out/" + RESULT, sizes)
    )
    infiniband = "--device=/dev/infiniband --cap-add=IPC_LOCK"
    lines = [
        "#!/bin/bash",
        "# gpuenv multi-node job, one node's part (written by gpuenv; srun starts it once per "
        "node).",
        "set -u",
        "node=${SLURMD_NODENAME:-$(hostname -s)}",
        f"out={folder}",
        'mkdir -p "$out" && : > "$out/started-$node"',
        "nnodes=${SLURM_NNODES:-1}",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "addr=$(scontrol show node \"$head\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p' | head "
        "-n 1)",
        "addr=${addr:-$head}",
        'is_host=0; [ "$node" = "$head" ] && is_host=1',
        PORT_SHELL,
        *PORT_CHECK,
        'name="gpuenv-multinode-$SLURM_JOB_ID-$node"',
        f"expected={int(expect_gpus)}",
        f"image={image}",
        f"prefix={shlex.quote(job.prefix or '')}",
        'ib=""',
        f'if [ -n "$(ls -A {shlex.quote(sys_root)}/class/infiniband 2>/dev/null)" ]; then',
        f'    ib="{infiniband}"',
        "fi",
        'if [ -n "$image" ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null '
        "2>&1; then",
        "    runner=docker",
        "    trap 'docker rm -f \"$name\" >/dev/null 2>&1' EXIT",
        "    trap 'docker rm -f \"$name\" >/dev/null 2>&1; exit 143' TERM INT",
        f"    gpus=$(docker run --rm --init {caller} {gpus} {env}{image} python {count})",
        'elif [ -n "$prefix" ] && [ -x "$prefix/bin/python" ]; then',
        "    runner=prefix",
        # The ranks' temporary files (NCCL's logs, torch's) go to a folder this script removes
        # however the step ends: a rank killed by a failure or the time limit cannot run its own
        # clean-up, and on a node without containers its /tmp folder stayed there.
        '    scratch=$(mktemp -d "${TMPDIR:-/tmp}/gpuenv-multinode-XXXXXX") && export '
        'TMPDIR="$scratch"',
        "    trap 'rm -rf \"$scratch\"' EXIT",
        '    trap \'[ -n "${child:-}" ] && kill -TERM "$child" 2>/dev/null && wait "$child"; '
        'rm -rf "$scratch"; exit 143\' TERM INT',
        *(f"    export {shlex.quote(f'{k}={v}')}" for k, v in job.env.items()),
        f'    gpus=$("$prefix/bin/python" {count})',
        "else",
        '    echo "no way to run the multi-node job here: give --image for nodes with Docker or '
        '--prefix on a shared path" > "$out/error-$node"',
        '    echo 127 > "$out/exit-$node"',
        "    exit 127",
        "fi",
        "case \"$gpus\" in ''|*[!0-9]*) gpus=0 ;; esac",
        'if [ "$gpus" -lt "$expected" ]; then',
        "    echo \"the job sees $gpus GPU(s) here where the node's own suite saw $expected: "
        "ask Slurm for them "
        '(--sbatch-arg=--gres=gpu:N if the cluster names them so) or check --gpus" > '
        '"$out/error-$node"',
        '    echo 3 > "$out/exit-$node"',
        "    exit 3",
        "fi",
        '[ "$gpus" -gt 0 ] || gpus=1',
        'if [ "$runner" = docker ]; then',
        f"    {docker} &",
        "    wait $!",
        "else",
        "    " + torchrun_words('"$prefix/bin/python"', f'"$out/{RESULT}"', sizes) + " &",
        "    child=$!",
        '    wait "$child"',
        "fi",
        "status=$?",
        'echo "$status" > "$out/exit-$node"',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- verdicts (pure)


def _peers(
    values: dict[str, float], what: str, unit: str, on_cpu: bool, fails: bool = True
) -> tuple[str, Verdict]:
    """The lowest of `values` (per node or per link) against their median, naming it; below the
    bar it fails, or only warns when `fails` is False (a figure the host's CPU sets, D19)."""
    share = CPU_MIN_SHARE if on_cpu else MIN_SHARE_OF_PEERS
    median = statistics.median(values.values())
    name = min(values, key=lambda k: values[k])
    measured = (
        f"slowest {what} {name}: {values[name]:.2f} {unit}, {values[name] / median:.2f} of the "
        f"median {median:.2f}"
    )
    threshold = f">= {share:.2f} x the median of {len(values)} {what}s" + (
        " (on CPUs)" if on_cpu else ""
    )
    if values[name] >= share * median:
        return measured, Verdict(PASS, threshold)
    reason = (
        f"{what} {name} runs at {values[name] / median:.2f} of the others' median: it drags the job"
    )
    if not fails:
        why = (
            "; warn only: a node's rate per rank is its own hardware's (its GPUs or CPUs, their "
            "power settings), which its own suite judges"
        )
        return measured, Verdict(WARN, threshold + why, reason)
    return measured, Verdict(FAIL, threshold, reason)


#: Why the job's busbw has no floor: no public fabric figure measured like it (scaling.yaml says
#: so), and a node's own all-reduce crosses only its NVLink or PCIe, faster than a network by
#: design.
BUSBW_UNJUDGED = (
    "no published fabric figure measured like this job, no --baseline: the public nccl-tests "
    "results found ran nccl-tests' own binaries under MPI; a node's own figure crosses no "
    "network, so it is shown, not a floor"
)
#: What a node's own DDP check trains (validate/checks/test_07_multigpu.py, by the names of
#: validate/measure/ddp.py): over NCCL the GPU-bound MLP sized to the GPU (review D6), with gloo on
#: CPUs the small CNN. The job trains the same on each backend (validate/measure/multinode.py
#: job_workload) and records it; its rate is like for like with theirs only where the two match.
NODE_DDP_MODEL = {"nccl": "wide_mlp", "gloo": "small_cnn"}
_NODE_DDP = re.compile(r"^ddp samples/s \((\d+) ranks, (\w+)\)$")


@dataclass(frozen=True)
class NodeRate:
    """A node's own DDP figure from its suite report: `ranks` processes with `backend`."""

    check: str
    ranks: int
    backend: str
    rate: float


def efficiency_line(
    result: dict[str, Any], node_ddp: dict[str, NodeRate]
) -> tuple[str, Verdict, float | None]:
    """(measured, verdict, value) of the job's DDP rate against the sum of the nodes' own DDP rates.

    Like for like only when every node ran the same sizes, backend, ranks and model as its part of
    the job (the model the job recorded against NODE_DDP_MODEL: a job of an older worker trained
    the small CNN over NCCL too, the nodes the MLP); else not judged, naming the node. No
    published multi-node figure exists (scaling.yaml), so the bar is the fastest node alone: a job
    slower than one of its nodes warns (the fabric sets its pace), never fails."""
    rate = float(result["ddp"]["samples_per_s"])
    sizes = result["ddp"].get("sizes")
    if sizes is None:
        return (
            "-",
            Verdict(
                NOT_JUDGED,
                "the job's DDP sizes are in its result",
                "the result does not say which sizes the job trained (an older gpuenv)",
            ),
            None,
        )
    job_model = str(result["ddp"].get("model") or "small_cnn")  # an older worker's: the CNN
    ranks_on: dict[str, int] = {}
    for r in result["ranks"]:
        ranks_on[r["node"]] = ranks_on.get(r["node"], 0) + 1
    unlike = []
    for node in result["nodes"]:
        own = node_ddp.get(node)
        if own is None:
            unlike.append(
                f"{node} has no DDP figure of its own (its suite skipped or failed the DDP check)"
            )
        elif (own.ranks, own.backend) != (ranks_on.get(node), result["backend"]):
            unlike.append(
                f"{node}'s own DDP ran {own.ranks} ranks with {own.backend}, its part of the job "
                f"{ranks_on.get(node)} with {result['backend']}"
            )
        elif NODE_DDP_MODEL.get(own.backend) != job_model:
            unlike.append(
                f"{node}'s own DDP trained {NODE_DDP_MODEL.get(own.backend, 'another model')} "
                f"over {own.backend}, the job {job_model}: samples/s of two models"
            )
    if unlike:
        return (
            "-",
            Verdict(
                NOT_JUDGED,
                "every node's own DDP figure, measured like its part of the job",
                "; ".join(unlike),
            ),
            None,
        )
    total = sum(node_ddp[n].rate for n in result["nodes"])
    efficiency = rate / total
    fastest = max(result["nodes"], key=lambda n: node_ddp[n].rate)
    slowest = min(result["nodes"], key=lambda n: node_ddp[n].rate)
    measured = (
        f"{efficiency:.2f}: {rate:.0f} samples/s over the sum of the nodes' own {total:.0f} "
        f"({', '.join(f'{n} {node_ddp[n].rate:.0f}' for n in result['nodes'])}; slowest node "
        f"alone {slowest}), both {job_model}"
        + (f" at batch {result['ddp']['batch']} per rank" if result["ddp"].get("batch") else "")
    )
    threshold = (
        f">= the fastest node alone ({fastest} {node_ddp[fastest].rate:.0f} samples/s, "
        f"{node_ddp[fastest].rate / total:.2f} of the sum); no published multi-node figure, so "
        "warn only"
    )
    if rate >= node_ddp[fastest].rate:
        return measured, Verdict(PASS, threshold), efficiency
    return (
        measured,
        Verdict(
            WARN,
            threshold,
            f"the job on {len(result['nodes'])} nodes trains slower than {fastest} alone: "
            "the fabric between the nodes sets its pace (see the slowest link)",
        ),
        efficiency,
    )


def result_records(
    result: dict[str, Any],
    node_busbw: dict[str, float],
    node_ddp: dict[str, NodeRate] | None = None,
) -> list[Record]:
    """The multi-node job's report lines from its result file (format gpuenv-multinode/1).
    `node_busbw`, `node_ddp`: each node's own all-reduce busbw and DDP rate from its suite report,
    which the job is compared with (the slowest node named)."""
    on_cpu = result.get("backend") == "gloo"
    world, nodes = int(result["world"]), list(result["nodes"])
    where = f"{world} ranks on {len(nodes)} nodes, {result['backend']}"
    ranks = result["ranks"]
    labels = [
        f"rank {r['rank']} ({r['node']}" + (f" GPU {str(r['uuid'])[:8]})" if r.get("uuid") else ")")
        for r in ranks
    ]

    def line(check: str, measured: str, verdict: Verdict, value: float | None = None) -> Record:
        # MULTINODE_TEST: the fleet report's "multigpu" column and its multi-node section
        return Record(
            check,
            None,
            measured,
            verdict.threshold,
            verdict.verdict,
            0.0,
            verdict.reason,
            value,
            MULTINODE_TEST,
        )

    out = [
        line(
            f"multi-node ranks joined ({where})",
            f"{world}/{world} after {result['join_seconds']:.1f} s",
            Verdict(PASS, f"every node within {JOIN_TIMEOUT} s (torchrun's join_timeout)"),
        )
    ]
    out.append(
        line(
            f"multi-node ddp parameters identical ({where})",
            f"sha256 {ranks[0]['checksum'][:12]}... on {world} ranks",
            identical_verdict([r["checksum"] for r in ranks], labels),
        )
    )
    first = statistics.mean(r["first_loss"] for r in ranks)
    last = statistics.mean(r["last_loss"] for r in ranks)
    out.append(
        line(
            f"multi-node ddp training loss ({where})",
            f"{first:.3f} -> {last:.3f}",
            loss_falls_verdict(first, last),
        )
    )
    links = {
        link_name(link, result.get("links") or []): float(link["gbs"])
        for link in result.get("links") or []
    }
    bus = float(result["allreduce"]["busbw_gbs"])
    text = f"{bus:.2f} GB/s over {result['allreduce']['bytes'] // 2**20} MiB"
    own = {n: node_busbw[n] for n in nodes if n in node_busbw}
    if own:
        low = min(own, key=lambda n: own[n])
        text += f"; slowest node alone {low} {own[low]:.1f} GB/s ({bus / own[low]:.2f} of it)"
    if links:
        weakest = min(links, key=lambda k: links[k])
        text += f"; slowest link {weakest} {links[weakest]:.2f} GB/s"
    floor = busbw_floor(result)
    if isinstance(floor, str):
        busbw_verdict = Verdict(
            NOT_JUDGED,
            f"busbw as nccl-tests reports it ({SOURCE_BUSBW})",
            f"{floor}; {BUSBW_UNJUDGED}",
        )
    elif bus >= floor[0]:
        busbw_verdict = Verdict(PASS, f"{floor[1]} ({SOURCE_BUSBW})")
    else:
        busbw_verdict = Verdict(
            FAIL,
            f"{floor[1]} ({SOURCE_BUSBW})",
            f"busbw {bus:.2f} GB/s is below {floor[0]:.1f} GB/s: "
            "the fabric runs far below its line rate",
        )
    out.append(line(f"multi-node all-reduce busbw GB/s ({where})", text, busbw_verdict, bus))
    transport = transport_verdict(result)
    if transport:
        out.append(line(f"multi-node fabric transport ({where})", transport[0], transport[1]))
    if links:
        measured, verdict = _peers(links, "link", "GB/s", on_cpu)
        out.append(
            line(f"multi-node slowest link ({where})", measured, verdict, min(links.values()))
        )
    against = link_floor_records(result)
    if against:
        out.append(line(f"multi-node links against their line rate ({where})", *against))
    per_node: dict[str, list[float]] = {}
    for r in ranks:
        per_node.setdefault(r["node"], []).append(float(r["local_samples_per_s"]))
    if len(per_node) >= 2:
        measured, verdict = _peers(
            {n: statistics.median(v) for n, v in per_node.items()},
            "node",
            "samples/s per rank",
            on_cpu,
            fails=False,
        )
        out.append(line(f"multi-node slowest node ({where})", measured, verdict))
    rate = float(result["ddp"]["samples_per_s"])
    out.append(
        line(
            f"multi-node ddp samples/s ({where})",
            f"{rate:.0f} samples/s",
            Verdict(INFO, "reported; judged as the efficiency below"),
            rate,
        )
    )
    measured, verdict, efficiency = efficiency_line(result, node_ddp or {})
    out.append(
        line(
            f"multi-node ddp efficiency over the nodes' own rates ({where})",
            measured,
            verdict,
            efficiency,
        )
    )
    return out


def result_problem(result: Any) -> str | None:
    """Why a result file (untrusted: written by a node) does not describe one whole job, or None:
    every rank of `world` present once, each on one of the job's nodes."""
    if not isinstance(result, dict):
        return "it is not a JSON object"
    world, nodes, ranks = result.get("world"), result.get("nodes"), result.get("ranks")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        return f"world is {world!r}, not a number of ranks"
    if not isinstance(nodes, list) or not nodes:
        return "it names no nodes"
    if not isinstance(ranks, list) or not all(isinstance(r, dict) for r in ranks):
        return "its ranks are not a list of ranks"
    seen = sorted(
        r.get("rank")
        for r in ranks
        if isinstance(r.get("rank"), int) and not isinstance(r.get("rank"), bool)
    )
    if seen != list(range(world)):
        missing = sorted(set(range(world)) - set(seen))
        shown = ", ".join(str(m) for m in missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        if missing:
            return f"{len(ranks)} of {world} ranks reported (missing rank {shown})"
        return (
            f"{len(ranks)} rank entries for a world of {world} (a rank reported twice, or out of "
            "range)"
        )
    strangers = sorted({str(r.get("node")) for r in ranks} - {str(n) for n in nodes})
    if strangers:
        return f"ranks on {', '.join(strangers[:3])}, not one of the job's nodes"
    return None


def _named(records: list[Record]) -> str:
    failed = [r for r in records if r.verdict == FAIL]
    return "; ".join(f"{r.check.split(' (')[0]}: {r.reason}" for r in failed)


def multinode_outcome(
    nodes: list[str],
    job_id: str,
    state: slurm_queue.JobState | None,
    result: dict[str, Any] | None,
    exits: dict[str, int | None],
    errors: dict[str, str],
    node_busbw: dict[str, float],
    seconds: float | None = None,
    node_ddp: dict[str, NodeRate] | None = None,
) -> HostOutcome:
    """The job as one outcome: READY when every line passed, else the failing lines (or which
    node never started, exited badly, or timed out) in its reason."""
    host = f"{MULTINODE_HOST} ({','.join(nodes)})"
    details: dict[str, Any] = {
        "job_id": job_id,
        "job_state": state.state if state else "UNKNOWN",
        "nodes": nodes,
    }
    bad = {n: code for n, code in exits.items() if code not in (None, 0)}
    if result is not None:
        # a result file proves only what rank 0 saw: a node killed after it (exit 137: the OOM
        # killer, a scheduler) or a result short of ranks is not a job that ran whole
        problem = result_problem(result)
        if problem is None and bad:
            problem = "; ".join(
                f"{n} exited "
                f"{code}{' (killed: SIGKILL, often the OOM killer)' if code == 137 else ''}"
                for n, code in bad.items()
            )
        if problem is not None:
            return HostOutcome(
                host,
                FAILED,
                f"the multi-node result is not a whole job: {problem}",
                seconds=seconds,
                details=details,
            )
        try:
            records = result_records(result, node_busbw, node_ddp)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, IndexError) as err:
            return HostOutcome(
                host,
                FAILED,
                f"the multi-node result cannot be read ({type(err).__name__}: {err})",
                seconds=seconds,
                details=details,
            )
        report = build_json(
            records,
            {"multinode": True, "nodes": nodes},
            [],
            {"torch": {"backend": result.get("backend")}},
            0,
        )
        report["multinode"] = result
        failed = _named(records)
        details["slowest"] = [
            r.measured for r in records if "slowest" in r.check or "efficiency" in r.check
        ]
        return HostOutcome(
            host,
            FAILED if failed else READY,
            failed,
            report=report,
            seconds=seconds,
            details=details,
        )
    never = [n for n in nodes if exits.get(n) is None]
    parts = [f"{n}: {errors[n]}" for n in nodes if n in errors]
    parts += [f"{n} exited {code}" for n, code in bad.items() if n not in errors]
    if state is not None and state.state == "TIMEOUT":
        status = TIMEOUT
        parts.append(
            f"job {job_id} reached its time limit"
            + (f" while {', '.join(never)} had not finished" if never else "")
        )
    elif state is not None and state.state in ("CANCELLED", "PREEMPTED"):
        status = CANCELLED
        parts.append(f"job {job_id} was {state.state.lower()}")
    else:
        status = FAILED
        if never:
            parts.append(f"{', '.join(never)} wrote no exit status")
    return HostOutcome(
        host,
        status,
        "; ".join(parts) or f"job {job_id} wrote no result",
        seconds=seconds,
        details=details,
    )


def node_busbw(outcomes: list[HostOutcome]) -> dict[str, float]:
    """Each node's own NCCL all-reduce busbw from its suite report, where it measured one."""
    out = {}
    for outcome in outcomes:
        for check in ((outcome.report or {}).get("host") or {}).get("checks") or []:
            if str(check.get("check", "")).startswith("nccl all-reduce busbw") and isinstance(
                check.get("value"), (int, float)
            ):
                out[outcome.host] = float(check["value"])
    return out


def node_ddp_rates(outcomes: list[HostOutcome]) -> dict[str, NodeRate]:
    """Each node's own DDP samples/s on all its GPUs (or CPU ranks) from its suite report, where it
    measured one (filed under the GPU of rank 0, or host-wide without GPUs)."""
    out = {}
    for outcome in outcomes:
        for check in host_checks(outcome):
            match = _NODE_DDP.match(str(check.get("check", "")))
            if match and isinstance(check.get("value"), (int, float)) and check["value"] > 0:
                out[outcome.host] = NodeRate(
                    check["check"], int(match.group(1)), match.group(2), float(check["value"])
                )
    return out


# ---------------------------------------------------------------- running (I/O)


def suite_gpus(outcome: HostOutcome) -> int:
    """The whole GPUs (MIG mode left out: NCCL does not run across MIG instances) the node's own
    suite saw through NVML; 0 without GPUs or a report."""
    gpus = (((outcome.report or {}).get("host") or {}).get("nvml") or {}).get("gpus")
    if not isinstance(gpus, list):
        return 0
    return sum(1 for g in gpus if isinstance(g, dict) and not g.get("mig_enabled"))


def job_gpus(outcomes: list[HostOutcome], gpus: str = "all") -> int:
    """GPUs per node the job asks Slurm for and expects to see: the fewest whole GPUs a node's
    suite saw, or as many as `--gpus 0,1` names; 0 with `--gpus none` or CPU nodes."""
    if gpus.strip().lower() == "none":
        return 0
    seen = min((suite_gpus(o) for o in outcomes), default=0)
    if gpus.strip().lower() != "all":
        return min(seen, len(gpus.split(","))) if seen else 0
    return seen


def write_scripts(job: slurm_job.SlurmJob, expect_gpus: int = 0) -> None:
    from validate.writing import write_text_atomic

    (Path(job.rundir) / FOLDER).mkdir(parents=True, exist_ok=True)
    write_text_atomic(Path(job.rundir) / BATCH_SCRIPT, render_batch_script(job))
    write_text_atomic(Path(job.rundir) / NODE_SCRIPT, render_node_script(job, expect_gpus))


#: An exit-NODE file holds one exit status ("0\n"); more is not one.
MAX_EXIT_BYTES = 64
#: An error-NODE file is a line or a few; only its first 300 characters are shown.
MAX_ERROR_BYTES = 64 * 1024
#: rank 0's result.json: a few hundred bytes per rank, and a few levels deep.
MAX_RESULT_BYTES = 4 * 1024 * 1024
MAX_RESULT_DEPTH = 16


def read_result(
    folder: Path, nodes: list[str]
) -> tuple[dict[str, Any] | None, dict[str, int | None], dict[str, str]]:
    """(rank 0's result or None, each node's exit status, each node's error line).

    The nodes wrote these files, so they are untrusted input and go through the one bounded
    reader (validate.reading): a FIFO, a link to /dev/zero or out of the folder, a huge, deep or
    many-digit file spoils only its node's part (rank 0's, the first node's, for result.json),
    as a one-line reason in that node's error; it never hangs or ends the fleet run."""
    from validate.reading import InputRefused, decode_input, load_json_input, read_input
    from validate.text import safe_text

    def read(name: str, limit: int) -> str | None:
        path = folder / name
        if not os.path.lexists(path):
            return None
        return decode_input(read_input(path, limit, within=folder))

    exits: dict[str, int | None] = {}
    errors: dict[str, str] = {}
    for node in nodes:
        reasons = []
        exits[node] = None
        try:
            text = (read(f"exit-{node}", MAX_EXIT_BYTES) or "").strip()
            if re.fullmatch(r"-?[0-9]{1,10}", text):
                exits[node] = int(text)
            elif text:
                reasons.append(
                    f"exit-{safe_text(node, limit=60)} holds {safe_text(text, limit=20)!r}, not "
                    "an exit status"
                )
        except InputRefused as err:
            reasons.append(f"exit-{safe_text(node, limit=60)} refused: {err}")
        try:
            error = read(f"error-{node}", MAX_ERROR_BYTES)
            if error is not None and error.strip():
                reasons.insert(0, safe_text(" ".join(error.split()), limit=300))
        except InputRefused as err:
            reasons.append(f"error-{safe_text(node, limit=60)} refused: {err}")
        if reasons:
            errors[node] = "; ".join(reasons)
    result = None
    try:
        text = read(RESULT, MAX_RESULT_BYTES)
        result = None if text is None else load_json_input(text, max_depth=MAX_RESULT_DEPTH)
    except InputRefused as err:
        if nodes:
            errors[nodes[0]] = "; ".join(
                filter(None, (errors.get(nodes[0]), f"{RESULT} refused: {err}"))
            )
    return (result if isinstance(result, dict) else None), exits, errors


def run_multinode(
    job: slurm_job.SlurmJob, outcomes: list[HostOutcome], say: slurm.Progress, poll_s: float = 2.0
) -> HostOutcome | None:
    """Submit the multi-node job over the nodes whose own suite ran, wait for it within its time
    limit (plus the queue time), and return its outcome; None when fewer than two nodes ran."""
    ran = [o for o in outcomes if o.report is not None]
    nodes = [o.host for o in ran]
    if len(nodes) < 2:
        return None
    gpus = job_gpus(ran, job.gpus)
    write_scripts(job, gpus)
    proc = slurm_job.run_slurm(sbatch_command(job, nodes, gpus))
    if proc.returncode != 0:
        return HostOutcome(
            f"{MULTINODE_HOST} ({','.join(nodes)})",
            FAILED,
            f"sbatch refused the multi-node job: {proc.stderr.strip()[:300]}",
        )
    job_id = slurm_job.parse_sbatch(proc.stdout)
    say(f"multi-node job {job_id}", "queued", f"{len(nodes)} nodes: {','.join(nodes)}")
    limit = (slurm_job.limit_seconds(job.time or DEFAULT_TIME) or 3600.0) + (
        slurm_job.limit_seconds(job.queue_time or slurm_job.DEFAULT_QUEUE_TIME, unlimited=False)
        or 3600.0
    )
    started = time.monotonic()
    state = None
    try:
        while time.monotonic() - started < limit:
            state = slurm_queue.query(job_id)
            if state is None or state.final:
                break
            time.sleep(poll_s)
        else:
            slurm_queue.cancel(job_id)
    except KeyboardInterrupt as interrupt:
        ok = slurm_queue.cancel(job_id)
        interrupt.cleanup = (
            f"cancelled multi-node job {job_id} (scancel)"
            if ok
            else f"could NOT cancel job {job_id}: scancel {job_id}"
        )  # type: ignore[attr-defined]
        raise
    result, exits, errors = read_result(Path(job.rundir) / FOLDER, nodes)
    outcome = multinode_outcome(
        nodes,
        job_id,
        state,
        result,
        exits,
        errors,
        node_busbw(outcomes),
        round(time.monotonic() - started, 2),
        node_ddp_rates(outcomes),
    )
    outcome.details["log"] = f"{job.rundir}/{FOLDER}/slurm-{job_id}.out"
    say(f"multi-node job {job_id}", "done", outcome.status)
    return outcome
