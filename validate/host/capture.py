"""Recorded hosts as input: `nvidia-smi -q -x` (XML), `nvidia-smi -q` (text) and gpuenv's own
recording, each turned into one recording of NVML answers (pure, stdlib only).

The recording is what NVIDIA DCGM's `nvml_api_recorder` keeps: for each NVML function the suite
calls, per device and per argument, the answer or the error. `capture_replay.ReplayNvml` answers
the suite's pynvml calls from it, so a captured server goes through the same `validate/host/nvml.py`
readers and the same verdicts as a live one. nvidia-smi prints values it could not read as
"N/A" (not recorded: NVML answers NotSupported) or as the error ("GPU is lost": recorded as
NVMLError_GpuIsLost, so the GPU reads as lost). What a capture cannot hold (compute capability,
NVLink state, SM counts of whole GPUs), and any section a driver generation does not print
(the process list, clock event reasons, the NVSwitch fabric), stays unrecorded: the readers
leave it None and the checks say "not reported", never "none found". Sections whose spelling
changed across driver generations are parsed in validate/host/smi_sections.py.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Iterator

from validate.host import smi_health, smi_sections
from validate.host.archs import (  # noqa: F401 (compute_capability_for: tests import it here)
    compute_capability_for,
    identify,
    load_archs,
)
from validate.host.bounds import (  # noqa: F401 (CaptureError, ERROR_KEY and call_key are this module's names too)
    ERROR_KEY,
    MAX_CAPTURE_BYTES,
    MAX_CAPTURE_DEPTH,
    MAX_CAPTURE_ITEMS,
    MAX_DIGITS,
    CaptureError,
    ItemCounts,
    bounded_xml,
    call_key,
    check_counts,
    count_items,
    terminal_safe,
)
from validate.host.pci_ids import capture_pci_info, device_id_of
from validate.host.smi_values import (
    Node,
)
from validate.host.smi_values import (
    error_of as _error_of,
)
from validate.host.smi_values import (
    number as _number,
)
from validate.host.smi_values import (
    to_bytes as _bytes,
)
from validate.host.smi_values import (
    yes as _yes,
)
from validate.reading import InputRefused, load_json_input, longest_digit_run, read_text_input

RECORDING_FORMAT = "gpuenv-nvml-recording/1"


class NvmlConstants:
    """The NVML constants the suite passes or compares, defined once: the recorded argument keys
    use them, and `ReplayNvml` answers them as pynvml does, with no nvidia-ml-py installed. Values
    as nvidia-ml-py's pynvml.py (https://pypi.org/project/nvidia-ml-py/) defines them;
    tests/validate/host/test_nvml_constants.py holds them against the installed one."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_NVLINK_MAX_LINKS = (
        36  # 18 before nvidia-ml-py 13; a link a recording lacks replays as unsupported
    )
    NVML_FEATURE_ENABLED = 1
    #: nvmlDeviceGetMemoryInfo(handle, nvmlMemory_v2): `used` without the driver's reserve, and
    #: `reserved` (nvidia-smi's "Used" and "Reserved"); version 1's `used` includes the reserve.
    nvmlMemory_v2 = 0x02000028


#: Clock-event reasons: NVML bit, nvidia-smi XML tag suffix, nvidia-smi text label.
CLOCK_EVENTS = (
    (0x1, "gpu_idle", "Idle"),
    (0x2, "applications_clocks_setting", "Applications Clocks Setting"),
    (0x4, "sw_power_cap", "SW Power Cap"),
    (0x8, "hw_slowdown", "HW Slowdown"),
    (0x10, "sync_boost", "Sync Boost"),
    (0x20, "sw_thermal_slowdown", "SW Thermal Slowdown"),
    (0x40, "hw_thermal_slowdown", "HW Thermal Slowdown"),
    (0x80, "hw_power_brake_slowdown", "HW Power Brake Slowdown"),
    (0x100, "display_clocks_setting", "Display Clock Setting"),
)


def error_answer(name: str) -> dict[str, str]:
    return {ERROR_KEY: name}


# --- one tree for both nvidia-smi forms -----------------------------------------------------


def _from_element(element: ET.Element) -> Node:
    return Node(element.tag, (element.text or "").strip(), [_from_element(c) for c in element])


