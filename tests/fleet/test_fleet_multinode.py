"""The fleet's multi-node job (gpuenv/fleet/multinode.py).

Pure parts on recorded output: the scripts, and the outcome from a real two-node gloo result
(tests/fleet/fixtures/multinode/result-gloo-2nodes.json, written by validate.measure.multinode
under torchrun) and from edited copies of it (a slow link, a slow node, differing parameters), or
from a job that left no result. For real: a two-node Slurm cluster on loopback (two slurmd on
127.0.0.1, `slurmd -N`), each node's suite from a prefix, then the multi-node job: torchrun's c10d
rendezvous across the two nodes, gloo, and the fleet report's row for it."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
import servers

from gpuenv.fleet import multinode, slurm, slurm_job, slurm_queue
from gpuenv.fleet.outcome import FAILED, READY, TIMEOUT, HostOutcome
from gpuenv.fleet.report import analysis, jsonreport, junitreport, terminal

FIXTURE = Path(__file__).parent / "fixtures" / "multinode" / "result-gloo-2nodes.json"
PREFIX = Path(sys.prefix)


@pytest.fixture
def result() -> dict:
    return json.loads(FIXTURE.read_text())


def job(**kw) -> slurm_job.SlurmJob:
    return slurm_job.SlurmJob(rundir="/shared/run", prefix="/shared/env", **kw)


def test_the_node_script_runs_torchrun_with_one_rendezvous_on_the_first_node():
    script = multinode.render_node_script(job(image="reg/gpuenv/x@sha256:" + "a" * 64))
    assert (
        "--rdzv-backend=c10d" in script
        and '--rdzv-endpoint="$addr:$port"' in script
        and multinode.PORT_SHELL in script
    )
    assert "NodeAddr=" in script and 'is_host=0; [ "$node" = "$head" ] && is_host=1' in script
    assert (
        "--network host --ipc host" in script and "--gpus all" in script
    )  # NCCL's sockets and shared memory
    assert (
        '"$prefix/bin/python" -m torch.distributed.run' in script
        and "-m validate.measure.multinode" in script
    )
    assert "--sizes full" in script  # the suite's sizes the nodes ran, so the rates compare
    assert "--sizes quick" in multinode.render_node_script(job(suite_args=["--quick"]))
    batch = multinode.render_batch_script(job())
    assert "--kill-on-bad-exit=1" in batch and "/shared/run/multinode.sh" in batch
    cmd = multinode.sbatch_command(job(partition="gpu"), ["gpu01", "gpu02"])
    assert "--nodes=2" in cmd and "--nodelist=gpu01,gpu02" in cmd and "--partition=gpu" in cmd


def test_each_job_takes_its_own_rendezvous_port_the_same_on_every_node():
    """A fixed port is met by what an earlier job left on it (torchrun's exit barrier holds a
    store up to 300 s): each job's port comes from its id, computed alike in Python and by the
    node script's shell from SLURM_JOB_ID."""
    import subprocess

    ports = {job_id: multinode.rendezvous_port(job_id) for job_id in ("41", "42", "43", "1000141")}
    assert len(set(ports.values())) == 4 and all(p in multinode.SLURM_PORTS for p in ports.values())
    for job_id, port in ports.items():
        shell = subprocess.run(
            ["bash", "-c", f'{multinode.PORT_SHELL}; echo "$port"'],
            env={"SLURM_JOB_ID": job_id},
            capture_output=True,
            text=True,
            check=True,
        )
        assert int(shell.stdout) == port


def test_slurm_jobs_and_ssh_runs_never_compute_one_port():
    """The test command runs the Slurm multi-node test (a fresh cluster: jobs 1, 2, ...) beside
    the SSH one (a random run id), all on 127.0.0.1, and a site can run both on the same hosts:
    each backend has its own half of the range, whatever its ids (an SSH run id of digits too)."""
    from gpuenv.fleet import sshmultinode

    assert not set(multinode.SLURM_PORTS) & set(multinode.SSH_PORTS)
    slurm_ports = {multinode.rendezvous_port(str(job_id)) for job_id in range(1, 1000)}
    assert slurm_ports == set(multinode.SLURM_PORTS)
    ssh_ports = {
        port
        for run_id in ("cac28fba936a", "63763ef6ea62", "123456789012", "000000000000")
        for port in sshmultinode.rendezvous_ports(run_id)
    }
    assert ssh_ports <= set(multinode.SSH_PORTS) and len(ssh_ports) > 4
    assert sshmultinode.rendezvous_ports("cac28fba936a") != sshmultinode.rendezvous_ports(
        "63763ef6ea62"
    )


