"""The health rows DCGM's health watches and diagnostic judge that the suite's own rows did not:
PCIe replays, the infoROM, the temperature against the GPU's own thresholds, NVLink errors, the
NVSwitch fabric's health and the clock-event counters (pure). The figures and what DCGM does with
them are in health_limits.yaml, each with the DCGM source line it comes from.

What one reading can prove: the replay, NVLink and clock-event counters count since the driver
loaded or the GPU was reset, and DCGM judges how fast they grow (per minute, per second). One
reading of them only warns, never fails; two readings over the run (the sustained load) give the
rate DCGM judges. A reading the GPU, driver or capture does not give skips ("not reported").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from validate.host.nvml_health import HealthReadings
from validate.judge.health import BAD_CLOCK_EVENTS
from validate.judge.verdict import FAIL, INFO, PASS, SKIP, WARN, Verdict
from validate.simpleyaml import TableError, load_table

LIMITS_FILE = Path(__file__).with_name("health_limits.yaml")


@dataclass(frozen=True)
class Limit:
    """One figure of health_limits.yaml (see the file for the fields)."""

    name: str
    value: float
    unit: str
    meaning: str
    source: str


def parse_limits(data: Any) -> dict[str, Limit]:
    """Validate the 'limits:' list: every row a name, a number, and an https:// source."""
    rows = data.get("limits") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise TableError("the health limits need a top-level 'limits:' list")
    out: dict[str, Limit] = {}
    for position, row in enumerate(rows):
        where = f"limits[{position}]"
        name, value, source = (
            (row.get(k) for k in ("name", "value", "source"))
            if isinstance(row, dict)
            else (None, None, None)
        )
        if not isinstance(name, str) or name in out:
            raise TableError(f"{where}: 'name' must be a text given once, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise TableError(f"{where} ({name}): 'value' must be a positive number")
        if not isinstance(source, str) or not source.startswith("https://"):
            raise TableError(
                f"{where} ({name}): 'source' must be an https:// URL a reader can open, got "
                f"{source!r}"
            )
        out[name] = Limit(
            name, float(value), str(row.get("unit") or ""), str(row.get("meaning") or ""), source
        )
    return out


@lru_cache(maxsize=None)
def load_limits(path: Path = LIMITS_FILE) -> dict[str, Limit]:
    return parse_limits(load_table(path))


# --- PCIe replays -------------------------------------------------------------------------------


def pcie_replay_rate_limit(gen: int, width: int, limits: dict[str, Limit]) -> int:
    """DCGM's expected replays per minute: ceil(per-lane rate of the generation x lanes); a
    generation newer than DCGM knows is capped at the newest it knows, as DCGM does."""
    known = sorted(
        int(n.rsplit("gen", 1)[1])
        for n in limits
        if n.startswith("pcie_replays_per_lane_per_minute_gen")
    )
    gen = min(max(gen, known[0]), known[-1])
    return math.ceil(limits[f"pcie_replays_per_lane_per_minute_gen{gen}"].value * width)


def pcie_replays_verdict(
    gpu_index: int,
    replays: int | None,
    gen: int | None,
    width: int | None,
    limits: dict[str, Limit],
) -> Verdict:
    """One reading of the replay counter (since the driver loaded or the GPU was reset) is
    information, never a warning: it counts over an unknown time (a healthy 8 x H100 capture holds
    144 to 174 after its uptime), and DCGM judges replays only per run or per minute. The sustained
    load reads the counter twice and judges the rate (pcie_replay_rate_verdict)."""
    threshold = "information: no rate yet"
    if replays is None:
        return Verdict(
            SKIP,
            threshold,
            f"GPU {gpu_index}: the PCIe replay counter is not reported (NVML NotSupported, or "
            "the capture lacks it)",
        )
    rate = (
        f"; DCGM warns above {pcie_replay_rate_limit(gen, width, limits)}/min at gen{gen} x{width}"
        if gen and width
        else ""
    )
    # The count itself is the row's measured text and the JSON's reading; the reason stays the same
    # on every GPU of a host, so a replay's summary shows one row for all of them.
    return Verdict(
        INFO,
        threshold,
        (
            f"GPU {gpu_index}: one reading of the PCIe replay counter since reset, over an "
            f"unknown time; the rate over the run is judged under load{rate}"
        ),
    )


def pcie_replay_rate_verdict(
    gpu_index: int,
    first: int | None,
    last: int | None,
    minutes: float,
    gen: int | None,
    width: int | None,
    limits: dict[str, Limit],
) -> Verdict:
    """The counter read at the start and the end of the run: replays per minute against DCGM's
    PCIe health watch (a warning, as DCGM gives)."""
    if first is None or last is None or not gen or not width or minutes <= 0:
        return Verdict(
            SKIP,
            "DCGM replay rate",
            f"GPU {gpu_index}: the PCIe replay counter or link was not read twice over the run",
        )
    limit = pcie_replay_rate_limit(gen, width, limits)
    threshold = f"<= {limit} per minute at gen{gen} x{width}"
    # A window shorter than a minute is not scaled up (a burst of replays in a 10 s --quick load
    # would read as six times its count): its count is held against one minute's limit.
    rate = abs(last - first) / max(minutes, 1.0)
    if rate <= limit:
        return Verdict(PASS, threshold)
    over = (
        "per minute over the run"
        if minutes >= 1.0
        else f"in {minutes * 60:.0f} s (under a minute: the count itself)"
    )
    return Verdict(
        WARN,
        threshold,
        f"GPU {gpu_index}: {rate:.1f} PCIe replays {over}: reseat the GPU and check its "
        "riser and slot (DCGM: reconnect the PCIe card, run the system's PCIe diagnostics)",
    )


# --- infoROM ------------------------------------------------------------------------------------


def inforom_verdict(gpu_index: int, valid: bool | None) -> Verdict:
    """nvmlDeviceValidateInforom: a corrupted infoROM is DCGM's DCGM_FR_CORRUPT_INFOROM (a
    warning)."""
    threshold = "infoROM checksums valid"
    if valid is None:
        return Verdict(
            SKIP,
            threshold,
            f"GPU {gpu_index}: the infoROM check is not reported (NVML NotSupported, or an "
            "nvidia-smi capture: nvidia-smi -q does not print it)",
        )
    if valid:
        return Verdict(PASS, threshold)
    return Verdict(
        WARN,
        threshold,
        f"GPU {gpu_index}: NVML reports a corrupted infoROM: flash the infoROM to clear the "
        "corruption (DCGM's next step)",
    )


# --- temperature --------------------------------------------------------------------------------


def temperature_text(r: HealthReadings) -> str:
    """The measured cell: the reading when the row fails, else words the same on every healthy GPU
    (so a replay's rows collapse; the JSON keeps each GPU's reading under "health")."""
    if r.temperature_c is None and r.margin_c is None:
        return "not reported"
    if temperature_verdict(0, r).verdict == PASS:
        return "within its limits"
    return ", ".join(
        ([] if r.temperature_c is None else [f"{r.temperature_c} C"])
        + ([] if r.margin_c is None else [f"T.Limit margin {r.margin_c} C"])
    )


def _past_thresholds(
    gpu_index: int,
    reading: int,
    limit: int,
    slowdown: int | None,
    shutdown: int | None,
    margin: bool,
) -> Verdict:
    """A temperature at or above the GPU's shutdown or slowdown point, or above its maximum
    operating point, fails; for a T.Limit margin (degrees left) the same points are read
    downwards."""
    sign = -1 if margin else 1
    if margin:
        threshold, head, unit = (
            f"T.Limit margin >= {limit} C",
            f"GPU {gpu_index} T.Limit margin {reading} C",
            "margin",
        )
    else:
        threshold = f"<= {limit} C" + (
            f" (slowdown {slowdown} C)" if slowdown is not None and limit != slowdown else ""
        )
        head, unit = f"GPU {gpu_index} at {reading} C", "temperature"
    for bound, what, reached_is_past in (
        (shutdown, "shutdown", True),
        (slowdown, "hardware slowdown", True),
        (limit, "maximum operating", False),
    ):
        if bound is None:
            continue
        if sign * reading > sign * bound or (reached_is_past and reading == bound):
            return Verdict(
                FAIL,
                threshold,
                f"{head}, past its {what} {unit} {bound} C: "
                f"{BAD_CLOCK_EVENTS['hw_thermal_slowdown'][1]}",
            )
    return Verdict(PASS, threshold)


def temperature_verdict(gpu_index: int, r: HealthReadings) -> Verdict:
    """The temperature against the GPU's own thresholds, as DCGM's diagnostic does (it fails a GPU
    above its maximum operating temperature, or its slowdown temperature when that is not
    reported). Drivers that print the T.Limit form give the margin below the limit instead."""
    if r.temperature_c is not None and (r.max_operating_c is not None or r.slowdown_c is not None):
        limit = r.max_operating_c if r.max_operating_c is not None else r.slowdown_c
        return _past_thresholds(
            gpu_index, r.temperature_c, limit, r.slowdown_c, r.shutdown_c, margin=False
        )  # type: ignore[arg-type]
    if r.margin_c is not None and (
        r.max_operating_margin_c is not None or r.slowdown_margin_c is not None
    ):
        limit = (
            r.max_operating_margin_c
            if r.max_operating_margin_c is not None
            else r.slowdown_margin_c
        )
        return _past_thresholds(
            gpu_index, r.margin_c, limit, r.slowdown_margin_c, r.shutdown_margin_c, margin=True
        )  # type: ignore[arg-type]
    # only the shutdown point known: at or past it fails; below it the operating range is unknown
    if r.temperature_c is not None and r.shutdown_c is not None:
        verdict = _past_thresholds(
            gpu_index, r.temperature_c, r.shutdown_c, None, r.shutdown_c, margin=False
        )
        if verdict.verdict == FAIL:
            return verdict
    if r.margin_c is not None and r.shutdown_margin_c is not None:
        verdict = _past_thresholds(
            gpu_index, r.margin_c, r.shutdown_margin_c, None, r.shutdown_margin_c, margin=True
        )
        if verdict.verdict == FAIL:
            return verdict
    return Verdict(
        SKIP,
        "below the GPU's own thresholds",
        f"GPU {gpu_index}: the temperature or the GPU's thresholds are not reported",
    )


def temperature_under_load(
    gpu_index: int, r: HealthReadings, samples: list[dict[str, Any]]
) -> tuple[str, Verdict]:
    """(measured, verdict): the hottest reading (and the least T.Limit margin) over the sustained
    load against the GPU's own thresholds. DCGM's diagnostic judges temperature while it loads the
    GPU; an idle reading alone hides a GPU that overheats only when it works."""
    temps = [int(s["temperature_c"]) for s in samples if s.get("temperature_c") is not None]
    margins = [int(s["margin_c"]) for s in samples if s.get("margin_c") is not None]
    if not temps and not margins:
        return "not read under load", Verdict(
            SKIP,
            "below the GPU's own thresholds",
            f"GPU {gpu_index}: no temperature read under load",
        )
    loaded = dataclasses.replace(
        r, temperature_c=max(temps) if temps else None, margin_c=min(margins) if margins else None
    )
    measured = ", ".join(
        ([f"{max(temps)} C at most"] if temps else [])
        + ([f"T.Limit margin {min(margins)} C at least"] if margins else [])
    )
    return measured, temperature_verdict(gpu_index, loaded)


# --- NVLink errors ------------------------------------------------------------------------------


def nvlink_errors_text(errors: dict[str, int] | None) -> str:
    if errors is None:
        return "not reported"
    return ", ".join(f"{k} {v}" for k, v in errors.items() if v) or "0 errors"


def nvlink_errors_verdict(
    gpu_index: int, errors: dict[str, int] | None, limits: dict[str, Limit]
) -> Verdict:
    """NVLink replay, recovery and CRC error counters since the last reset: DCGM's NVLink watch
    fails a GPU when replay or recovery errors grow by one in a minute; one reading only warns."""
    window = int(limits["nvlink_errors_in_window"].value)
    threshold = "0 since reset"
    if errors is None:
        return Verdict(
            SKIP,
            threshold,
            f"GPU {gpu_index}: NVLink error counters are not reported (no NVLink, NVML "
            "NotSupported, or an nvidia-smi capture: nvidia-smi -q does not print them)",
        )
    found = {k: v for k, v in errors.items() if v}
    if not found:
        return Verdict(PASS, threshold)
    return Verdict(
        WARN,
        threshold,
        f"GPU {gpu_index}: NVLink errors since the last reset ({nvlink_errors_text(found)}); one "
        "reading gives no rate: DCGM fails a GPU whose replay or recovery errors grow by "
        f"{window} in a minute. Read them again (nvidia-smi nvlink -e); if they grow, drain the "
        "node and check the NVLink/NVSwitch trays",
    )


# --- NVSwitch fabric health ---------------------------------------------------------------------

#: Fabric health flags DCGM's NVLink watch fails a GPU on (MonitorFabricFields), in words.
FABRIC_FAULTS = {
    "route_unhealthy": "a route is unhealthy",
    "degraded_bandwidth": "bandwidth is degraded",
    "route_recovery": "a route recovery is in progress",
    "access_timeout_recovery": "an access-timeout recovery is in progress",
}


def fabric_health_text(health: dict[str, Any] | None) -> str:
    if health is None:
        return "not reported"
    return health.get("summary") or "summary not reported"


def fabric_health_verdict(gpu_index: int, health: dict[str, Any] | None) -> Verdict:
    """The GPU's NVSwitch fabric health (NVML healthMask/healthSummary; nvidia-smi's Fabric /
    Health): each fault DCGM's NVLink watch fails on fails here, naming it."""
    threshold = "fabric healthy"
    if health is None:
        return Verdict(
            SKIP,
            threshold,
            f"GPU {gpu_index}: fabric health is not reported (no NVSwitch fabric, or the driver "
            "or the capture does not give it)",
        )
    faults = [text for name, text in FABRIC_FAULTS.items() if health.get(name)]
    config = health.get("incorrect_configuration")
    if config and config != "none":
        faults.append(f"incorrect configuration: {config}")
    if health.get("summary") == "Unhealthy":
        faults.append("the driver sums it up as Unhealthy")
    fix = (
        "check the fabric manager's log (journalctl -u nvidia-fabricmanager) and the "
        "NVSwitch/NVLink trays, then reset the GPUs or reboot; DCGM's NVLink health watch fails "
        "the GPU on this"
    )
    if faults:
        return Verdict(
            FAIL, threshold, f"GPU {gpu_index}: NVSwitch fabric: {'; '.join(faults)}: {fix}"
        )
    if health.get("summary") == "Limited Capacity":
        return Verdict(
            WARN, threshold, f"GPU {gpu_index}: NVSwitch fabric at Limited Capacity: {fix}"
        )
    return Verdict(PASS, threshold)


# --- clock-event counters -----------------------------------------------------------------------

#: The counters that mean something held the clocks down (BAD_CLOCK_EVENTS in health.py names why).
BAD_COUNTERS = ("hw_power_brake_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown")
#: The thermal perf-policy counter (NVML field 75): read on every driver, so a driver whose
#: renumbered counters cannot be read still shows thermal time.
THERMAL_VIOLATION = "thermal_violation"
_CAUSES = dict(
    BAD_CLOCK_EVENTS,
    thermal_violation=(
        "thermal limits held the clocks below those asked for (NVML's thermal perf-policy counter)",
        "check airflow, fans and inlet temperature (nvidia-smi -q -d TEMPERATURE)",
    ),
)


def clock_event_counters_text(counters_us: dict[str, int] | None) -> str:
    """Time under a thermal or power-brake slowdown; the power cap's time (a healthy GPU's, and
    different on each) stays in the JSON."""
    read = [k for k in (*BAD_COUNTERS, THERMAL_VIOLATION) if k in (counters_us or {})]
    if not any(k in (counters_us or {}) for k in BAD_COUNTERS):
        thermal = (counters_us or {}).get(THERMAL_VIOLATION)
        return "not reported" if not thermal else f"{THERMAL_VIOLATION} {thermal / 1e6:.1f} s"
    return (
        ", ".join(f"{k} {counters_us[k] / 1e6:.1f} s" for k in read if counters_us[k])
        or "no thermal or power-brake time"
    )


def pcie_replays_text(replays: int | None, limits: dict[str, Limit]) -> str:
    """Above or within DCGM diag's per-run figure: the same words on GPUs whose counts differ; the
    count itself is in the JSON (each GPU's "health")."""
    if replays is None:
        return "not reported"
    per_run = int(limits["pcie_replays_per_diag_run"].value)
    return f"{'more than' if replays > per_run else 'at most'} {per_run} since reset (one reading)"


def clock_event_counters_verdict(
    gpu_index: int, counters_us: dict[str, int] | None, note: str | None = None
) -> Verdict:
    """How long each clock-event reason held the clocks since the driver loaded. Time under a
    power brake or thermal slowdown warns (DCGM's thermal and power watches warn when these grow);
    one reading cannot say when it happened: the clock-event row says whether it happens now.
    The power cap and sync boost are a healthy GPU's. Only counters read can pass: with the
    thermal and power-brake counters absent the row is "not reported", however many others read.
    `note`: why the reader did not ask for them (nvml_health.clock_event_field_ids)."""
    threshold = "no slowdown time"
    counters_us = counters_us or {}
    why = f" ({note})" if note else " (the driver or the capture does not give them)"
    missing = [name for name in BAD_COUNTERS if name not in counters_us]
    held = [name for name in BAD_COUNTERS if counters_us.get(name)]
    if counters_us.get(THERMAL_VIOLATION) and not held:
        held = [THERMAL_VIOLATION]
    if held:
        causes = "; ".join(
            f"{name} {counters_us[name] / 1e6:.1f} s: {_CAUSES[name][0]}: {_CAUSES[name][1]}"
            for name in held
        )
        return Verdict(
            WARN,
            threshold,
            f"GPU {gpu_index} clocks were held down since the driver loaded ({causes}); one "
            "reading cannot say when: read the counters again under load, and the clock-event "
            "row says whether it is happening now",
        )
    if len(missing) == len(BAD_COUNTERS):
        return Verdict(
            SKIP,
            threshold,
            f"GPU {gpu_index}: the thermal and power-brake clock-event counters are not "
            f"reported{why}",
        )
    if missing:
        return Verdict(PASS, threshold, f"GPU {gpu_index}: {', '.join(missing)} not reported")
    return Verdict(PASS, threshold)