_GPU_HEAD = re.compile(r"^GPU\s+([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+)$")
_TEXT_LINE = re.compile(r"^(?P<indent> *)(?P<label>[^:]+?)\s*(?::\s?(?P<value>.*))?$")


def _text_tree(lines: list[str], source: str = "nvidia-smi -q") -> Node:
    """`nvidia-smi -q` text: indentation (4 spaces a level) nests labels; 'Label : value'.
    Held to a capture's counts line by line (bounds.ItemCounts), as XML is element by element."""
    root = Node("nvidia_smi_log")
    stack: list[tuple[int, Node]] = [(-1, root)]
    counts = ItemCounts(source, "lines", "capture it again with nvidia-smi -q")
    counts.opened(1, root.tag)
    for raw in lines:
        if not raw.strip() or raw.startswith("="):
            continue
        match = _TEXT_LINE.match(raw.rstrip())
        if match is None:
            continue
        depth = len(match.group("indent")) // 4
        label, value = match.group("label").strip(), (match.group("value") or "").strip()
        gpu_head = _GPU_HEAD.match(raw.strip())
        if depth == 0 and gpu_head:
            node = Node("gpu", gpu_head.group(1))  # "GPU 00000000:18:00.0" opens a GPU
        else:
            node = Node(label, value)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        counts.opened(len(stack) + 1, node.tag)
        stack[-1][1].children.append(node)
        stack.append((depth, node))
    return root


# --- values ---------------------------------------------------------------------------------


class _Answers:
    """Collects one device's answers; a value nvidia-smi could not read is left out (NotSupported)
    or recorded as the error it printed."""

    def __init__(self) -> None:
        self.calls: dict[str, Any] = {}

    def put(self, key: str, raw: str | None, value: Any) -> None:
        error = _error_of(raw)
        if error:
            self.calls[key] = error_answer(error)
        elif value is not None:
            self.calls[key] = value


def _put_memory(a: _Answers, total: int, used: int, reserved: int | None) -> None:
    """nvidia-smi's FB memory as NVML answers it live. Drivers that print "Reserved" (R510 on)
    print "Used" without it, as nvmlDeviceGetMemoryInfo_v2 answers; the v1 call counts the reserve
    as used (nvml.h, nvmlMemory_t: "Sum of Reserved and Allocated"). Older captures print one
    "Used", which is v1's."""
    if reserved is None:
        a.put("nvmlDeviceGetMemoryInfo", None, {"total": total, "used": used, "free": total - used})
        return
    a.put(
        "nvmlDeviceGetMemoryInfo",
        None,
        {"total": total, "used": used + reserved, "free": max(0, total - used - reserved)},
    )
    a.put(
        call_key("nvmlDeviceGetMemoryInfo", NvmlConstants.nvmlMemory_v2),
        None,
        {
            "version": NvmlConstants.nvmlMemory_v2,
            "total": total,
            "used": used,
            "reserved": reserved,
            "free": max(0, total - used - reserved),
        },
    )


def _first_error(*raws: str | None) -> str | None:
    """The first raw value that is one of nvidia-smi's error words ("GPU is lost"), or None."""
    return next((r for r in raws if _error_of(r)), None)


# --- one GPU --------------------------------------------------------------------------------


def _ecc_uncorrected(gpu: Node) -> tuple[str | None, int | None]:
    """Volatile uncorrected ECC errors: DRAM and SRAM uncorrectable (new drivers) or the
    double-bit total (old drivers); (raw text of the first, the sum)."""
    volatile = gpu.find("ecc_errors/volatile|ECC Errors/Volatile")
    if volatile is None:
        return None, None
    old = volatile.find("double_bit/total|Double Bit/Total")
    if old is not None:
        return old.text, None if _number(old.text) is None else int(_number(old.text))  # type: ignore[arg-type]
    parts = [
        c
        for c in volatile.children
        if "uncorrect" in c.tag.lower() and "threshold" not in c.tag.lower()
    ]
    raws = [c.text for c in parts]
    numbers = [_number(t) for t in raws]
    known = [int(n) for n in numbers if n is not None]
    return (_first_error(*raws) or (raws[0] if raws else None)), (sum(known) if known else None)