def fake_tools(folder: Path, gpus: int = 0) -> dict[str, str]:
    """A PATH whose docker, scontrol and nvidia-smi record their arguments (docker run waits, as a
    job's container does), and the environment srun gives a node's task. scontrol makes n1 the
    head, its NodeAddr 127.0.0.2: a head's NodeAddr is its own address (its port check connects
    to it), and 127.0.0.0/8 is this machine's."""
    bin_ = folder / "bin"
    bin_.mkdir()
    calls = folder / "calls"
    (bin_ / "docker").write_text(
        f'#!/bin/bash\necho "docker $*" >> {calls}\ncase "$*" in *--count-gpus*) echo {gpus}; '
        'exit 0 ;; esac\n[ "$1" = run ] && exec sleep 60\nexit 0\n'
    )
    (bin_ / "scontrol").write_text(
        '#!/bin/bash\n[ "$2" = hostnames ] && echo n1 && exit 0\n'
        'echo "NodeName=n1 NodeAddr=127.0.0.2 State=IDLE"\n'
    )
    (bin_ / "nvidia-smi").write_text(
        "#!/bin/bash\n"
        + "".join(f'echo "GPU {i}: NVIDIA H100 (UUID: GPU-{i})"\n' for i in range(gpus))
        + ("" if gpus else 'echo "No devices were found"; exit 6\n')
    )
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    import os

    return {
        "PATH": f"{bin_}:{os.environ['PATH']}",
        "SLURMD_NODENAME": "n1",
        "SLURM_JOB_ID": "42",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }


def test_a_killed_step_removes_its_container_which_runs_as_the_caller_named_and_labelled(tmp_path):
    """D8: the node's container runs as the caller (rank 0 writes into the caller's run folder),
    carries the job's label and name, and a TERM to the step (Slurm's time limit, a node that
    failed) removes it at once: no container is left holding the rendezvous port or the GPUs."""
    import os
    import signal
    import subprocess
    import time

    rundir = tmp_path / "run"
    rundir.mkdir()
    script = tmp_path / "multinode.sh"
    script.write_text(
        multinode.render_node_script(slurm_job.SlurmJob(rundir=str(rundir), image="reg/gpuenv/x:1"))
    )
    env = fake_tools(tmp_path)
    proc = subprocess.Popen(["bash", str(script)], env=env, start_new_session=True)
    calls = tmp_path / "calls"
    deadline = time.monotonic() + 20
    while (
        "--name" not in (calls.read_text() if calls.exists() else "")
        and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    run = next(
        line
        for line in calls.read_text().splitlines()
        if line.startswith("docker run") and "--name" in line
    )
    assert f"-u {os.getuid()}:{os.getgid()}" in run and "-e HOME=/tmp" in run
    assert "--name gpuenv-multinode-42-n1" in run and "--label io.gpuenv.fleet.run=42" in run
    assert "--rdzv-endpoint=127.0.0.2:" + str(multinode.rendezvous_port("42")) in run
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 143
    assert "docker rm -f gpuenv-multinode-42-n1" in calls.read_text()
    os.killpg(proc.pid, signal.SIGKILL)  # the fake container's sleep


def node_beside_a_listener(tmp_path: Path, where: str, node: str = "n1"):
    """The node script under bash as `node` (n1 is the head) while this test listens on its job's
    port at `where`, with recording tools whose job container exits at once (so without a check
    the script ends 0): (the finished process, the port, the job id)."""
    import socket
    import subprocess

    env = fake_tools(tmp_path)
    (tmp_path / "bin" / "docker").write_text(
        f'#!/bin/bash\necho "docker $*" >> {tmp_path / "calls"}\nexit 0\n'
    )
    script = tmp_path / "multinode.sh"
    job = slurm_job.SlurmJob(rundir=str(tmp_path / "run"), image="reg/gpuenv/x:1")
    script.write_text(multinode.render_node_script(job))
    with socket.socket() as listener:
        for job_id in range(42, 242):  # a job whose port nothing else here holds
            try:
                listener.bind((where, multinode.rendezvous_port(str(job_id))))
                break
            except OSError:
                continue
        listener.listen()
        proc = subprocess.run(
            ["bash", str(script)],
            env={**env, "SLURM_JOB_ID": str(job_id), "SLURMD_NODENAME": node},
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc, listener.getsockname()[1], str(job_id)


@pytest.mark.parametrize("where", ["127.0.0.1", "127.0.0.2"])
def test_the_head_names_its_port_in_use_and_starts_nothing(tmp_path, where):
    """Something listening on the job's port on the first node (an earlier job's torchrun agent in
    its exit barrier, another service) would take the head's store while the other agents joined
    it. The head's script finds it, on loopback or on its NodeAddr (127.0.0.2 in fake_tools), and
    exits PORT_BUSY_EXIT naming the port before any container; the job's reason is that line."""
    proc, port, job_id = node_beside_a_listener(tmp_path, where)
    assert proc.returncode == multinode.PORT_BUSY_EXIT, (proc.returncode, proc.stderr)
    assert not (tmp_path / "calls").exists()  # no container, not even the GPU count's
    named = (
        f"the rendezvous port {port} is in use on the first node n1 (something listens at "
        f"{where}:{port}"
    )
    assert proc.stderr.splitlines()[-1].startswith(named)  # the step's log (slurm-JOB.out)
    assert "ss -ltnp 'sport = :" + str(port) + "'" in proc.stderr
    result, exits, errors = multinode.read_result(tmp_path / "run" / "multinode", ["n1", "n2"])
    state = slurm_queue.JobState(job_id, "FAILED")
    outcome = multinode.multinode_outcome(["n1", "n2"], job_id, state, result, exits, errors, {})
    assert outcome.status == FAILED and outcome.reason.startswith(f"n1: {named}")
    assert "\n" not in outcome.reason and exits["n1"] == multinode.PORT_BUSY_EXIT


def test_only_the_head_checks_the_port(tmp_path):
    """The other nodes host nothing: a node that is not the head goes on to torchrun whatever
    listens on the port here (on one machine, the head's own store)."""
    proc, _, _ = node_beside_a_listener(tmp_path, "127.0.0.1", node="n2")
    assert proc.returncode == 0, proc.stderr
    assert "--rdzv-conf=is_host=0," in (tmp_path / "calls").read_text()


def run_node(tmp_path: Path, script: str, gpus: int) -> tuple[int, str, str]:
    """The node script under bash with recording tools whose container sees `gpus` GPUs and whose
    job container exits at once: (exit status, the recorded calls, the node's error file)."""
    import subprocess

    env = fake_tools(tmp_path, gpus)
    (tmp_path / "bin" / "docker").write_text(
        f'#!/bin/bash\necho "docker $*" >> {tmp_path / "calls"}\n'
        f'case "$*" in *--count-gpus*) echo {gpus} ;; esac\nexit 0\n'
    )
    path = tmp_path / "multinode.sh"
    path.write_text(script)
    code = subprocess.run(["bash", str(path)], env=env, timeout=30).returncode
    error = tmp_path / "run" / "multinode" / "error-n1"
    return code, (tmp_path / "calls").read_text(), error.read_text() if error.exists() else ""


def test_ranks_per_node_are_the_gpus_the_container_sees_and_none_where_the_suite_saw_some_fails(
    tmp_path,
):
    """D13: `--gpus 0,1` on an 8-GPU node starts 2 ranks (counted inside the container, not by the
    host's nvidia-smi); D7: a step that sees no GPU where the node's suite saw 8 (a GRES-managed
    rack given no GPUs) is a named failure, not a quiet gloo job on CPUs."""
    job = slurm_job.SlurmJob(
        rundir=str(tmp_path / "run"),
        image="reg/gpuenv/x:1",
        gpus="0,1",
        env={"NCCL_SOCKET_IFNAME": "ib0"},
    )
    code, calls, error = run_node(
        tmp_path, multinode.render_node_script(job, expect_gpus=2), gpus=2
    )
    run = next(line for line in calls.splitlines() if "--name" in line)
    assert code == 0 and "--nproc-per-node=2" in run and "--gpus 0,1" in run, calls
    assert "-e NCCL_SOCKET_IFNAME=ib0" in run  # D9: invoke.yaml's fleet.env reaches the container
    assert (
        "--count-gpus" in calls.splitlines()[1]
        and "-e NCCL_SOCKET_IFNAME=ib0" in calls.splitlines()[1]
    )
    (tmp_path / "calls").unlink()
    (tmp_path / "bin").rename(tmp_path / "bin-old")
    code, calls, error = run_node(
        tmp_path, multinode.render_node_script(job, expect_gpus=8), gpus=0
    )
    assert code == 3 and "--name" not in calls
    assert error.startswith("the job sees 0 GPU(s) here where the node's own suite saw 8")


def test_a_node_with_infiniband_gives_the_container_its_devices(tmp_path):
    """D1: /sys/class/infiniband not empty (a fake sysfs tree here) adds the verbs devices and
    IPC_LOCK to the job's container; a node without it gets neither."""
    (tmp_path / "sys" / "class" / "infiniband" / "mlx5_0").mkdir(parents=True)
    job = slurm_job.SlurmJob(rundir=str(tmp_path / "run"), image="reg/gpuenv/x:1")
    code, calls, _ = run_node(
        tmp_path, multinode.render_node_script(job, sys_root=str(tmp_path / "sys")), gpus=0
    )
    run = next(line for line in calls.splitlines() if "--name" in line)
    assert code == 0 and "--device=/dev/infiniband --cap-add=IPC_LOCK" in run
    (tmp_path / "calls").unlink()
    (tmp_path / "bin").rename(tmp_path / "bin-old")
    code, calls, _ = run_node(
        tmp_path, multinode.render_node_script(job, sys_root=str(tmp_path / "none")), gpus=0
    )
    assert code == 0 and "--device=/dev/infiniband" not in calls and "IPC_LOCK" not in calls


def test_the_jobs_ask_slurm_for_whole_nodes_their_gpus_and_cpus():
    """D7: --exclusive (a container from dockerd takes GPUs outside the job's cgroup), the GPUs
    the node suites saw (a GRES rack gives none unasked), srun's own --cpus-per-task (22.05 on it
    no longer inherits sbatch's), and the user's own sbatch options."""
    cmd = multinode.sbatch_command(job(extra_sbatch=["--account=ml"]), ["gpu01", "gpu02"], gpus=8)
    assert "--exclusive" in cmd and "--gpus-per-node=8" in cmd and cmd[-2] == "--account=ml"
    assert "--gpus-per-node" not in " ".join(multinode.sbatch_command(job(), ["a", "b"], gpus=0))
    assert '--cpus-per-task="${SLURM_CPUS_ON_NODE:-1}"' in multinode.render_batch_script(job())
    pinned = job(cpus_per_task=16)
    assert "--cpus-per-task=16" in multinode.sbatch_command(
        pinned, ["a", "b"]
    ) and "--cpus-per-task=16" in multinode.render_batch_script(pinned)
    suite = slurm_job.sbatch_command(job(nodes=2, suite_args=["--expect-gpus", "8"]))
    assert "--exclusive" in suite and "--gpus-per-node=8" in suite
    assert "--cpus-per-task" in slurm_job.render_batch_script(job())
    # the suite's own container and prefix run get invoke.yaml's fleet.env too
    env = job(image="reg/x:1", env={"NCCL_IB_HCA": "mlx5_0,mlx5_1"})
    assert "-e NCCL_IB_HCA=mlx5_0,mlx5_1" in slurm_job.render_node_script(
        env
    ) and "export NCCL_IB_HCA=mlx5_0,mlx5_1" in slurm_job.render_node_script(env)
    from gpuenv.fleet.outcome import HostOutcome as Outcome
    from validate.report.record import build_json

    def node(gpus: list[dict]) -> Outcome:
        return Outcome(
            "n", READY, "", report=build_json([], {"gpus": gpus, "error": None}, [], {}, 0)
        )

    eight = node([{"index": i, "uuid": f"GPU-{i}"} for i in range(8)])
    mig = node(
        [
            {"index": 0, "uuid": "GPU-0", "mig_enabled": True},
            {"index": 1, "uuid": "GPU-1", "mig_enabled": False},
        ]
    )
    assert multinode.job_gpus([eight, eight]) == 8 and multinode.job_gpus([eight, mig]) == 1
    assert (
        multinode.job_gpus([eight, eight], "0,1") == 2 and multinode.job_gpus([eight], "none") == 0
    )


def test_a_healthy_result_is_ready_with_its_rows(result):
    outcome = multinode.multinode_outcome(
        ["node0", "node1"], "7", None, result, {}, {}, {"node0": 1.5}
    )
    assert outcome.status == READY, outcome.reason
    rows = {c.split(" (")[0]: c for c in (r["check"] for r in outcome.report["host"]["checks"])}
    assert {
        "multi-node ranks joined",
        "multi-node ddp parameters identical",
        "multi-node all-reduce busbw GB/s",
        "multi-node slowest link",
        "multi-node slowest node",
        "multi-node ddp training loss",
    } <= set(rows)
    busbw = next(
        r
        for r in outcome.report["host"]["checks"]
        if r["check"].startswith("multi-node all-reduce")
    )
    assert busbw["verdict"] == "not judged" and busbw["value"] == result["allreduce"]["busbw_gbs"]
    assert "slowest node alone node0 1.5 GB/s (0.24 of it)" in busbw["measured"]  # 0.36 / 1.5
    assert (
        "slowest link node0 -> node1 1.23 GB/s" in busbw["measured"]
        and "nccl-tests' own binaries" in busbw["reason"]
    )


def two_by_two(
    result: dict, rates: tuple[float, float], job_rate: float, backend: str = "gloo"
) -> dict:
    """The recorded result made a 2-node x 2-rank job (each node's rank copied as a second local
    rank), its DDP rate set; `rates` are each node's ranks' own compute rates."""
    out = copy.deepcopy(result)
    out["backend"], out["world"] = backend, 4
    out["links"] = [
        {**link, "gbs": 20.0} for link in out["links"]
    ]  # healthy links: only the rates differ
    ranks = []
    for rank in result["ranks"]:
        for local in (0, 1):
            ranks.append(
                {
                    **rank,
                    "rank": len(ranks),
                    "local_rank": local,
                    "uuid": f"GPU-{rank['node']}-{local}",
                    "local_samples_per_s": rates[result["ranks"].index(rank)],
                }
            )
    out["ranks"] = ranks
    out["ddp"] = {**out["ddp"], "samples_per_s": job_rate, "sizes": "quick"}
    return out


def own(rate: float, backend: str = "gloo") -> multinode.NodeRate:
    return multinode.NodeRate(f"ddp samples/s (2 ranks, {backend})", 2, backend, rate)


def efficiency_row(outcome: HostOutcome) -> dict:
    return next(
        r
        for r in outcome.report["host"]["checks"]
        if r["check"].startswith("multi-node ddp efficiency")
    )


def test_the_job_rate_is_judged_against_the_sum_of_the_nodes_own_rates(result):
    job = two_by_two(result, (3000.0, 3000.0), 9000.0)
    outcome = multinode.multinode_outcome(
        ["node0", "node1"],
        "7",
        None,
        job,
        {},
        {},
        {},
        node_ddp={"node0": own(6000.0), "node1": own(5000.0)},
    )
    row = efficiency_row(outcome)
    assert (
        row["check"]
        == "multi-node ddp efficiency over the nodes' own rates (4 ranks on 2 nodes, gloo)"
    )
    assert row["verdict"] == "pass" and row["value"] == 9000.0 / 11000.0
    assert row["measured"].startswith(
        "0.82: 9000 samples/s over the sum of the nodes' own 11000 (node0 6000, node1 5000; "
        "slowest node alone node1)"
    )
    assert "fastest node alone (node0 6000 samples/s" in row["threshold"]
    # slower than one of its nodes alone: the fabric sets the pace; a warning, so the job stays
    # ready
    slow = multinode.multinode_outcome(
        ["node0", "node1"],
        "7",
        None,
        two_by_two(result, (3000.0, 3000.0), 4000.0),
        {},
        {},
        {},
        node_ddp={"node0": own(6000.0), "node1": own(5000.0)},
    )
    row = efficiency_row(slow)
    assert (
        row["verdict"] == "warn"
        and "trains slower than node0 alone" in row["reason"]
        and slow.status == READY
    )


def test_a_rank_trains_what_its_nodes_own_ddp_check_trains_on_its_backend():
    """Review D6 for the job: over NCCL a rank trains the node suite's GPU-bound MLP (ddp.py
    GPU_MODEL at the sizes) at the node's own per-GPU batch, not the launch-bound small CNN; with
    gloo on CPUs the small CNN at SIZES, as a CPU node's suite does. Its model is the one the
    fleet expects of a node on that backend (NODE_DDP_MODEL)."""
    from validate.measure import ddp
    from validate.measure import multinode as worker

    assert worker.job_workload("nccl", "full", 4096) == {
        "model": "wide_mlp",
        "width": 2048,
        "depth": 6,
        "batch": 4096,
    }
    quick = worker.job_workload("nccl", "quick", 512)
    assert (quick["width"], quick["depth"], quick["batch"]) == (*ddp.GPU_MODEL["quick"], 512)
    steps, batch, image = ddp.SIZES["quick"]
    assert worker.job_workload("gloo", "quick", 0) == {
        "model": "small_cnn",
        "image": image,
        "batch": batch,
        "steps": steps,
    }
    # a CPU node's suite trains the quick sizes in the full suite too (test_07 probe_size)
    assert worker.job_workload("gloo", "full", 0) == worker.job_workload("gloo", "quick", 0)
    for backend in ("nccl", "gloo"):
        model = worker.job_workload(backend, "full", 1024)["model"]
        assert model == multinode.NODE_DDP_MODEL[backend] and callable(getattr(ddp, model))
    with pytest.raises(ValueError, match="batch must be positive, not 0"):
        worker.job_workload("nccl", "full", 0)  # a GPU rank never falls back to the CNN quietly


def test_the_job_and_the_nodes_size_the_gpu_batch_with_one_rule():
    """The node's suite (test_07 gpu_batch_for) and the job's ranks (node_gpu_batch) size the
    MLP's batch from the same GPUs alike: the slowest GPU's measured fp32 reference and the
    smallest memory; a GPU without a reference takes ddp.py's default rate."""
    from types import SimpleNamespace

    from validate.checks.test_07_multigpu import gpu_batch_for
    from validate.judge.peaks import load_peaks, peaks_for
    from validate.measure import ddp

    peaks = load_peaks()
    l4 = peaks_for("NVIDIA L4", peaks).reference_for("fp32_tflops").value
    gpus = [("NVIDIA H100 80GB HBM3", 85899345920), ("NVIDIA L4", 24146608128)]
    for quick in (True, False):
        want = ddp.gpu_batch(quick, l4, 24146608128)
        assert ddp.node_gpu_batch(quick, gpus, peaks) == want
        suite = SimpleNamespace(quick=quick, peaks=peaks)
        listed = [SimpleNamespace(name=n, memory_total_bytes=m) for n, m in gpus]
        assert gpu_batch_for(listed, suite) == want
    unknown = [("NVIDIA H100 80GB HBM3", 85899345920), ("Some New GPU", 85899345920)]
    assert ddp.node_gpu_batch(False, unknown, peaks) == ddp.gpu_batch(False, None, 85899345920)


def mlp_job(result: dict, model: str) -> dict:
    """two_by_two over NCCL, the DDP section as the worker writes it for `model`."""
    from validate.measure import multinode as worker

    job = two_by_two(result, (3000.0, 3000.0), 9000.0, backend="nccl")
    work = (
        worker.job_workload("nccl", "quick", 1024)
        if model == "wide_mlp"
        else {"model": model, "image": 16, "batch": 32}
    )
    job["ddp"] = {**job["ddp"], **work, "sizes": "quick"}
    return job


def test_on_gpus_the_jobs_mlp_rate_is_judged_against_the_nodes_mlp_rates(result):
    """Over NCCL the job trains the nodes' own MLP, so its efficiency is judged (0.82 of the sum:
    pass, naming the model and batch). A result of an older worker, which trained the small CNN
    there, compares two models' samples/s: not judged, naming both."""
    nodes = {"node0": own(6000.0, "nccl"), "node1": own(5000.0, "nccl")}
    row = efficiency_row(
        multinode.multinode_outcome(
            ["node0", "node1"], "7", None, mlp_job(result, "wide_mlp"), {}, {}, {}, node_ddp=nodes
        )
    )
    assert row["verdict"] == "pass" and row["value"] == 9000.0 / 11000.0, row
    assert row["measured"].endswith(
        "slowest node alone node1), both wide_mlp at batch 1024 per rank"
    )
    old = efficiency_row(
        multinode.multinode_outcome(
            ["node0", "node1"], "7", None, mlp_job(result, "small_cnn"), {}, {}, {}, node_ddp=nodes
        )
    )
    assert old["verdict"] == "not judged" and old.get("value") is None, old
    assert (
        "node0's own DDP trained wide_mlp over nccl, the job small_cnn: samples/s of two models"
        in old["reason"]
    )


def test_the_efficiency_is_not_judged_when_a_node_has_no_like_figure(result):
    job = two_by_two(result, (3000.0, 3000.0), 9000.0)
    missing = efficiency_row(
        multinode.multinode_outcome(
            ["node0", "node1"], "7", None, job, {}, {}, {}, node_ddp={"node0": own(6000.0)}
        )
    )
    assert (
        missing["verdict"] == "not judged"
        and "node1 has no DDP figure of its own" in missing["reason"]
    )
    unlike = {
        "node0": own(6000.0),
        "node1": multinode.NodeRate("ddp samples/s (4 ranks, gloo)", 4, "gloo", 9000.0),
    }
    row = efficiency_row(
        multinode.multinode_outcome(["node0", "node1"], "7", None, job, {}, {}, {}, node_ddp=unlike)
    )
    assert (
        row["verdict"] == "not judged"
        and "node1's own DDP ran 4 ranks with gloo, its part of the job 2 with gloo"
        in row["reason"]
    )
    # the recorded CPU job (one gloo rank per node) against CPU nodes' own two-rank DDP: not like
    # for like
    cpu = {
        n: multinode.NodeRate("ddp samples/s (2 ranks, gloo)", 2, "gloo", 5000.0)
        for n in ("node0", "node1")
    }
    recorded = {**result, "ddp": {**result["ddp"], "sizes": "quick"}}
    row = efficiency_row(
        multinode.multinode_outcome(
            ["node0", "node1"], "7", None, recorded, {}, {}, {}, node_ddp=cpu
        )
    )
    assert (
        row["verdict"] == "not judged"
        and "node0's own DDP ran 2 ranks with gloo, its part of the job 1 with gloo"
        in row["reason"]
    )


def test_each_nodes_own_ddp_rate_is_read_from_its_suite_report():
    from suitecases import gpu

    from validate.report.record import Record, build_json

    gpus = [gpu(0, host=1), gpu(1, host=1)]
    records = [
        Record(
            "ddp samples/s (2 ranks, nccl)",
            gpus[0]["uuid"],
            "6000 samples/s",
            "-",
            "not judged",
            0.0,
            value=6000.0,
        ),
        Record(
            "ddp samples/s (per GPU without all-reduce, median of 2, nccl)",
            gpus[0]["uuid"],
            "3100 samples/s",
            "-",
            "not judged",
            0.0,
            value=3100.0,
        ),
    ]
    report = build_json(records, {"gpus": gpus, "error": None}, gpus, {}, 0)
    rates = multinode.node_ddp_rates(
        [HostOutcome("gpu01", READY, "", report=report), HostOutcome("gpu02", READY, "")]
    )
    assert rates == {
        "gpu01": multinode.NodeRate("ddp samples/s (2 ranks, nccl)", 2, "nccl", 6000.0)
    }


def test_a_slow_link_is_named(result):
    slow = copy.deepcopy(result)
    slow["links"][1]["gbs"] = slow["links"][0]["gbs"] / 10
    outcome = multinode.multinode_outcome(["node0", "node1"], "7", None, slow, {}, {}, {})
    assert outcome.status == FAILED and "link node1 -> node0 runs at" in outcome.reason


def test_a_slow_node_and_differing_parameters_are_named(result):
    bad = copy.deepcopy(result)
    bad["ranks"][1]["local_samples_per_s"] = bad["ranks"][0]["local_samples_per_s"] / 10
    bad["ranks"][1]["checksum"] = "0" * 64
    outcome = multinode.multinode_outcome(["node0", "node1"], "7", None, bad, {}, {}, {})
    assert "rank 1 (node1)" in outcome.reason
    # the slowest node by its ranks' compute rate is named, and warns: that rate of a small model
    # is the host CPU's as much as the GPU's (review D19), so a rack of two CPU SKUs stays ready
    bad["ranks"][1]["checksum"] = bad["ranks"][0]["checksum"]
    slow = multinode.multinode_outcome(["node0", "node1"], "7", None, bad, {}, {}, {})
    row = next(
        r for r in slow.report["host"]["checks"] if r["check"].startswith("multi-node slowest node")
    )
    assert (
        row["verdict"] == "warn" and "node node1 runs at" in row["reason"] and slow.status == READY
    )


def test_a_job_without_a_result_names_the_node_and_the_time_limit():
    state = slurm_queue.JobState("9", "TIMEOUT")
    outcome = multinode.multinode_outcome(["a", "b"], "9", state, None, {"a": None, "b": 1}, {}, {})
    assert (
        outcome.status == TIMEOUT
        and "b exited 1" in outcome.reason
        and "while a had not finished" in outcome.reason
    )
    failed = multinode.multinode_outcome(
        ["a", "b"],
        "9",
        slurm_queue.JobState("9", "FAILED"),
        None,
        {"a": 0, "b": None},
        {"b": "no way"},
        {},
    )
    assert (
        failed.status == FAILED
        and "b: no way" in failed.reason
        and "b wrote no exit status" in failed.reason
    )


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda r: r.update(ranks=[]), "0 of 2 ranks reported (missing rank 0, 1)"),
        (lambda r: r["ranks"].pop(), "1 of 2 ranks reported (missing rank 1)"),
        (lambda r: r["ranks"].append(dict(r["ranks"][0])), "3 rank entries for a world of 2"),
        (
            lambda r: r["ranks"][1].update(node="elsewhere"),
            "ranks on elsewhere, not one of the job's nodes",
        ),
        (lambda r: r.update(world="2"), "world is '2', not a number of ranks"),
    ],
)
def test_a_result_short_of_ranks_is_a_failed_job_not_a_crash(result, edit, words):
    """Issue 38: an empty rank list crashed the fleet run; a missing rank read ready."""
    edit(result)
    outcome = multinode.multinode_outcome(
        ["node0", "node1"], "7", None, result, {"node0": 0, "node1": 0}, {}, {}
    )
    assert outcome.status == FAILED and words in outcome.reason, outcome.reason


