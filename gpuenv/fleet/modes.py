"""Which servers `invoke validate` validates, and the fleet's settings.

Two kinds of run share the task: this server (in an image, or `--local`, with `--replay`,
`--record`, `--health-only`) and a fleet (`--hosts` over SSH, `--slurm`, or `--from-reports` for
reports already collected). `check_mode` says which one the command line asks for and refuses a
mix in one line naming the flag and the fix; `merge_options` turns the fleet flags and the team's
`gpuenv.fleet` settings into one `FleetOptions` (command line over invoke.yaml over defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuenv.errors import BadInput

#: Options only a fleet run takes (the task's parameter names).
FLEET_ONLY = (
    "parallel",
    "report",
    "partition",
    "nodes",
    "nodelist",
    "time",
    "prefix",
    "rundir",
    "queue_time",
    "outlier_floor",
    "sbatch_arg",
)
#: Options of a run on this server, which a fleet run (one image on other servers) does not take.
THIS_SERVER_ONLY = ("local", "save_baseline", "replay", "record", "health_only")
#: The default of --parallel and of --outlier-floor.
DEFAULT_PARALLEL = 8
DEFAULT_OUTLIER_FLOOR = 0.9


def flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _is_given(value: Any) -> bool:
    return value not in (None, False, [], ())


def wants_fleet(cli: dict[str, Any]) -> bool:
    """A fleet run is asked for on the command line (--hosts, bare or with hosts, --slurm, or
    --from-reports for reports already collected): hosts listed in a shared invoke.yaml must not
    turn someone's `invoke validate` of their own machine into a run across the rack."""
    return bool(cli.get("hosts") or cli.get("slurm") or cli.get("from_reports"))


def check_mode(given: dict[str, Any], stack_flags: list[str]) -> bool:
    """True for a fleet run, False for a run on this server; a mix of the two is BadInput.

    `given`: the task's arguments by name; `stack_flags`: the stack options given (--cuda, ...),
    which choose an image for this server and mean nothing to a fleet.
    """
    if not wants_fleet(given):
        stray = [flag(name) for name in FLEET_ONLY if _is_given(given.get(name))]
        if stray:
            raise BadInput(
                f"{' '.join(stray)} given without --hosts, --slurm or --from-reports: "
                f"{'/'.join(flag(name) for name in FLEET_ONLY)} are fleet options",
                fix="add --hosts ssh://user@host,..., --slurm or --from-reports DIR, "
                f"or drop {' '.join(stray)}",
            )
        return False
    here = [flag(name) for name in THIS_SERVER_ONLY if _is_given(given.get(name))] + stack_flags
    if here:
        raise BadInput(
            f"{' '.join(here)}: a fleet run validates other servers in one image, so --local, "
            "--save-baseline, --replay, --record, --health-only and the stack options do not apply",
            fix=f"drop {' '.join(here)} (give --image REF for the image), or drop --hosts/--slurm",
        )
    if given.get("hosts") and given.get("slurm"):
        raise BadInput(
            "--hosts and --slurm both given",
            fix="validate SSH Docker hosts or a Slurm job, one at a time",
        )
    if given.get("from_reports") and (given.get("hosts") or given.get("slurm")):
        raise BadInput(
            "--from-reports renders reports already collected, so --hosts/--slurm do not apply",
            fix="drop --hosts/--slurm, or drop --from-reports to run the suite on the servers",
        )
    return True


@dataclass(frozen=True)
class FleetOptions:
    """The fleet settings after command line over invoke.yaml over defaults."""

    hosts: list[str] | None = None
    slurm: bool = False
    image: str | None = None
    parallel: int = DEFAULT_PARALLEL
    partition: str | None = None
    nodes: int | None = None
    nodelist: str | None = None
    time: str | None = None
    prefix: str | None = None
    rundir: str | None = None
    report: str | None = None  # HTML
    json: str | None = None
    junit: str | None = None
    baseline: str | None = None
    gpus: str | None = None
    host_gpus: dict[str, str] | None = None  # SSH hosts: a host's own --gpus (URL=0,1;URL=2)
    from_reports: str | None = None  # a folder of per-host suite reports collected by any means
    #: a GPU below this share of its model's fleet median degrades its host
    outlier_floor: float = DEFAULT_OUTLIER_FLOOR
    verbose: bool = False  # the table lists ready hosts too
    queue_time: str | None = None  # Slurm: longest wait in the queue
    #: NCCL_*/GLOO_*/TORCH_* for every container and prefix run (fleet.env)
    env: dict[str, str] | None = None
    #: Slurm: more sbatch options (--sbatch-arg, slurm.sbatch_args)
    sbatch_args: list[str] | None = None


def _mapping(config: dict[str, Any], key: str, example: str) -> dict[str, Any]:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise BadInput(
            f"gpuenv.fleet.{key} in invoke.yaml is {value!r}, not a mapping",
            fix=f"write {key}: {example}",
        )
    return value


def _hosts(cli: dict[str, Any], config: dict[str, Any]) -> str | None:
    hosts = cli.get("hosts")
    if hosts is True:  # a bare --hosts: the team's list from invoke.yaml
        hosts = config.get("hosts")
        if not hosts:
            raise BadInput(
                "--hosts without a value, and invoke.yaml has no gpuenv.fleet.hosts",
                fix="give --hosts ssh://user@host,... or list them under gpuenv: fleet: hosts: "
                "in invoke.yaml",
            )
    if isinstance(hosts, (list, tuple)):
        hosts = ",".join(str(h) for h in hosts)
    return hosts