def _clock_events(gpu: Node) -> tuple[str | None, int | None]:
    section = gpu.find(
        "clocks_event_reasons|clocks_throttle_reasons|Clocks Event Reasons|Clocks Throttle Reasons"
    )
    if section is None:
        return None, None
    mask, seen, raw = 0, False, None
    for bit, tag, label in CLOCK_EVENTS:
        node = None
        for name in (f"clocks_event_reason_{tag}", f"clocks_throttle_reason_{tag}", label):
            node = section.descendant(name)
            if node is not None:
                break
        if node is None and tag == "display_clocks_setting":
            node = section.descendant("clocks_event_reason_display_clock_setting")
        if node is None:
            continue
        raw = raw or (node.text if _error_of(node.text) else None)
        state = _yes(node.text)
        if state is not None:
            seen = True
            mask |= bit if state else 0
    return raw, mask if seen else None


def _mig_devices(gpu: Node, mig_uuids: dict[int, str], gpu_index: int) -> dict[str, dict[str, Any]]:
    section = gpu.find("mig_devices|MIG Devices")
    nodes = (section.all("mig_device") if section is not None else []) + gpu.all("MIG Device")
    out: dict[str, dict[str, Any]] = {}
    for position, node in enumerate(nodes):
        index = _number(node.value("index|Index"))
        slot = int(index) if index is not None else position
        answers = _Answers()
        # Older drivers and the text form print no MIG UUID; `nvidia-smi -L` does. Without it the
        # instance keeps a name that says so, never an invented UUID.
        own = node.value("uuid|UUID|MIG UUID") or ""
        uuid = own if own.upper().startswith("MIG-") else mig_uuids.get(slot)
        answers.put(
            "nvmlDeviceGetUUID", None, uuid or f"MIG-unrecorded-gpu{gpu_index}-instance{slot}"
        )
        total = node.value(
            "fb_memory_usage/total|Shared FB Memory Usage/Total|FB Memory Usage/Total"
        )
        used = node.value("fb_memory_usage/used|Shared FB Memory Usage/Used|FB Memory Usage/Used")
        if _bytes(total) is not None:
            answers.put(
                "nvmlDeviceGetMemoryInfo",
                total,
                {
                    "total": _bytes(total),
                    "used": _bytes(used) or 0,
                    "free": (_bytes(total) or 0) - (_bytes(used) or 0),
                },
            )
        sms = node.value(
            "device_attributes/shared/multiprocessor_count|Device "
            "Attributes/Shared/Multiprocessor count"
        )
        if _number(sms) is not None:
            answers.put("nvmlDeviceGetAttributes", sms, {"multiprocessorCount": int(_number(sms))})  # type: ignore[arg-type]
        out[str(slot)] = answers.calls
    return out


def _put_processes(a: _Answers, listed: dict[str, Any] | None) -> None:
    """The process lists as NVML's answers; a list the capture does not report stays unanswered
    (NotSupported: "not reported"), never an empty list."""
    if listed is None:
        return
    if listed["error"]:
        a.calls["nvmlDeviceGetComputeRunningProcesses"] = error_answer(listed["error"])
        a.calls["nvmlDeviceGetGraphicsRunningProcesses"] = error_answer(listed["error"])
        return
    names: dict[str, str] = {}
    for key, kind in (
        ("nvmlDeviceGetComputeRunningProcesses", "compute"),
        ("nvmlDeviceGetGraphicsRunningProcesses", "graphics"),
    ):
        if listed[kind] is not None:
            a.calls[key] = [{"pid": p["pid"], "usedGpuMemory": p["used"]} for p in listed[kind]]
            names.update({str(p["pid"]): p["name"] for p in listed[kind] if p["name"]})
    a.calls["process_names"] = names


def _descendant_value(section: Node | None, *names: str) -> str | None:
    """The first of these labels anywhere under a section (new drivers nest power limits one
    level deeper, under "GPU Ceiling Power Limit")."""
    if section is None:
        return None
    for name in names:
        node = section.descendant(name)
        if node is not None:
            return node.text
    return None