def test_a_node_killed_after_rank_0_wrote_the_result_is_not_ready(result):
    """Issue 38: a node that exited 137 (SIGKILL: the OOM killer) read ready beside a result
    file."""
    outcome = multinode.multinode_outcome(
        ["node0", "node1"], "7", None, result, {"node0": 0, "node1": 137}, {}, {}
    )
    assert (
        outcome.status == FAILED
        and "node1 exited 137 (killed: SIGKILL, often the OOM killer)" in outcome.reason
    )
    assert (
        multinode.multinode_outcome(
            ["node0", "node1"], "7", None, result, {"node0": 0, "node1": 0}, {}, {}
        ).status
        == READY
    )


def test_the_fleet_report_shows_the_job_as_its_own_row(result):
    joint = multinode.multinode_outcome(["node0", "node1"], "7", None, result, {}, {}, {})
    fleet = analysis.analyse([HostOutcome("node0", READY), HostOutcome("node1", READY), joint])
    assert fleet.ready
    text = terminal.render_table(fleet, verbose=True)
    section = text[
        text.index("\nmulti-node job (node0,node1): ready") :
    ]  # its own section, after the tables
    assert "pass: multi-node slowest link" in section and "slowest link node0 -> node1" in section
    assert "not judged: multi-node all-reduce busbw GB/s" in section
    data = json.loads(jsonreport.render_json(fleet))
    assert "multi-node job (node0,node1)" in data["hosts"]
    assert 'name="multi-node job (node0,node1)"' in junitreport.render_junit(fleet)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    reason = servers.missing(
        "munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun"
    )
    if reason:
        pytest.skip(f"Slurm test cluster: {reason}")
    yield from servers.running_cluster(tmp_path_factory.mktemp("slurm2"), nodes=2)


