"""`invoke doctor`: the host as gpuenv sees it. A diagnostic never crashes.

Each probe returns its value or {"available": False, "why": ...}, in the manner of
torch/utils/collect_env.py, so the report is useful precisely on the machines that are broken.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gpuenv.compat.host import (
    THIS_HOST,
    HostSource,
    plan_platform,
    read_host,
    resolve_for_host,
)
from gpuenv.compat.legacy import probe_legacy
from gpuenv.errors import GpuenvError
from validate.report.tables import format_table

if TYPE_CHECKING:  # the engine module imports the Docker SDK: only at run time, lazily
    from gpuenv.engine import Engine

#: Where the NVIDIA Container Toolkit writes CDI specs (nvidia-ctk cdi generate).
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))


def probe_nvml(host_file: str | None = None) -> dict[str, Any]:
    host = read_host(host_file)
    if host.error:
        return {"available": False, "why": host.error}
    return {"available": True, **host.to_dict()}


def probe_pci(nvml: dict[str, Any], host_file: str | None = None) -> dict[str, Any]:
    """When NVML cannot be used here, the NVIDIA GPUs the PCI bus lists (a server before its
    driver, a container without --gpus), named by their PCI device ids."""
    from validate.host.archs import identify
    from validate.host.pcibus import nvidia_gpus

    if host_file or nvml.get("available"):
        return {"available": True, "gpus": []}
    gpus = []
    for gpu in nvidia_gpus():
        known = identify("", gpu.device_id).known
        gpus.append(
            {
                "address": gpu.address,
                "product": gpu.product(),
                "driver": gpu.driver,
                "compute_capability": known.compute_capability if known else None,
                "architecture": known.architecture if known else None,
            }
        )
    return {"available": True, "gpus": gpus}


def probe_driver_advice(nvml: dict[str, Any], pci: dict[str, Any]) -> dict[str, Any]:
    """Which driver branch to install (no driver, GPUs on the bus) or the driver that blocks
    every framework build (too old), from the resolver (gpuenv/compat/driver_advice.py)."""
    from gpuenv.compat.driver_advice import advice_lines

    if nvml.get("available"):
        gpus, driver = nvml.get("gpus") or [], nvml.get("driver_version")
    else:
        gpus, driver = pci.get("gpus") or [], None
    if not gpus:
        return {"available": True, "lines": []}
    archs = tuple(sorted({g["compute_capability"] for g in gpus if g.get("compute_capability")}))
    return {"available": True, "lines": advice_lines(archs, driver)}


def probe_docker(open_engine: Callable[[], Engine]) -> dict[str, Any]:
    """Does the daemon answer, and can it hand GPUs to containers (nvidia runtime or CDI)?
    `open_engine` is called here, so an engine that does not answer is a row, not a crash."""
    try:
        info = open_engine().info()
    except GpuenvError as err:
        return {"available": False, "why": err.render()}
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    cdi_files = sorted(
        str(p)
        for d in CDI_DIRS
        if d.is_dir()
        for p in d.glob("*")
        if p.suffix in (".yaml", ".yml", ".json")
    )
    nvidia_cdi = [f for f in cdi_files if "nvidia" in Path(f).name]
    return {
        "available": True,
        "server_version": info.get("ServerVersion"),
        "architecture": info.get("Architecture"),
        "runtimes": runtimes,
        "default_runtime": info.get("DefaultRuntime"),
        "nvidia_runtime": "nvidia" in runtimes,
        "cdi_spec_dirs": info.get("CDISpecDirs"),
        "nvidia_cdi_specs": nvidia_cdi,
        "gpu_ready": "nvidia" in runtimes or bool(nvidia_cdi),
    }


def probe_platform(host: HostSource = THIS_HOST) -> dict[str, Any]:
    """The CPU architecture the stacks below are planned for, and how it is known."""
    from gpuenv.stack import LINUX_64

    try:
        found, why = plan_platform(host)
    except GpuenvError as err:
        return {"available": False, "why": err.render()}
    if found is None:  # a capture naming no Grace GPU: gpuenv plans x86_64 unless told
        return {
            "available": True,
            "platform": LINUX_64,
            "why": "the capture names no Grace GPU: x86_64 "
            "assumed (--platform linux-aarch64 for an Arm server)",
        }
    return {"available": True, "platform": found, "why": why}


def probe_recommendation(framework: str, host: HostSource = THIS_HOST) -> dict[str, Any]:
    try:
        stack = resolve_for_host(host, framework=framework)
    except GpuenvError as err:
        return {"available": False, "why": err.render()}
    return {"available": True, **stack.to_dict()}


#: doctor must stay quick offline: PyPI gets this long before the freshness probe says "not
#: checked".
PYPI_TIMEOUT_S = 3.0


def probe_compat_data(today=None) -> dict[str, Any]:
    """Is the compatibility data current? Its check date, and whether PyPI has newer frameworks."""
    from datetime import date

    from gpuenv.compat.drift import STALE_AFTER_DAYS, newest_upstream, stale_days
    from gpuenv.compat.matrix import load_matrix

    m = load_matrix()
    age = stale_days(m.checked, today or date.today())
    out: dict[str, Any] = {
        "available": True,
        "checked": m.checked.isoformat(),
        "stale_days": age,
        "stale_after_days": STALE_AFTER_DAYS,
    }
    try:
        from gpuenv.compat.drift import final_versions
        from gpuenv.compat.pypi import PyPI, read_index_settings

        settings = read_index_settings(timeout=PYPI_TIMEOUT_S)
        client = PyPI(settings)
        versions = {name: final_versions(client.project(name)) for name in ("torch", "tensorflow")}
        out["newer_on_pypi"] = newest_upstream(versions, m)
    except GpuenvError as err:
        out["newer_on_pypi"] = None
        out["pypi"] = f"not checked: {err.message}"
    return out


def cuda_host_blocker(nvml: dict[str, Any]) -> str | None:
    """Why no stack can run on this host whatever its driver, or None: the planner's own rule
    (compat.host.cuda_host_refusal, a vGPU hypervisor) on the NVML record of this report."""
    from gpuenv.compat.host import cuda_host_refusal

    return cuda_host_refusal(nvml) if nvml.get("available") else None


def _safe(probe, *args) -> dict[str, Any]:
    try:
        return probe(*args)
    except Exception as err:  # a diagnostic reports, it never dies
        return {"available": False, "why": f"could not collect: {type(err).__name__}: {err}"}


def collect_report(
    open_engine: Callable[[], Engine], host: HostSource = THIS_HOST
) -> dict[str, Any]:
    """The report; with `host.host_file` the driver, GPUs and recommended stacks are the captured
    server's (Docker, the data and the settings stay this machine's), planned for
    `host.platform` when given. `open_engine` gives the Docker engine to probe (the task passes
    `Engine.local`)."""
    host_file = host.host_file
    if host_file:
        read_host(host_file)  # a file that is no capture is the user's mistake: one line, exit 2
    nvml = _safe(probe_nvml, host_file)
    blocker = cuda_host_blocker(nvml)  # a hypervisor: no stack is planned for it
    report = {
        "host": {
            "hostname": platform.node(),
            "os": platform.platform(),
            "python": platform.python_version(),
        },
        "nvml": nvml,
        "docker": _safe(probe_docker, open_engine),
        "platform": _safe(probe_platform, host),
        "recommended": {
            fw: {"available": False, "why": blocker}
            if blocker
            else _safe(probe_recommendation, fw, host)
            for fw in ("torch", "tensorflow")
        },
        "compat_data": _safe(probe_compat_data),
    }
    report["legacy"] = _safe(probe_legacy, report["nvml"])
    report["pci"] = _safe(probe_pci, report["nvml"], host_file)
    report["driver_advice"] = _safe(probe_driver_advice, report["nvml"], report["pci"])
    if host_file:
        report["host_file"] = host_file
    return report


#: Width of the label column: the longest label ("tensorflow") and two spaces, so no label runs into
#: its value.
LABEL_WIDTH = len("tensorflow") + 2


def _line(label: str, value: str) -> str:
    return f"{label:<{LABEL_WIDTH - 2}}  {value}"


def gpu_name(gpu: dict[str, Any]) -> str:
    """The name NVML reports, with the product its PCI device id names when the name alone does
    not identify it: 'Graphics Device (GeForce GTX 1660 (PCI 10de:2184))'."""
    from validate.host.archs import identify, load_archs, lookup

    name = str(gpu.get("name") or "unnamed GPU")
    found = identify(name, gpu.get("pci_device_id"))
    if found.product and lookup(name, load_archs()) is None:
        return f"{name} ({found.product})"
    return name


def format_report(report: dict[str, Any]) -> str:
    lines = [
        _line(
            "host",
            f"{report['host']['hostname']}  ({report['host']['os']}, Python "
            f"{report['host']['python']})",
        )
    ]
    if report.get("host_file"):
        lines.append(
            _line(
                "captured",
                f"{report['host_file']}: driver, GPUs and recommended stacks below are that "
                "server's",
            )
        )
    nvml = report["nvml"]
    if nvml.get("available"):
        cuda = nvml["cuda_driver_version"] or "not reported"
        lines.append(
            _line("driver", f"{nvml['driver_version'] or 'not reported'}  (CUDA driver API {cuda})")
        )
        rows = [
            (
                g["index"],
                gpu_name(g),
                g["uuid"],
                g["compute_capability"] or "unknown",
                f"{g['memory_total_bytes'] / 2**30:.1f} GiB"
                if g["memory_total_bytes"] is not None
                else "not readable",
            )
            for g in nvml["gpus"]
        ]
        lines.append(
            format_table(("gpu", "name", "uuid", "cc", "memory"), rows)
            if rows
            else _line("gpus", "none")
        )
    else:
        lines.append(_line("driver", f"not available: {nvml['why']}"))
    on_bus = (report.get("pci") or {}).get("gpus") or []
    if on_bus:
        rows = [
            (
                g["address"],
                g["product"],
                g["architecture"] or "unknown",
                g["compute_capability"] or "unknown",
                g["driver"] or "none",
            )
            for g in on_bus
        ]
        named = f"{len(on_bus)} NVIDIA GPU(s), named by their PCI device ids:"
        lines.append(_line("pci bus", named))
        head = ("address", "product", "architecture", "cc", "kernel driver")
        lines.append(format_table(head, rows))
    advice = (report.get("driver_advice") or {}).get("lines", [])
    lines += [_line("driver", text) for text in advice]
    lines += [_line("gpu", text) for text in (report.get("legacy") or {}).get("lines", [])]
    docker = report["docker"]
    if docker.get("available"):
        gpu = (
            "yes"
            if docker["gpu_ready"]
            else "no (install the NVIDIA Container Toolkit, then nvidia-ctk runtime configure "
            "or cdi generate)"
        )
        arch = f"; engine {docker['architecture']}" if docker.get("architecture") else ""
        lines.append(
            _line(
                "docker",
                f"{docker['server_version']}{arch}; runtimes: "
                f"{', '.join(docker['runtimes']) or '-'}; GPUs to containers: {gpu}",
            )
        )
    else:
        lines.append(_line("docker", f"not available: {docker['why']}"))
    plat = report.get("platform") or {}
    if plat:
        shown = (
            f"{plat['platform']}  ({plat['why']})"
            if plat.get("available")
            else f"not available: {plat['why']}"
        )
        lines.append(_line("platform", shown))
    for fw, rec in report["recommended"].items():
        if rec.get("available"):
            lines.append(
                _line(
                    fw, f"{rec['stack_id']}  base {rec['base_image']}  ({rec['pip_requirement']})"
                )
            )
        else:
            lines.append(_line(fw, f"no stack: {rec['why']}"))
    lines += compat_data_lines(report.get("compat_data") or {})
    return "\n".join(lines)


def compat_data_lines(data: dict[str, Any]) -> list[str]:
    """The data-freshness line(s): warnings when the check date is old or PyPI has newer
    releases."""
    if not data.get("available"):
        return [f"data      not available: {data.get('why')}"]
    lines = [f"data      envs/compat.yaml checked {data['checked']}"]
    if data.get("stale_days"):
        lines.append(
            f"warning   the compatibility data was checked {data['stale_days']} days ago (over "
            f"{data['stale_after_days']}): run `invoke matrix --check` and update "
            "envs/compat.yaml"
        )
    if data.get("newer_on_pypi"):
        lines.append(
            "warning   PyPI has releases newer than the data "
            f"({', '.join(data['newer_on_pypi'])}): run `invoke matrix --check`"
        )
    elif data.get("pypi"):
        lines.append(f"data      newer releases on PyPI {data['pypi']}")
    return lines
