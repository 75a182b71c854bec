"""Slurm, the job: `SlurmJob` and its checks, the batch and node scripts, the sbatch line, and
the submission (pure builders, tested on recorded text; `write_scripts`, `submit` and `run_slurm`
run them)."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gpuenv.errors import BadInput, ToolError

JOB_NAME = "gpuenv-validate"

NODE_SCRIPT = "node.sh"

BATCH_SCRIPT = "job.sh"

NODES_DIR = "nodes"

BASELINE_FILE = "baseline.json"

#: Slurm's --time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S, and UNLIMITED/INFINITE.
_TIME = re.compile(
    r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)$",
    re.I,
)

#: A Slurm hostlist expression: gpu[01-08],login1
_NODELIST = re.compile(
    r"^[A-Za-z0-9._\-]+(\[[0-9,\-]+\])?([A-Za-z0-9._\-]*)(,[A-Za-z0-9._\-]+(\[[0-9,\-]+\])?[A-Za-z0-9._\-]*)*$"
)

_NAME = re.compile(r"^[A-Za-z0-9._\-]+$")

#: The longest --time or --queue-time taken: a validation run is minutes to hours; a value past
#: this is a typo (and past it Python's waits and Slurm's limits overflow or turn "unlimited").
MAX_LIMIT_S = 7 * 24 * 3600

#: How long a job may wait in the queue when --queue-time is not given.
DEFAULT_QUEUE_TIME = "1:00:00"


@dataclass(frozen=True)
class SlurmJob:
    """What to submit: where, for how long, and how each node runs the suite."""

    rundir: str  # shared folder for the scripts and the per-node reports
    nodes: int | None = None
    nodelist: str | None = None
    partition: str | None = None
    time: str | None = None
    image: str | None = None  # run in this image on nodes with Docker
    prefix: str | None = None  # else: PREFIX/bin/python -m validate
    gpus: str = "all"  # Docker's --gpus on nodes that run the image
    suite_args: list[str] = field(default_factory=list)
    baseline: bool = False  # RUNDIR/baseline.json is handed to the suite
    extra_sbatch: list[str] = field(default_factory=list)
    queue_time: str | None = (
        None  # longest wait in the queue before the job is cancelled (default DEFAULT_QUEUE_TIME)
    )
    # NCCL_*/GLOO_*/TORCH_* for every container and prefix run (invoke.yaml fleet.env)
    env: dict[str, str] = field(default_factory=dict)
    # CPUs each node's task gets (default: every CPU the exclusive job has on the node)
    cpus_per_task: int | None = None


#: The environment a fleet run passes into its containers and prefix runs (invoke.yaml
#: `gpuenv.fleet.env`): NCCL's and gloo's interface and transport settings, PyTorch's NCCL and
#: distributed debugging; nothing else, so a typo'd or unrelated key is named, not shipped.
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "UCX_")
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


def check_env(env: dict[str, object]) -> dict[str, str]:
    """`gpuenv.fleet.env` checked: names NCCL's, gloo's or PyTorch's, values one line each."""
    out = {}
    for name, value in env.items():
        known = isinstance(name, str) and _ENV_NAME.match(name) and name.startswith(ENV_PREFIXES)
        if not known:
            raise BadInput(
                f"names {name!r}, not an NCCL/gloo/PyTorch setting",
                fix=f"give only variables starting with {', '.join(ENV_PREFIXES)}, "
                "e.g. NCCL_SOCKET_IFNAME: ib0",
            )
        text = str(value)
        if isinstance(value, (dict, list)) or "\n" in text or "\0" in text:
            raise BadInput(
                f"sets {name} to {value!r}, not one value", fix=f"write {name}: VALUE on one line"
            )
        out[name] = text
    return out


def gpus_per_node(suite_args: list[str]) -> int:
    """The GPUs each node must show (the suite's --expect-gpus N), asked of Slurm for the job:
    a GRES-managed rack gives a job no GPU it did not ask for (Slurm's gres.html)."""
    if "--expect-gpus" in suite_args:
        index = suite_args.index("--expect-gpus")
        if index + 1 < len(suite_args) and suite_args[index + 1].isdigit():
            return int(suite_args[index + 1])
    return 0


