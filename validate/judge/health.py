"""Health rows DCGM and operators read before a job, judged from what NVML reports (pure).

Each fault names its cause and its fix. Sources:
- clock event reasons: NVML's nvml.h (nvmlClocksEventReason*: HW Slowdown "is an indicator of
  temperature being too high, External Power Brake Assertion ... triggered (e.g. by the system
  power supply), power draw too high and Fast Trigger protection"; SW Power Cap is the power
  limit at work; Idle is an idle GPU), https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html
- the NVSwitch fabric: NVIDIA's Fabric Manager user guide: on NVSwitch systems CUDA can start only
  once every GPU has registered with the fabric ("Completed"); "In Progress" means the fabric
  manager is not running (or, from B200 on, its NVLSM dependency is missing), and CUDA fails
  with "system not yet initialized" (cudaErrorSystemNotReady),
  https://docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf
"""

from __future__ import annotations

from validate.judge.verdict import FAIL, INFO, PASS, SKIP, WARN, Verdict

#: GPU utilisation at or above which a reading counts as "under load" (a capture of a busy GPU).
LOADED_UTILISATION = 50


def ecc_verdict(uncorrected: int | None, gpu_index: int | None = None) -> Verdict:
    if uncorrected is None:
        return Verdict(SKIP, "0 uncorrected", "ECC is off or not reported on this GPU")
    if uncorrected == 0:
        return Verdict(PASS, "0 uncorrected")
    who = f"GPU {gpu_index}: " if gpu_index is not None else ""
    return Verdict(
        FAIL,
        "0 uncorrected",
        f"{who}{uncorrected} uncorrected ECC errors since the driver loaded: drain it, check "
        "dmesg for Xid 48/94/95, and reset the GPU so the bad memory is remapped or retired",
    )


def throttle_verdict(reasons: list[str] | None, bad: frozenset[str]) -> Verdict:
    if reasons is None:
        return Verdict(
            SKIP, "no thermal/power-brake slowdown", "NVML does not report clock-event reasons"
        )
    found = sorted(set(reasons) & bad)
    if not found:
        return Verdict(PASS, "no thermal/power-brake slowdown")
    return Verdict(
        FAIL, "no thermal/power-brake slowdown", "clocks held down by " + ", ".join(found)
    )


def power_limit_verdict(
    enforced_watts: float | None, default_watts: float | None, gpu_index: int | None = None
) -> Verdict:
    """The enforced power limit against the GPU's default: a cap set below it (nvidia-smi -pl,
    a BMC policy) slows every kernel that reaches the cap."""
    if enforced_watts is None or default_watts is None:
        return Verdict(SKIP, "enforced >= 0.95 x default", "NVML does not report the power limits")
    threshold = f">= 0.95 x default {default_watts:.0f} W"
    if enforced_watts >= 0.95 * default_watts:
        return Verdict(PASS, threshold)
    return Verdict(
        FAIL,
        threshold,
        (f"GPU {gpu_index}: " if gpu_index is not None else "")
        + f"power limit {enforced_watts:.0f} W is below the default {default_watts:.0f} W: "
        f"restore it (nvidia-smi{f' -i {gpu_index}' if gpu_index is not None else ''} -pl "
        f"{default_watts:.0f}) or ask who capped it",
    )