def _gpu_answers(
    gpu: Node, index: int, mig_uuids: dict[int, str], driver_version: str | None = None
) -> dict[str, Any]:
    a = _Answers()
    name = gpu.value("product_name|Product Name")
    a.put("nvmlDeviceGetName", name, name)
    uuid = gpu.value("uuid|GPU UUID")
    a.put("nvmlDeviceGetUUID", uuid, uuid)
    bus = gpu.value("pci/pci_bus_id|PCI/Bus Id") or gpu.text
    a.put("nvmlDeviceGetPciInfo", bus, capture_pci_info(bus, gpu))
    total, used = (
        gpu.value("fb_memory_usage/total|FB Memory Usage/Total"),
        gpu.value("fb_memory_usage/used|FB Memory Usage/Used"),
    )
    if _bytes(total) is not None and _bytes(used) is not None:
        _put_memory(
            a,
            _bytes(total),
            _bytes(used),
            _bytes(gpu.value("fb_memory_usage/reserved|FB Memory Usage/Reserved")),
        )  # type: ignore[arg-type]
    else:
        a.put("nvmlDeviceGetMemoryInfo", _first_error(total, used), None)
    ecc = gpu.value("ecc_mode/current_ecc|ECC Mode/Current")
    a.put("nvmlDeviceGetCurrentEccMode", ecc, None if _yes(ecc) is None else int(bool(_yes(ecc))))
    raw, uncorrected = _ecc_uncorrected(gpu)
    a.put(
        call_key(
            "nvmlDeviceGetTotalEccErrors",
            NvmlConstants.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            NvmlConstants.NVML_VOLATILE_ECC,
        ),
        raw,
        uncorrected,
    )
    link = "pci/pci_gpu_link_info|PCI/GPU Link Info"
    for key, path in (
        (
            "nvmlDeviceGetCurrPcieLinkGeneration",
            "pcie_gen/current_link_gen|PCIe Generation/Current",
        ),
        ("nvmlDeviceGetMaxPcieLinkGeneration", "pcie_gen/max_link_gen|PCIe Generation/Max"),
        (
            "nvmlDeviceGetGpuMaxPcieLinkGeneration",
            "pcie_gen/max_device_link_gen|PCIe Generation/Device Max",
        ),
        ("nvmlDeviceGetCurrPcieLinkWidth", "link_widths/current_link_width|Link Width/Current"),
        ("nvmlDeviceGetMaxPcieLinkWidth", "link_widths/max_link_width|Link Width/Max"),
    ):
        section = gpu.find(link)
        text = section.value(path) if section is not None else None
        number = _number(text)
        a.put(
            key, text, int(number) if number else None
        )  # 0 (host max on some hosts) means unknown
    power = gpu.find("gpu_power_readings|power_readings|GPU Power Readings|Power Readings")
    limit = _descendant_value(
        power,
        "current_power_limit",
        "enforced_power_limit",
        "Current Power Limit",
        "Enforced Power Limit",
        "power_limit",
        "Power Limit",
    )
    default = _descendant_value(power, "default_power_limit", "Default Power Limit")
    draw = _descendant_value(
        power, "instant_power_draw", "power_draw", "Instantaneous Power Draw", "Power Draw"
    )
    a.put(
        "nvmlDeviceGetEnforcedPowerLimit",
        limit,
        None if _number(limit) is None else int(_number(limit) * 1000),
    )  # type: ignore[operator]
    a.put(
        "nvmlDeviceGetPowerManagementDefaultLimit",
        default,
        None if _number(default) is None else int(_number(default) * 1000),
    )  # type: ignore[operator]
    a.put(
        "nvmlDeviceGetPowerUsage",
        draw,
        None if _number(draw) is None else int(_number(draw) * 1000),
    )  # type: ignore[operator]
    raw, mask = _clock_events(gpu)
    a.put("nvmlDeviceGetCurrentClocksEventReasons", raw, mask)
    mode = gpu.value("compute_mode|Compute Mode")
    modes = {"default": 0, "exclusive_thread": 1, "prohibited": 2, "exclusive_process": 3}
    a.put("nvmlDeviceGetComputeMode", mode, modes.get((mode or "").lower().replace(" ", "_")))
    persistence = gpu.value("persistence_mode|Persistence Mode")
    a.put(
        "nvmlDeviceGetPersistenceMode",
        persistence,
        None if _yes(persistence) is None else int(bool(_yes(persistence))),
    )
    util = gpu.value("utilization/gpu_util|Utilization/GPU")
    mem_util = gpu.value("utilization/memory_util|Utilization/Memory")
    a.put(
        "nvmlDeviceGetUtilizationRates",
        util,
        None
        if _number(util) is None
        else {"gpu": int(_number(util)), "memory": int(_number(mem_util) or 0)},
    )  # type: ignore[arg-type]
    for key, path in (
        (
            call_key("nvmlDeviceGetClockInfo", NvmlConstants.NVML_CLOCK_SM),
            "clocks/sm_clock|Clocks/SM",
        ),
        (
            call_key("nvmlDeviceGetMaxClockInfo", NvmlConstants.NVML_CLOCK_SM),
            "max_clocks/sm_clock|Max Clocks/SM",
        ),
        (
            call_key("nvmlDeviceGetApplicationsClock", NvmlConstants.NVML_CLOCK_GRAPHICS),
            "applications_clocks/graphics_clock|Applications Clocks/Graphics",
        ),
        (
            call_key("nvmlDeviceGetDefaultApplicationsClock", NvmlConstants.NVML_CLOCK_GRAPHICS),
            "default_applications_clocks/graphics_clock|Default Applications Clocks/Graphics",
        ),
        (
            call_key("nvmlDeviceGetApplicationsClock", NvmlConstants.NVML_CLOCK_MEM),
            "applications_clocks/mem_clock|Applications Clocks/Memory",
        ),
        (
            call_key("nvmlDeviceGetDefaultApplicationsClock", NvmlConstants.NVML_CLOCK_MEM),
            "default_applications_clocks/mem_clock|Default Applications Clocks/Memory",
        ),
        (
            call_key("nvmlDeviceGetTemperature", NvmlConstants.NVML_TEMPERATURE_GPU),
            "temperature/gpu_temp|Temperature/GPU Current Temp",
        ),
    ):
        # the temperature given twice is judged by its hotter reading (a hostile or pasted capture)
        text = gpu.worst(path) if "Temperature" in path else gpu.value(path)
        a.put(key, text, None if _number(text) is None else int(_number(text)))  # type: ignore[arg-type]
    pending = gpu.value(
        "retired_pages/pending_retirement|retired_pages/pending_blacklist|Retired Pages/Pending "
        "Page Retirement|Retired Pages/Pending Page Blacklist|Retired Pages/Pending"
    )
    a.put(
        "nvmlDeviceGetRetiredPagesPendingStatus",
        pending,
        None if _yes(pending) is None else int(bool(_yes(pending))),
    )
    rows = gpu.find("remapped_rows|Remapped Rows")
    if rows is not None and rows.children:
        corr = rows.value("remapped_row_corr|Correctable Error")
        unc = rows.value("remapped_row_unc|Uncorrectable Error")
        row_pending = rows.value("remapped_row_pending|Pending")
        failure = rows.value("remapped_row_failure|Remapping Failure Occurred")
        if _yes(row_pending) is not None and _yes(failure) is not None:
            a.put(
                "nvmlDeviceGetRemappedRows",
                None,
                [
                    int(_number(corr) or 0),
                    int(_number(unc) or 0),
                    int(bool(_yes(row_pending))),
                    int(bool(_yes(failure))),
                ],
            )
        else:
            a.put("nvmlDeviceGetRemappedRows", _first_error(corr, unc, row_pending, failure), None)
    mig = gpu.value("mig_mode/current_mig|MIG Mode/Current")
    pending_mig = gpu.value("mig_mode/pending_mig|MIG Mode/Pending")
    if _yes(mig) is not None:
        a.put(
            "nvmlDeviceGetMigMode",
            mig,
            [
                int(bool(_yes(mig))),
                int(bool(_yes(pending_mig) if _yes(pending_mig) is not None else _yes(mig))),
            ],
        )
        if _yes(mig):
            devices = _mig_devices(gpu, mig_uuids, index)
            a.calls["mig"] = devices
            a.calls["nvmlDeviceGetMaxMigDeviceCount"] = max([7] + [int(k) + 1 for k in devices])
    _put_processes(a, smi_sections.processes(gpu))
    mode, host_mode = smi_sections.virtualization(gpu)
    a.put("nvmlDeviceGetVirtualizationMode", None, mode)
    a.put("nvmlDeviceGetHostVgpuMode", None, host_mode)
    a.put("nvmlDeviceGetGridLicensableFeatures", None, smi_sections.vgpu_license(gpu))
    fabric = smi_sections.fabric(gpu)
    if fabric is not None:
        a.calls["nvmlDeviceGetGpuFabricInfo"] = fabric
    a.calls.update(
        smi_health.answers(gpu, fabric, driver_version)
    )  # the DCGM-style health rows' readings
    return a.calls