def resource_options(job: SlurmJob, gpus: int) -> list[str]:
    """sbatch's resource options for a validation job: the whole node (--exclusive: no other job
    shares its GPUs, which a container started by dockerd would otherwise take regardless of
    Slurm's cgroup), `gpus` GPUs per node when there are any, and the CPUs per task when given."""
    out = ["--exclusive"]
    if gpus > 0:
        out.append(f"--gpus-per-node={gpus}")
    if job.cpus_per_task:
        out.append(f"--cpus-per-task={job.cpus_per_task}")
    return out


def srun_cpus(job: SlurmJob) -> str:
    """srun's own --cpus-per-task: since Slurm 22.05 srun no longer inherits sbatch's (sbatch(1));
    without one given, every CPU the exclusive job has on the node (SLURM_CPUS_ON_NODE)."""
    if job.cpus_per_task:
        return f"--cpus-per-task={job.cpus_per_task}"
    return '--cpus-per-task="${SLURM_CPUS_ON_NODE:-1}"'


def check_job(job: SlurmJob) -> None:
    """Every option checked before anything is submitted: one line naming the bad value."""
    if job.nodes is not None and job.nodelist:
        raise BadInput(
            "--nodes and --nodelist both given",
            fix="give --nodes N for any N nodes, or --nodelist LIST for those nodes",
        )
    if job.nodes is not None and job.nodes < 1:
        raise BadInput(f"--nodes {job.nodes} is less than 1", fix="give 1 or more")
    if job.nodelist and not _NODELIST.match(job.nodelist):
        raise BadInput(
            f"--nodelist {job.nodelist!r} is not a Slurm host list",
            fix="write it as gpu[01-04],gpu07",
        )
    if job.partition and not _NAME.match(job.partition):
        raise BadInput(
            f"--partition {job.partition!r} is not a partition name",
            fix="see sinfo -s for the partitions",
        )
    if job.time:
        limit_seconds(job.time, "--time")
    limit_seconds(job.queue_time or DEFAULT_QUEUE_TIME, "--queue-time", unlimited=False)
    if not job.image and not job.prefix:
        raise BadInput(
            "nothing to run on the nodes",
            fix="give --image REF (nodes with Docker) and/or --prefix PATH (made by invoke "
            "install --prefix on a shared path)",
        )
    if job.prefix and not Path(job.prefix).is_absolute():
        raise BadInput(
            f"--prefix {job.prefix} is not an absolute path",
            fix="give the prefix's absolute path on the shared file system",
        )


def limit_seconds(text: str, flag: str = "--time", *, unlimited: bool = True) -> float | None:
    """Slurm's time forms (M, M:S, H:M:S, D-H, D-H:M, D-H:M:S) in seconds; None for UNLIMITED or
    INFINITE when `unlimited`. A value past MAX_LIMIT_S or of zero is a mistake to name."""
    value = str(text).strip()
    fix = "use minutes (30), M:S (0:30), H:M:S (1:00:00) or D-H (1-0)"
    if value.upper() in ("UNLIMITED", "INFINITE"):
        if unlimited:
            return None
        raise BadInput(
            f"{flag} {text!r} has no end",
            fix=f"give a limit of at most 7 days, e.g. {flag} 1:00:00",
        )
    if not _TIME.match(value) or len(value) > 20:
        raise BadInput(f"{flag} {text!r} is not a time limit", fix=fix)
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?", value)
    assert match  # _TIME accepted it
    days, first, second, third = match.groups()
    if days is not None:  # D-H[:M[:S]]
        seconds = (int(days) * 24 + int(first)) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # H:M:S
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    else:  # M or M:S
        seconds = int(first) * 60 + int(second or 0)
    if seconds <= 0:
        raise BadInput(f"{flag} {text!r} is no time at all", fix=fix)
    if seconds > MAX_LIMIT_S:
        raise BadInput(
            f"{flag} {text!r} is more than the maximum of 7 days (7-0)",
            fix=f"give at most {flag} 7-0",
        )
    return float(seconds)