#: Clock event reasons that mean something is wrong, each with its cause and its fix.
BAD_CLOCK_EVENTS = {
    "hw_power_brake_slowdown": (
        "the baseboard asserted the external power brake",
        "check the power supplies and the BMC's power policy and event log (ipmitool sel list), "
        "then reseat or replace the failed PSU",
    ),
    "hw_thermal_slowdown": (
        "the GPU reached its hardware slowdown temperature",
        "check airflow, fans and inlet temperature (nvidia-smi -q -d TEMPERATURE)",
    ),
    "hw_slowdown": (
        "the hardware halved the clocks or more (too hot, a power-brake signal, or power draw "
        "over the fast trigger)",
        "check temperatures (nvidia-smi -q -d TEMPERATURE), the power supplies and the BMC "
        "event log",
    ),
    "sw_thermal_slowdown": (
        "the driver cut the clocks because the GPU is above its maximum operating temperature",
        "improve cooling: check airflow, fans and inlet temperature",
    ),
}
#: Reasons a healthy GPU shows: idle, its own power limit under load, a sync-boost group,
#: display clocks. Applications clocks are judged by the "user-set clocks" row.
HARMLESS_CLOCK_EVENTS = frozenset(
    {
        "gpu_idle",
        "sw_power_cap",
        "sync_boost",
        "display_clock_setting",
        "applications_clocks_setting",
    }
)


def clock_event_causes(reasons: list[str]) -> str:
    """'hw_power_brake_slowdown: the baseboard asserted ... : check ...; ...' for the bad reasons.
    HW Slowdown is named through its sub-reason (power brake, thermal) when one is set."""
    bad = [r for r in BAD_CLOCK_EVENTS if r in reasons]
    if "hw_slowdown" in bad and ({"hw_power_brake_slowdown", "hw_thermal_slowdown"} & set(bad)):
        bad.remove("hw_slowdown")
    text = "; ".join(f"{r}: {BAD_CLOCK_EVENTS[r][0]}: {BAD_CLOCK_EVENTS[r][1]}" for r in bad)
    if bad and "sync_boost" in reasons:
        text += "; sync_boost is also set: the GPUs of its sync-boost group follow the slowest one"
    return text


#: The bad reasons that stand for themselves: each fails on one reading. Bare hw_slowdown does
#: not: nvml.h's nvmlClocksEventReasonHwSlowdown "May be also reported during PState or clock
#: change" (the same words in DCGM's DCGM_CLOCKS_EVENT_REASON_HW_SLOWDOWN).
SPECIFIC_CLOCK_EVENTS = frozenset(
    {"hw_power_brake_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown"}
)


def only_bare_hw_slowdown(reasons: list[str] | None) -> bool:
    """HW Slowdown with none of the reasons that name a real cause: worth reading again."""
    return bool(reasons) and "hw_slowdown" in reasons and not SPECIFIC_CLOCK_EVENTS & set(reasons)


def clock_events_verdict(
    gpu_index: int,
    reasons: list[str] | None,
    when: str = "at idle",
    rereads: list[list[str] | None] | None = None,
) -> Verdict:
    """Clock event reasons read once (at idle, or in a capture of a busy GPU): a hardware or
    thermal slowdown fails, naming cause and fix; idle and the power cap pass. `rereads`: the
    reasons read again over about a second where the first reading held only bare hw_slowdown,
    which a P-state change also sets: it fails only if every re-reading still holds it."""
    threshold = "no HW slowdown, power brake or thermal slowdown"
    if reasons is None:
        return Verdict(
            SKIP,
            threshold,
            "clock event reasons not reported (NVML NotSupported, or the capture lacks the "
            "section)",
        )
    if rereads and only_bare_hw_slowdown(reasons):
        later = [r for r in rereads if r is not None]
        if later and any("hw_slowdown" not in r for r in later):
            cleared = sum("hw_slowdown" not in r for r in later)
            return Verdict(
                PASS,
                threshold,
                f"GPU {gpu_index}: hw_slowdown read once {when}, cleared in {cleared} of "
                f"{len(later)} readings over about a second (nvml.h: also reported during a "
                "P-state or clock change)",
            )
        reasons = next((r for r in reversed(later) if only_bare_hw_slowdown(r)), reasons)
        when = f"{when}, in {len(later) + 1} readings over about a second"
    causes = clock_event_causes(reasons)
    if causes:
        return Verdict(FAIL, threshold, f"GPU {gpu_index} clocks held down {when}: {causes}")
    return Verdict(PASS, threshold)