# --- whole captures -------------------------------------------------------------------------


def _cuda_encoded(text: str | None) -> int | None:
    match = re.match(r"^\s*(\d+)\.(\d+)", text or "")
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10 if match else None


#: What nvidia-smi's header block holds, named for a reader: an excerpt without it lacks these.
HEADER_FIELDS = ("the driver version", "the CUDA version", "the count of attached GPUs")


def capture_scope(root: Node, header: bool) -> dict[str, Any]:
    """What the capture holds against what it says it should: its GPU sections, the count of
    attached GPUs its header prints (`Attached GPUs : 4`, `<attached_gpus>`; None when not
    printed) and, for an excerpt that starts at a GPU section, what the missing header held.
    Kept beside the NVML answers (NVML has no word for "cut short"); validate/judge/capture.py
    judges it."""
    attached = _number(root.value("attached_gpus|Attached GPUs")) if header else None
    return {
        "gpu_sections": len(root.all("gpu")),
        "attached_gpus": None if attached is None else int(attached),
        "header": header,
        "absent": [] if header else list(HEADER_FIELDS),
    }


def recording_from_tree(
    root: Node, source: str, mig_uuids: dict[int, dict[int, str]] | None = None, header: bool = True
) -> dict[str, Any]:
    """A recording of NVML answers from nvidia-smi's tree (XML or text); `header` False for an
    excerpt that starts at a GPU section (no driver, CUDA version or GPU count in it)."""
    gpus = root.all("gpu")
    system: dict[str, Any] = {}
    driver = re.match(
        r"^\s*(\d+(?:\.\d+)+)", root.value("driver_version|Driver Version|KMD Version") or ""
    )
    if driver:  # "610.57.04 [Deprecated ...]" on new drivers: the version only
        system["nvmlSystemGetDriverVersion"] = driver.group(1)
    cuda = _cuda_encoded(root.value("cuda_version|CUDA Version"))
    if cuda is not None:
        system["nvmlSystemGetCudaDriverVersion_v2"] = cuda
    system["nvmlDeviceGetCount"] = len(gpus)
    driver_version = system.get("nvmlSystemGetDriverVersion")
    devices = [
        _gpu_answers(gpu, i, (mig_uuids or {}).get(i, {}), driver_version)
        for i, gpu in enumerate(gpus)
    ]
    names = {pid: name for d in devices for pid, name in d.pop("process_names", {}).items()}
    for pid, name in names.items():
        system[call_key("nvmlSystemGetProcessName", pid)] = name
    recording = {
        "format": RECORDING_FORMAT,
        "source": source,
        "system": system,
        "devices": devices,
        "capture": capture_scope(root, header),
    }
    return with_compute_capabilities(check_counts(recording, source, root))