def check_rundir(rundir: str) -> None:
    """The run folder can be made and written, checked before anything is submitted."""

    path = Path(rundir)
    fix = "give --rundir a folder on a shared path you can write (home is shared on most clusters)"
    from validate.writing import path_problem

    problem = path_problem(rundir)  # names and lengths: the task layer's one check
    if problem:
        raise BadInput(f"--rundir {rundir}: {problem}", fix=fix)
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            raise BadInput(f"--rundir {rundir}: {existing} is a dangling symlink", fix=fix)
        existing = existing.parent
    if not existing.is_dir():
        raise BadInput(f"--rundir {rundir}: {existing} is not a folder", fix=fix)
    problem = writable_folder_problem(existing)
    if problem:
        raise BadInput(f"--rundir {rundir}: {existing} cannot be written ({problem})", fix=fix)


def writable_folder_problem(folder: Path) -> str | None:
    """Why nothing can be made in `folder`, found by making (and removing) an empty folder there;
    None when it can. Tried rather than asked of access(): root passes every access() check, and
    a read-only mount or /proc only says no when asked to write."""
    import tempfile

    try:
        Path(tempfile.mkdtemp(prefix=".gpuenv-write-check-", dir=folder)).rmdir()
    except OSError as err:
        return err.strerror or type(err).__name__
    return None


def sbatch_command(job: SlurmJob) -> list[str]:
    """`sbatch` for one task per node; the batch script is RUNDIR/job.sh (render_batch_script)."""
    rundir = job.rundir
    cmd = [
        "sbatch",
        "--parsable",
        f"--job-name={JOB_NAME}",
        f"--output={rundir}/slurm-%j.out",
        f"--chdir={rundir}",
        "--ntasks-per-node=1",
    ]
    if job.nodes is not None:
        cmd.append(f"--nodes={job.nodes}")
    if job.nodelist:
        cmd.append(f"--nodelist={job.nodelist}")
    if job.partition:
        cmd.append(f"--partition={job.partition}")
    if job.time:
        cmd.append(f"--time={job.time}")
    cmd += resource_options(job, gpus_per_node(job.suite_args))
    return [*cmd, *job.extra_sbatch, f"{rundir}/{BATCH_SCRIPT}"]


def render_batch_script(job: SlurmJob) -> str:
    """The batch script: one srun task per node; one node's failure does not stop the others."""
    return (
        "#!/bin/bash\n# gpuenv fleet validation (written by gpuenv): run node.sh once on every "
        "node of the job.\n# --kill-on-bad-exit=0: a node whose suite fails must not kill the "
        f"other nodes' runs.\nexec srun --ntasks-per-node=1 {srun_cpus(job)} "
        f"--kill-on-bad-exit=0 bash {shlex.quote(job.rundir + '/' + NODE_SCRIPT)}\n"
    )


def suite_command(python: str, report: str, job: SlurmJob, baseline: str) -> str:
    """The suite's command line on a node. `python`, `report` and `baseline` are shell words
    written by gpuenv (they may expand variables); the user's suite options are quoted."""
    words = [python, "-m", "validate", "--json", report, *(shlex.quote(a) for a in job.suite_args)]
    if job.baseline:
        words += ["--baseline", baseline]
    return " ".join(words)


def docker_run_command(job: SlurmJob) -> str:
    """`docker run` of the suite in the image, as the node's user, writing into the node's
    folder."""
    assert job.image
    words = [
        "docker",
        "run",
        "--rm",
        "--init",
        "--shm-size",
        "8g",
        "--label",
        "io.gpuenv.fleet=validate",
        "-u",
        '"$(id -u):$(id -g)"',
        "-e",
        "HOME=/tmp",
        "-v",
        '"$out":/gpuenv-out',
    ]
    for name, value in job.env.items():
        words += ["-e", shlex.quote(f"{name}={value}")]
    if job.gpus.strip().lower() == "none":
        words += [
            "-e",
            "NVIDIA_VISIBLE_DEVICES=void",
        ]  # an engine whose default runtime is nvidia would hand out all
    else:
        words += ["--gpus", shlex.quote(job.gpus)]
    if job.baseline:
        words += ["-v", shlex.quote(f"{job.rundir}/{BASELINE_FILE}") + ":/gpuenv-baseline.json:ro"]
    words.append(shlex.quote(job.image))
    return (
        " ".join(words)
        + " "
        + suite_command("python", "/gpuenv-out/report.json", job, "/gpuenv-baseline.json")
    )


