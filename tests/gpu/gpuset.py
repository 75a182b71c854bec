"""What the GPU test set (tests/gpu/test_gpu_host.py) runs and expects, as pure functions, so a
machine without GPUs can test it (tests/validate/test_gpu_set_plan.py): the container options
(the product's own, gpuenv/engine/containers.py's `container_options`), the PyTorch build the
resolver picks for the host's driver, and the rows a healthy host's report must hold, judged on
a report (a live one, or a recorded one in the unit tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuenv.engine import DEFAULT_SHM_SIZE, container_options

#: The Python each Ubuntu release of nvidia/cuda's base images ships as python3.
UBUNTU_PYTHON = {"ubuntu20.04": "3.8", "ubuntu22.04": "3.10", "ubuntu24.04": "3.12"}


@dataclass(frozen=True)
class RunPlan:
    """One container the set runs: the arguments of `Engine.run_container`, as `invoke run` and
    `invoke validate` pass them (GPUs, /dev/shm, NCCL's ulimits, an init)."""

    image: str
    command: list[str]
    env: dict[str, str]
    gpus: str = "all"
    shm_size: str = DEFAULT_SHM_SIZE

    def options(self) -> dict[str, Any]:
        """The engine's create() options for it: what the container really gets."""
        return container_options(self.gpus, self.shm_size, self.env)


def run_plan(
    image: str, command: str, env: dict[str, str] | None = None, seconds: int = 1800
) -> RunPlan:
    """A shell command in `image`, bounded inside the container by coreutils' timeout (the engine's
    wait has no bound of its own)."""
    return RunPlan(image, ["timeout", str(seconds), "sh", "-c", command], dict(env or {}))


def torch_build_args(driver: str, compute_capabilities: list[str]) -> dict[str, str]:
    """The build arguments of tests/gpu/fixtures/Dockerfile: the CUDA base image and the PyTorch
    build gpuenv's resolver picks for this driver and these GPUs, with the Python that base ships.
    PyPI's default torch follows the newest CUDA and can need a newer driver than the host's."""
    from gpuenv.compat.resolve import resolve_stack
    from gpuenv.compat.rules.request import Request

    archs = tuple(sorted(set(compute_capabilities)))
    first = resolve_stack(Request(driver=driver, framework="torch", gpu_archs=archs))
    python = UBUNTU_PYTHON.get(first.base_image.rsplit("-", 1)[-1])
    stack = (
        first
        if python is None
        else resolve_stack(
            Request(
                driver=driver, framework="torch", gpu_archs=archs, python=python, cuda=first.cuda
            )
        )
    )
    tensorflow = resolve_stack(
        Request(driver=driver, framework="tensorflow", gpu_archs=archs, python=stack.python)
    )
    return {
        "CUDA_BASE": stack.base_image,
        "TORCH_REQUIREMENT": stack.pip_requirement,
        "TORCH_INDEX": stack.index_url or "https://pypi.org/simple",
        "TENSORFLOW_REQUIREMENT": tensorflow.pip_requirement,
    }


# --- what a healthy host's report must hold -----------------------------------------------------

#: Health rows and the NVML reading (validate/host/nvml_health.py's HealthReadings) behind each:
#: where the host's NVML gives the reading, the row must have been read in the container, not
#: skipped.
HEALTH_ROWS = {
    "pcie replays": "pcie_replays",
    "temperature": "temperature_c",
    "nvlink errors": "nvlink_errors",
    "nvswitch fabric health": "fabric_health",
    "clock event time": "clock_event_us",
}


def _rows(report: dict[str, Any], uuid: str) -> dict[str, dict[str, Any]]:
    return {row["check"]: row for row in (report.get(uuid) or {}).get("checks") or []}


def _host_rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["check"]: row for row in (report.get("host") or {}).get("checks") or []}


def health_problems(report: dict[str, Any], gpus: list[Any]) -> list[str]:
    """Each health row that skipped although the host's NVML reads it (`gpus`: nvml.GpuInfo of the
    host), and each that failed or is missing."""
    problems = []
    for gpu in gpus:
        rows = _rows(report, gpu.uuid)
        for check, reading in HEALTH_ROWS.items():
            supported = getattr(gpu.health, reading, None) is not None
            row = rows.get(check)
            if row is None:
                problems.append(f"GPU {gpu.index}: no '{check}' row")
            elif row["verdict"] == "fail":
                problems.append(f"GPU {gpu.index}: '{check}' failed: {row.get('reason')}")
            elif supported and row["verdict"] == "skip":
                problems.append(
                    f"GPU {gpu.index}: '{check}' skipped ({row.get('reason')}) though the host's "
                    "NVML reads it"
                )
    return problems