def parse_xml(text: str, source: str = "nvidia-smi -q -x") -> dict[str, Any]:
    """An `nvidia-smi -q -x` capture as a recording. The DOCTYPE is not fetched (stdlib parser)."""
    if "<!DOCTYPE" in text[:4096]:  # in the prolog, if anywhere: not searched for through 16 MB
        text = re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1)
    element = bounded_xml(text, source)
    if element.tag == "gpu":  # an excerpt: one <gpu> section without the log around it
        return recording_from_tree(
            Node("nvidia_smi_log", "", [_from_element(element)]), source, header=False
        )
    if element.tag != "nvidia_smi_log":
        raise CaptureError(
            f"{source}: XML root is <{element.tag}>, not nvidia-smi's <nvidia_smi_log> (make it "
            "with nvidia-smi -q -x)"
        )
    return recording_from_tree(_from_element(element), source)


_MIG_LINE = re.compile(r"^\s+MIG\s.*Device\s+(\d+):\s+\(UUID:\s*(MIG-[^)\s]+)\)")
_GPU_LINE = re.compile(r"^GPU\s+(\d+):.*\(UUID:\s*(GPU-[^)\s]+)\)")


def _mig_uuids_from_list(lines: list[str]) -> dict[int, dict[int, str]]:
    """`nvidia-smi -L`: MIG instance UUIDs per GPU index and MIG device index."""
    out: dict[int, dict[int, str]] = {}
    gpu = None
    for line in lines:
        head = _GPU_LINE.match(line)
        if head:
            gpu = int(head.group(1))
            continue
        mig = _MIG_LINE.match(line)
        if mig and gpu is not None:
            out.setdefault(gpu, {})[int(mig.group(1))] = mig.group(2)
    return out