def render_node_script(job: SlurmJob) -> str:
    """What one node runs: Docker with the image when the node has a working engine, else the
    prefix; it records its runner, the suite's exit status and any reason it could not run."""
    rundir = shlex.quote(job.rundir)
    image = shlex.quote(job.image or "")
    prefix = shlex.quote(job.prefix or "")
    baseline = f"{job.rundir}/{BASELINE_FILE}"
    lines = [
        "#!/bin/bash",
        "# gpuenv fleet validation, one node's run (written by gpuenv; srun starts it once per "
        "node).",
        "set -u",
        "node=${SLURMD_NODENAME:-$(hostname -s)}",
        f'out={rundir}/{NODES_DIR}/"$node"',
        'mkdir -p "$out" && : > "$out/started"',
        "status=0",
        f"image={image}",
        f"prefix={prefix}",
        'if [ -n "$image" ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null '
        "2>&1; then",
        '    echo docker > "$out/runner"',
        '    if ! docker image inspect "$image" >/dev/null 2>&1; then',
        '        echo "pulling $image" >&2',
        '        docker pull -q "$image" >/dev/null 2>"$out/error" || status=125',
        "    fi",
        f'    [ "$status" = 0 ] && {{ {docker_run_command(job) if job.image else "true"}; '
        "status=$?; }",
        'elif [ -n "$prefix" ] && [ -x "$prefix/bin/python" ]; then',
        '    echo prefix > "$out/runner"',
        *(f"    export {shlex.quote(f'{k}={v}')}" for k, v in job.env.items()),
        "    "
        + suite_command('"$prefix/bin/python"', '"$out/report.json"', job, shlex.quote(baseline)),
        "    status=$?",
        "else",
        '    echo "no way to run the suite here: ${image:+no working Docker engine for $image; '
        "}${prefix:+no $prefix/bin/python; }give --image for nodes with Docker or --prefix on a "
        'shared path" > "$out/error"',
        "    status=127",
        "fi",
        'echo "$status" > "$out/exit"',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def parse_sbatch(output: str) -> str:
    """`sbatch --parsable` prints 'JOBID' or 'JOBID;CLUSTER'."""
    text = output.strip().splitlines()[-1] if output.strip() else ""
    job_id = text.split(";", 1)[0].strip()
    if not job_id.isdigit():
        raise ToolError(
            f"sbatch did not print a job id (got {output.strip()[:200]!r})",
            fix="run sbatch by hand to see why",
        )
    return job_id


def run_slurm(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ToolError(
            f"{cmd[0]} is not installed on this machine",
            fix="run invoke validate --slurm on a Slurm login node (where sbatch and squeue are "
            "on PATH)",
        ) from None
    except subprocess.TimeoutExpired:
        raise ToolError(
            f"{cmd[0]} did not answer within {timeout:.0f}s",
            fix="check that slurmctld is up (scontrol ping)",
        ) from None


def write_scripts(job: SlurmJob, baseline: bytes | None = None) -> None:
    """The run folder with its two scripts (and the baseline); written before sbatch sees it."""
    from validate.writing import write_text_atomic

    folder = Path(job.rundir)
    (folder / NODES_DIR).mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / BATCH_SCRIPT, render_batch_script(job))
    write_text_atomic(folder / NODE_SCRIPT, render_node_script(job))
    if baseline is not None:
        (folder / BASELINE_FILE).write_bytes(baseline)


def submit(job: SlurmJob) -> str:
    proc = run_slurm(sbatch_command(job))
    if proc.returncode != 0:
        text = (proc.stderr or proc.stdout).strip()
        reason = text.splitlines()[-1] if text else f"exit status {proc.returncode}"
        fix = (
            "run it on a Slurm login node, or set SLURM_CONF to the cluster's slurm.conf"
            if "configuration" in reason
            else "check --partition/--nodes/--nodelist/--time against sinfo -s"
        )
        raise ToolError(f"sbatch refused the job ({reason})", fix=fix)
    return parse_sbatch(proc.stdout)