@pytest.mark.frameworks
def test_two_slurm_nodes_run_their_suites_then_one_job_across_them(two_nodes, tmp_path):
    if not (PREFIX / "bin" / "python").exists():
        pytest.skip(f"no python in the prefix {PREFIX}")
    run = slurm_job.SlurmJob(
        rundir=str(tmp_path / "run"),
        nodes=2,
        prefix=str(PREFIX),
        time="15",
        suite_args=["--expect-gpus", "0", "--quick", "-k", "torch_version or shared_memory"],
    )
    seen: list[tuple[str, str, str]] = []
    outcomes = slurm.run_job(run, progress=lambda *a: seen.append(a), poll_s=1.0)
    assert sorted(o.host for o in outcomes) == sorted(two_nodes.nodes) and all(
        o.report for o in outcomes
    ), outcomes
    joint = multinode.run_multinode(run, outcomes, lambda *a: seen.append(a), poll_s=1.0)
    assert (
        joint is not None and joint.host == f"multi-node job ({','.join(o.host for o in outcomes)})"
    )
    log = Path(joint.details["log"])
    assert joint.status == READY, (
        f"{joint.reason}\n{log.read_text()[-3000:] if log.exists() else ''}"
    )
    result = joint.report["multinode"]
    assert (
        result["world"] == 2
        and sorted(result["nodes"]) == sorted(two_nodes.nodes)
        and result["backend"] == "gloo"
    )
    assert {(link["source"], link["target"]) for link in result["links"]} == {
        tuple(two_nodes.nodes),
        tuple(reversed(two_nodes.nodes)),
    }
    assert result["allreduce"]["busbw_gbs"] > 0 and result["ddp"]["sizes"] == "quick"
    assert any(who.startswith("multi-node job") and phase == "done" for who, phase, _ in seen)
    row = efficiency_row(joint)  # the nodes' suites ran no DDP check (-k): nothing to sum
    assert (
        row["verdict"] == "not judged"
        and f"{two_nodes.nodes[0]} has no DDP figure of its own" in row["reason"]
    )