def multigpu_problems(report: dict[str, Any], gpus: list[Any], tensorflow: bool) -> list[str]:
    """With 2 or more whole GPUs: the DDP rows over every one of them, passed (and MirroredStrategy
    when the image has TensorFlow); with fewer, none is expected."""
    whole = [g for g in gpus if not g.mig_enabled]
    if len(whole) < 2:
        return []
    rows, n = _host_rows(report), len(whole)
    for gpu in gpus:  # the job's figures are filed under rank 0's GPU
        rows.update(_rows(report, gpu.uuid))
    expected = [
        f"ddp ranks joined ({n} ranks, nccl)",
        f"ddp parameters identical ({n} ranks, nccl)",
        f"ddp training loss ({n} ranks, nccl)",
        f"ddp slowest rank ({n} ranks, nccl)",
    ]
    problems = [
        f"no passing '{name}' row: {rows[name]['verdict'] if name in rows else 'missing'}"
        for name in expected
        if rows.get(name, {}).get("verdict") != "pass"
    ]
    if tensorflow:
        mirrored = [
            row
            for name, row in rows.items()
            if name.startswith(f"tensorflow mirrored variables identical ({n} replicas")
        ]
        if not mirrored or mirrored[0]["verdict"] != "pass":
            problems.append(
                f"no passing 'tensorflow mirrored variables identical ({n} replicas, ...)' row"
            )
    return problems


def shm_problem(report: dict[str, Any]) -> str | None:
    """The suite's own /dev/shm row, which fails a multi-GPU host below 1 GiB."""
    row = _host_rows(report).get("/dev/shm size")
    return (
        None if row is None or row["verdict"] != "fail" else f"/dev/shm failed: {row.get('reason')}"
    )


def _all_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every row of the report: the host's and each GPU's section."""
    sections = [value for value in report.values() if isinstance(value, dict) and "checks" in value]
    return [row for section in sections for row in section.get("checks") or []]


def masking_problems(report: dict[str, Any], framework: str = "torch") -> list[str]:
    """The suite's CUDA_VISIBLE_DEVICES rows for `framework` (check 4: one per masking case): at
    least one ran, and each passed. A run where the check skipped or was left out is named."""
    prefix = f"{framework} CUDA_VISIBLE_DEVICES="
    rows = [row for row in _all_rows(report) if str(row.get("check", "")).startswith(prefix)]
    if not rows:
        return [f"no '{prefix}...' masking row: the masking check did not run"]
    return [
        f"'{row['check']}' {row['verdict']}: {row.get('reason') or row.get('measured')}"
        for row in rows
        if row.get("verdict") != "pass"
    ]


def nvlink_expected(gpus: list[Any], peaks: list[Any]) -> bool:
    """Whether the host's GPUs talk over NVLink: two or more whole GPUs, each a product with
    NVLinks (gpu_peaks.yaml nvlink_links, each with its source): an SXM board, not a PCIe card."""
    from validate.judge.peaks import expected_nvlinks

    whole = [g for g in gpus if not g.mig_enabled]
    return len(whole) >= 2 and all(expected_nvlinks(g, peaks) for g in whole)


def interconnect_problem(report: dict[str, Any], gpus: list[Any], peaks: list[Any]) -> str | None:
    """On an NVLink host (nvlink_expected), the NCCL all-reduce busbw row must have run, passed and
    say 'over nvlink': a host judged on the PCIe floor, or whose row skipped, passes nothing."""
    if not nvlink_expected(gpus, peaks):
        return None
    rows = [
        row
        for row in _all_rows(report)
        if str(row.get("check", "")).startswith("nccl all-reduce busbw")
    ]
    if not rows:
        return "no 'nccl all-reduce busbw' row on an NVLink host"
    row = rows[0]
    if row.get("verdict") != "pass":
        return f"'{row['check']}' {row['verdict']}: {row.get('reason') or row.get('measured')}"
    if " over nvlink " not in f" {row.get('measured')} ":
        return f"'{row['check']}' ran {row.get('measured')!r}, not over nvlink, on an NVLink host"
    return None


def split_gpus(hosts: list[str], gpus: list[Any]) -> dict[str, str]:
    """One machine's whole GPUs split between `hosts` (its engine reached under each name), as
    `--gpus 'URL=0,1;URL=2,3'` gives them: in index order, the first host the larger half."""
    whole = sorted((g for g in gpus if not g.mig_enabled), key=lambda g: g.index)
    size = -(-len(whole) // len(hosts))
    return {
        host: ",".join(str(g.index) for g in whole[i * size : (i + 1) * size])
        for i, host in enumerate(hosts)
        if whole[i * size : (i + 1) * size]
    }


def multinode_problems(joint: Any, split: dict[str, str]) -> list[str]:
    """The multi-node job over the split (a fleet HostOutcome): ready, over NCCL, one rank per
    GPU given, each host's ranks on the GPUs it was given and no other."""
    if joint is None:
        return ["no multi-node job ran"]
    problems = [] if joint.status == "ready" else [f"the job is {joint.status}: {joint.reason}"]
    result = (joint.report or {}).get("multinode") or {}
    world = sum(len(value.split(",")) for value in split.values())
    if result.get("backend") != "nccl" or result.get("world") != world:
        problems.append(
            f"ran {result.get('backend')} over {result.get('world')} ranks, not nccl over {world}"
        )
    ranks = result.get("ranks") or []
    for host, value in split.items():
        mine = sorted(r.get("local_rank", -1) for r in ranks if r.get("node") == host)
        if mine != list(range(len(value.split(",")))):
            problems.append(f"{host}: local ranks {mine}, not one per GPU of {value}")
    uuids = [r.get("uuid") for r in ranks]
    if len(set(uuids)) != len(uuids) or None in uuids:
        problems.append(f"ranks do not each hold a GPU of their own: {uuids}")
    return problems