def _count(value: Any, option: str, fix: str) -> int | None:
    """A whole number from the command line or invoke.yaml (None when not given)."""
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadInput(f"{option} {value!r} is not a number", fix=fix) from None


def _parallel(value: Any) -> int:
    fix = "give how many hosts to validate at once, e.g. --parallel 8"
    parallel = _count(value, "--parallel", fix)
    if parallel is None:
        return DEFAULT_PARALLEL
    if parallel < 1:
        raise BadInput(
            f"--parallel {parallel} is less than 1", fix="give 1 or more, e.g. --parallel 8"
        )
    return parallel


def _env(config: dict[str, Any]) -> dict[str, str]:
    from gpuenv.fleet.slurm_job import check_env

    env = _mapping(config, "env", "{NCCL_SOCKET_IFNAME: ib0}")
    try:
        return check_env(env)
    except BadInput as err:
        raise BadInput(f"gpuenv.fleet.env in invoke.yaml {err.message}", fix=err.fix) from None


def _sbatch_args(cli: dict[str, Any], slurm_cfg: dict[str, Any]) -> list[str]:
    sbatch_args = list(cli.get("sbatch_arg") or []) or slurm_cfg.get("sbatch_args") or []
    if isinstance(sbatch_args, str) or not all(isinstance(a, str) for a in sbatch_args):
        raise BadInput(
            f"gpuenv.fleet.slurm.sbatch_args in invoke.yaml is {sbatch_args!r}, "
            "not a list of options",
            fix="write sbatch_args: [--account=ml, --qos=high]",
        )
    for arg in sbatch_args:
        if not arg.startswith("-") or "\n" in arg:
            raise BadInput(
                f"--sbatch-arg {arg!r} is not an sbatch option",
                fix="give one option a time, e.g. --sbatch-arg=--account=ml",
            )
    return list(sbatch_args)


def _gpus(gpus: Any, listed: list[str] | None) -> tuple[str | None, dict[str, str]]:
    """--gpus for every host, and each SSH host's own (URL=0,1;URL=2)."""
    from gpuenv.fleet.sshhosts import parse_host_gpus

    if listed:
        return parse_host_gpus(gpus, listed)
    if gpus and "=" in str(gpus):
        raise BadInput(
            f"--gpus {gpus!r} gives hosts their own GPUs, which only --hosts takes",
            fix="give one --gpus for every Slurm node (all, none, 0,1)",
        )
    return gpus, {}


def merge_options(cli: dict[str, Any], config: dict[str, Any]) -> FleetOptions:
    """Command line beats invoke.yaml beats defaults; the Slurm settings are under `slurm:`."""
    from gpuenv.fleet.sshhosts import parse_hosts

    slurm_cfg = _mapping(config, "slurm", "{partition: gpu, time: '30'}")

    def pick(name: str, section: dict[str, Any] = config) -> Any:
        value = cli.get(name)
        return value if value not in (None, "") else section.get(name)

    hosts = _hosts(cli, config)
    parallel = _parallel(pick("parallel"))
    nodes = _count(pick("nodes", slurm_cfg), "--nodes", fix="give the node count, e.g. --nodes 4")
    floor = pick("outlier_floor")
    env = _env(config)
    sbatch_args = _sbatch_args(cli, slurm_cfg)
    listed = parse_hosts(hosts) if hosts and not cli.get("slurm") else None
    gpus, host_gpus = _gpus(cli.get("gpus"), listed)
    limit = pick("time", slurm_cfg)
    return FleetOptions(
        hosts=listed,
        slurm=bool(cli.get("slurm")),
        image=pick("image"),
        parallel=parallel,
        partition=pick("partition", slurm_cfg),
        nodes=nodes,
        nodelist=pick("nodelist", slurm_cfg),
        time=str(limit) if limit not in (None, "") else None,
        prefix=pick("prefix", slurm_cfg),
        rundir=pick("rundir", slurm_cfg),
        report=cli.get("report"),
        json=cli.get("json"),
        junit=cli.get("junit"),
        baseline=cli.get("baseline"),
        gpus=gpus,
        host_gpus=host_gpus,
        from_reports=cli.get("from_reports") or None,
        outlier_floor=outlier_floor(floor),
        verbose=bool(cli.get("verbose")),
        queue_time=pick("queue_time", slurm_cfg),
        env=env,
        sbatch_args=sbatch_args,
    )


def outlier_floor(value: Any) -> float:
    """--outlier-floor / gpuenv.fleet.outlier_floor: a share of the fleet median in (0, 1]."""
    if value in (None, ""):
        return DEFAULT_OUTLIER_FLOOR
    try:
        floor = float(value)
    except (TypeError, ValueError):
        floor = float("nan")
    if isinstance(value, bool) or not 0 < floor <= 1:
        raise BadInput(
            f"--outlier-floor {value!r} is not a share of the fleet median in (0, 1]",
            fix="give e.g. --outlier-floor 0.9 "
            "(a GPU below 90% of its model's fleet median degrades its host)",
        )
    return floor