@pytest.mark.frameworks
def test_invoke_validate_slurm_nodes_2_adds_the_multinode_row(two_nodes, tmp_path):
    """The task's own entry point: `invoke validate --slurm --nodes 2` runs both nodes' suites,
    then the multi-node job, and the fleet report (text and JSON) has its row."""
    import os
    import subprocess

    if not (PREFIX / "bin" / "python").exists():
        pytest.skip(f"no python in the prefix {PREFIX}")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, **two_nodes.env, "PYTHONPATH": str(root)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "--search-root",
            str(root),
            "validate",
            "--slurm",
            "--nodes",
            "2",
            "--prefix",
            str(PREFIX),
            "--time",
            "30",
            "--expect-gpus",
            "0",
            "--quick",
            "--rundir",
            str(tmp_path / "run"),
            "--json",
            "fleet.json",
            "--verbose",
            # both "nodes" share this two-core machine: their CPU figures differ by load, not
            # health, so the fleet median must not degrade either of them here
            "--outlier-floor",
            "0.05",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    name = f"multi-node job ({','.join(two_nodes.nodes)})"
    assert name in proc.stdout and "multi-node job" in proc.stdout
    host = json.loads((tmp_path / "fleet.json").read_text())["hosts"][name]
    assert host["status"] == READY
    checks = {c["check"].split(" (")[0]: c for c in host["host"]["checks"]}
    assert checks["multi-node ddp parameters identical"]["verdict"] == "pass"
    assert checks["multi-node all-reduce busbw GB/s"]["value"] > 0
    # Each node's --quick suite on a CPU skips its own DDP check (it runs in the full suite), so no
    # node has a rate of its own to hold the job's against: each is named, and the row is not
    # judged.
    efficiency = checks["multi-node ddp efficiency over the nodes' own rates"]
    assert efficiency["verdict"] == "not judged", efficiency
    assert all(
        f"{node} has no DDP figure of its own" in efficiency["reason"] for node in two_nodes.nodes
    ), efficiency