def _log_blocks(lines: list[str]) -> Iterator[tuple[str, list[str]]]:
    """Each `nvidia-smi -q` block ("==NVSMI LOG==" up to the next "####" banner), with the
    banner line above it (a capture file may hold idle and load runs)."""
    banner, block = "", None
    for line in lines:
        if line.startswith("# ") and "::" in line:
            banner = line
        if "NVSMI LOG" in line:
            block = []
            continue
        if block is not None:
            if line.startswith("####"):
                yield banner, block
                block = None
            else:
                block.append(line)
    if block is not None:
        yield banner, block


def _excerpt(lines: list[str]) -> list[str] | None:
    """An excerpt of `nvidia-smi -q` that starts at a GPU section ("GPU 00000000:18:00.0"), as
    pasted into an issue or a README (often indented as a whole): its lines from the first GPU
    section on, that indentation removed; None when no GPU section is there."""
    for start, line in enumerate(lines):
        if _GPU_HEAD.match(line.strip()):
            indent = len(line) - len(line.lstrip(" "))
            return [raw[indent:] if not raw[:indent].strip() else raw for raw in lines[start:]]
    return None


def parse_text(text: str, source: str = "nvidia-smi -q") -> dict[str, Any]:
    """An `nvidia-smi -q` text capture as a recording. A file holding several runs (idle and
    under load) gives the idle one: the state a server is validated in. MIG UUIDs come from an
    `nvidia-smi -L` listing in the same file when there is one."""
    count_items(text, source, xml=False)  # every reader below walks every line
    lines = text.splitlines()
    blocks = list(_log_blocks(lines))
    if not blocks:
        excerpt = _excerpt(lines)
        if excerpt is None:
            raise CaptureError(
                f"{source}: no '==NVSMI LOG==' block and no 'GPU 00000000:..' section: "
                "give the output of nvidia-smi -q or nvidia-smi -q -x"
            )
        return recording_from_tree(
            _text_tree(excerpt, source), source, _mig_uuids_from_list(lines), header=False
        )
    banner, block = next(((b, body) for b, body in blocks if "idle" in b.lower()), blocks[0])
    recording = recording_from_tree(
        _text_tree(block, source),
        source + (f" ({banner.lstrip('# ').strip()})" if banner else ""),
        _mig_uuids_from_list(lines),
    )
    return recording


def check_recording(data: Any, source: str) -> dict[str, Any]:
    """gpuenv's own recording, checked enough that replay cannot trip on its shape."""
    if not isinstance(data, dict) or not str(data.get("format", "")).startswith(
        "gpuenv-nvml-recording/"
    ):
        raise CaptureError(
            f"{source}: JSON but not a {RECORDING_FORMAT} file (make one with python -m validate "
            "--record DIR)"
        )
    if data["format"] != RECORDING_FORMAT:
        raise CaptureError(
            f"{source}: recording format {data['format']} is newer than this suite reads "
            f"({RECORDING_FORMAT}): update gpuenv"
        )
    if (
        not isinstance(data.get("system"), dict)
        or not isinstance(data.get("devices"), list)
        or not all(isinstance(d, dict) for d in data["devices"])
    ):
        raise CaptureError(
            f"{source}: {RECORDING_FORMAT} file without 'system' and 'devices': it is damaged; "
            "record it again with python -m validate --record DIR"
        )
    return data