def fabric_verdict(gpu_index: int, state: str | None, status: str | None) -> Verdict:
    """The GPU's registration with the NVSwitch fabric: anything but Completed/Success means CUDA
    cannot start on it ("system not yet initialized"), whatever else reads healthy."""
    threshold = "fabric Completed, status Success"
    if state is None:
        return Verdict(
            SKIP,
            threshold,
            "no NVSwitch fabric reported for this GPU (PCIe or NVLink-bridge part, or a driver "
            "before 530)",
        )
    if state == "Completed" and status == "Success":
        return Verdict(PASS, threshold)
    if state == "Completed" and status is None:
        return Verdict(SKIP, threshold, f"GPU {gpu_index}: fabric Completed, status not reported")
    fix = (
        "start the fabric manager (systemctl enable --now nvidia-fabricmanager; on B200 and "
        "newer also its NVLSM dependency), check journalctl -u nvidia-fabricmanager, and reset "
        "the GPUs if the state stays In Progress"
    )
    if state == "Completed":
        why = (
            f"GPU {gpu_index} finished fabric registration with an error ({status}): the fabric "
            "manager reported a failed NVSwitch/NVLink setup"
        )
        return Verdict(FAIL, threshold, f"{why}: {fix}")
    return Verdict(
        FAIL,
        threshold,
        f"GPU {gpu_index} fabric {state}{', status ' + status if status else ''}: CUDA will fail "
        f"with 'system not yet initialized' until nvidia-fabricmanager registers it: {fix}",
    )


def fabric_text(state: str | None, status: str | None) -> str:
    """The measured cell: 'Completed / Success', or 'not reported'."""
    if state is None:
        return "not reported"
    return f"{state} / {status or 'status not reported'}"


def reasons_text(reasons: list[str] | None) -> str:
    return "not reported" if reasons is None else (",".join(reasons) or "none")


# --- health as DCGM reads it: each fault names the GPU and the fix ---------------------------


def _gib_text(n: int | None) -> str:
    return "memory unknown" if n is None else f"{n / 2**30:.2f} GiB"


def _listed(processes: list[dict]) -> str:
    return ", ".join(
        f"PID {p['pid']}{' (' + p['name'] + ')' if p.get('name') else ''} holding "
        f"{_gib_text(p.get('used_bytes'))}"
        for p in processes
    )


def compute_processes_verdict(gpu_index: int, processes: list[dict] | None) -> Verdict:
    """Other compute processes on the GPU (dicts of nvml.GpuProcess) take its memory and time:
    every figure measured meanwhile is wrong, and the job they belong to is disturbed. None: NVML
    could not list them (NoPermission, NotSupported, a capture without the section): a skip."""
    threshold = "no other compute process"
    if processes is None:
        return Verdict(
            SKIP,
            threshold,
            f"GPU {gpu_index}: the process list is not reported (NVML could not list it, or the "
            "capture lacks it)",
        )
    if not processes:
        return Verdict(PASS, threshold)
    return Verdict(
        FAIL,
        threshold,
        f"GPU {gpu_index} is in use by {_listed(processes)}: stop them or drain the GPU before "
        "validating (nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv)",
    )


def graphics_processes_verdict(gpu_index: int, processes: list[dict] | None) -> Verdict:
    """A display server or desktop on the GPU: it works, but holds memory and time (a warning)."""
    threshold = "no graphics process"
    if processes is None:
        return Verdict(
            SKIP,
            threshold,
            f"GPU {gpu_index}: graphics processes are not reported (NVML could not list them, or "
            "the capture lists compute processes only)",
        )
    if not processes:
        return Verdict(PASS, threshold)
    return Verdict(
        WARN,
        threshold,
        f"GPU {gpu_index} drives graphics: {_listed(processes)}; for training run the server "
        "headless (systemctl set-default multi-user.target) or use another GPU for display",
    )