@pytest.mark.parametrize("ending", ["crash", "term"])
def test_a_prefix_nodes_ranks_leave_no_temporary_folder(tmp_path, ending):
    """Issue 38's class (interrupts leave no debris): on a node without containers the ranks'
    temporary files (NCCL's logs) stayed in the node's /tmp when a rank crashed or the step was
    ended. The fake prefix python makes a folder in its TMPDIR as the ranks do, then crashes or
    waits to be ended; the node's TMPDIR holds nothing afterwards."""
    import os
    import signal
    import subprocess
    import time

    rundir, prefix, scratch = tmp_path / "run", tmp_path / "prefix", tmp_path / "tmp"
    for folder in (rundir, prefix / "bin", scratch):
        folder.mkdir(parents=True)
    made = tmp_path / "made"
    python = prefix / "bin" / "python"
    python.write_text(
        '#!/bin/bash\ncase "$*" in *--count-gpus*) echo 1; exit 0 ;; esac\n'
        f'd=$(mktemp -d) && echo "$d" > {made}\n'
        + ("exit 1\n" if ending == "crash" else "exec sleep 60\n")
    )
    python.chmod(0o755)
    script = tmp_path / "multinode.sh"
    script.write_text(
        multinode.render_node_script(slurm_job.SlurmJob(rundir=str(rundir), prefix=str(prefix)))
    )
    env = {**fake_tools(tmp_path), "TMPDIR": str(scratch)}
    proc = subprocess.Popen(["bash", str(script)], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not made.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        rank_folder = Path(made.read_text().strip())
        assert rank_folder.is_relative_to(scratch), rank_folder
        if ending == "term":
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 143
        else:
            assert proc.wait(10) == 1
        assert list(scratch.iterdir()) == [], "the ranks' temporary folder was left"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