def parse_capture(text: str, source: str = "capture") -> dict[str, Any]:
    """Any capture this suite reads, by its content: XML, gpuenv JSON, or nvidia-smi -q text;
    bounded (nesting, number sizes) and its counts checked against what hardware can have."""
    head = text.lstrip()[:200]
    if head.startswith("{"):
        try:
            data = load_json_input(text, max_depth=MAX_CAPTURE_DEPTH, max_values=MAX_CAPTURE_ITEMS)
        except InputRefused as err:
            raise CaptureError(
                f"{source}: {err}: give a recording python -m validate --record DIR wrote, "
                "unchanged"
            ) from None
        return terminal_safe(check_counts(check_recording(data, source), source))
    count_items(text, source, xml=head.startswith("<"))  # the cheapest refusal first
    digits, line = longest_digit_run(text, MAX_DIGITS)
    if digits:
        raise CaptureError(
            f"{source}:{line}: a {digits}-digit number, which no nvidia-smi value has: capture "
            "it again with nvidia-smi -q -x"
        )
    if head.startswith("<"):
        return terminal_safe(
            parse_xml(text, source)
        )  # both nvidia-smi forms are checked by recording_from_tree
    indent = max((len(line) - len(line.lstrip(" ")) for line in text.splitlines()), default=0)
    if (
        indent // 4 > MAX_CAPTURE_DEPTH
    ):  # four spaces a level: readers of the tree recurse per level
        raise CaptureError(
            f"{source}: lines indented {indent // 4} levels deep, which no nvidia-smi -q output "
            "is: capture it again with nvidia-smi -q"
        )
    return terminal_safe(parse_text(text, source))


#: A capture parsed for a reader that is not its last, as (source, text, recording): `python -m
#: validate --replay FILE` checks the file before pytest starts (a bad one is one line, not a
#: usage error) and the session then judges it. An 8-GPU capture took 0.4 s to parse, twice.
_kept: list[tuple[str, str, dict[str, Any]]] = []


def load_capture(path: str | Path, *, keep: bool = False) -> dict[str, Any]:
    """Read a capture file through the one bounded reader (validate.reading); every way it is
    unusable is a CaptureError naming the file. With `keep` (a check that only looks at it), the
    recording is also kept for the next load of the same unchanged file, which takes it: later
    loads parse again, so no two sessions share one mutable recording."""
    try:
        text = read_text_input(path, MAX_CAPTURE_BYTES)
    except InputRefused as err:
        raise CaptureError(
            f"{path}: {err}: give an nvidia-smi -q -x capture or a gpuenv recording (python -m "
            "validate --record DIR)"
        ) from None
    if _kept:
        source, kept_text, recording = _kept.pop()
        if (
            source == str(path) and kept_text == text
        ):  # the same file, unchanged since it was checked
            return recording
    recording = parse_capture(text, str(path))
    if keep:
        _kept.append((str(path), text, recording))
    return recording


# --- compute capability by product name (captures do not hold it) --------------------------
# The table and its matching live in validate/host/archs.py.


def with_compute_capabilities(recording: dict[str, Any]) -> dict[str, Any]:
    """A capture's recording with nvmlDeviceGetCudaComputeCapability answered from gpu_archs.yaml
    for the products it lists, by PCI device id first, then name (validate/host/archs.identify):
    NVML would answer it; nvidia-smi does not print it. Products not
    in the table stay unanswered, so they read as unknown. Each filled answer is listed under
    "derived" with its source."""
    table = load_archs()
    derived = recording.setdefault("derived", {})
    for index, calls in enumerate(recording.get("devices", [])):
        name = calls.get("nvmlDeviceGetName")
        if "nvmlDeviceGetCudaComputeCapability" in calls or not isinstance(name, str):
            continue
        pci = calls.get("nvmlDeviceGetPciInfo")
        device = device_id_of(pci.get("pciDeviceId")) if isinstance(pci, dict) else None
        known = identify(name, device, table).known
        if known is not None:
            major, minor = (int(p) for p in known.compute_capability.split("."))
            calls["nvmlDeviceGetCudaComputeCapability"] = [major, minor]
            derived[f"GPU {index} compute capability"] = (
                f"{known.compute_capability} for {name} ({known.source})"
            )
    return recording