def row_remap_verdict(
    gpu_index: int, pending: bool | None, failure: bool | None, uncorrectable: int | None = None
) -> Verdict:
    """Row remapping (A100 and newer): a pending remap waits for a GPU reset; a failure means the
    GPU has no spare rows left for a failing memory row."""
    threshold = "no pending remap, no remap failure"
    if pending is None and failure is None:
        return Verdict(
            SKIP,
            threshold,
            "this GPU does not report row remapping (older than Ampere, or a MIG/consumer part)",
        )
    if failure:
        return Verdict(
            FAIL,
            threshold,
            f"GPU {gpu_index} failed to remap a memory row ({uncorrectable or 0} uncorrectable "
            "remaps): drain the node and replace the GPU (RMA), as NVIDIA's memory error guide "
            "says",
        )
    if pending:
        return Verdict(
            FAIL,
            threshold,
            f"GPU {gpu_index} has a row remap pending: drain it, then reset the GPU (nvidia-smi "
            f"-r -i {gpu_index}) or reboot to apply it",
        )
    return Verdict(PASS, threshold)


def retired_pages_verdict(gpu_index: int, pending: bool | None) -> Verdict:
    """Page retirement (before Ampere): retired pages wait for a reload of the driver."""
    threshold = "no page retirement pending"
    if pending is None:
        return Verdict(
            SKIP,
            threshold,
            "page retirement not reported on this GPU (Ampere and newer remap rows instead)",
        )
    if pending:
        return Verdict(
            FAIL,
            threshold,
            f"GPU {gpu_index} has retired pages pending: reset the GPU (nvidia-smi -r -i "
            f"{gpu_index}) or reboot so they take effect",
        )
    return Verdict(PASS, threshold)


def clocks_verdict(
    gpu_index: int, applications: tuple | None, default: tuple | None, reasons: list[str] | None
) -> Verdict:
    """Clocks a user set: applications clocks away from their default, or the clock event
    "applications clocks setting" (which NVML also reports for clocks locked with -lgc/-lmc)."""
    threshold = "default clocks"
    changed = (
        applications is not None
        and default is not None
        and any(a is not None and d is not None and a != d for a, d in zip(applications, default))
    )
    held = reasons is not None and "applications_clocks_setting" in reasons
    if not changed and not held:
        if applications is None and reasons is None:
            return Verdict(
                SKIP, threshold, "NVML reports neither applications clocks nor clock event reasons"
            )
        comparable = default is not None and any(
            a is not None and d is not None for a, d in zip(applications or (), default)
        )
        if (
            applications is not None and not comparable
        ):  # set clocks read, their defaults not: unknown, not default
            return Verdict(
                SKIP,
                threshold,
                f"GPU {gpu_index}: applications clocks read, their defaults not reported: cannot "
                "tell whether someone set them",
            )
        return Verdict(PASS, threshold)
    what = (
        f"applications clocks set to {applications[0]}/{applications[1]} MHz, default "
        f"{default[0]}/{default[1]} MHz"
        if changed
        else "clocks held by an applications/locked clocks setting"
    )  # type: ignore[index]
    return Verdict(
        FAIL,
        threshold,
        f"GPU {gpu_index}: {what}: reset them (nvidia-smi -i {gpu_index} -rac; -rgc and -rmc for "
        "locked clocks) or ask who set them",
    )


def persistence_verdict(gpu_index: int, enabled: bool | None) -> Verdict:
    """Persistence mode: information only (it slows the first use of an idle GPU, no more)."""
    if enabled is None:
        return Verdict(INFO, "", "persistence mode not reported")
    if enabled:
        return Verdict(INFO, "")
    return Verdict(
        INFO,
        "",
        f"GPU {gpu_index}: persistence mode is off: the driver sets the GPU up again for each "
        "first process (seconds per start); run nvidia-persistenced (or nvidia-smi -pm 1)",
    )
