"""The speed rules: a figure against --baseline or the model's measured reference (DCGM's 75%),
a MIG instance's share, the GPUs loaded together, the sustained clocks, and a loss that falls."""

from __future__ import annotations

from typing import Protocol

from validate.judge.health import clock_event_causes
from validate.judge.verdict import FAIL, NOT_JUDGED, PASS, SKIP, WARN, Verdict, at_least


class ReferenceLike(Protocol):
    """What a verdict needs of a reference (validate.judge.peaks.ReferenceFigure; no import
    cycle)."""

    value: float
    confirmed: bool

    def describe(self) -> str: ...


#: DCGM's rule: a GPU passes at 75% of what a healthy GPU of the same model measured with the same
#: method (NVIDIA/DCGM nvvs/diag-skus.yaml.in: every limit's comment gives the measured figure it
#: is 75% of). The measurements live in gpu_peaks.yaml, each with its public source. No floor is a
#: fraction of the datasheet: healthy power-capped parts (L4, T4) measure a third to a half of it.
REFERENCE_FRACTION = 0.75

#: Against an UNCONFIRMED reference (measured another way: DCGM's own SGEMM, a best-of-sizes table)
#: a figure below 75% only warns, but half speed still fails: below 0.55 of it. The widest gap
#: published between a healthy unit measured like the suite and such a figure is an L4's fp32 at
#: n=8192, 10.66 TFLOPS, against its best-of-sizes 15.38 (0.69;
#: zzc0721/torch-performance-test-data#120).
UNCONFIRMED_FAIL_FRACTION = 0.55

#: A server of the same model may be this much slower than the saved known-good baseline.
BASELINE_TOLERANCE = 0.15

#: A training loop "learns" when its loss falls by at least this share.
MIN_LOSS_DROP = 0.3


def throughput_verdict(
    metric: str,
    measured: float,
    baseline: float | None = None,
    tolerance: float = BASELINE_TOLERANCE,
    reference: float | None = None,
    reference_note: str = "",
    confirmed: bool = True,
) -> Verdict:
    """Judge a higher-is-better figure, saying which rule set the floor:

    1. `--baseline` (this team's known-good server of the same model): within `tolerance`;
    2. a measured reference for the model (gpu_peaks.yaml): DCGM's 75%. A reference measured
       like the suite's own figure (`confirmed`) fails a GPU below it; below an unconfirmed one
       (another tool, another size) the GPU is warned about, and fails only below
       UNCONFIRMED_FAIL_FRACTION of it (half speed), so a healthy GPU is not failed on a figure
       that was not taken the same way;
    3. nothing: NOT_JUDGED, the figure is only recorded.
    """
    if baseline is not None:
        minimum = baseline * (1 - tolerance)
        return at_least(
            measured, minimum, f">= {1 - tolerance:.2f} x baseline {baseline:.4g}", metric
        )
    if reference is not None:
        note = f" ({reference_note})" if reference_note else ""
        kind = "measured reference" if confirmed else "unconfirmed reference"
        threshold = f">= {REFERENCE_FRACTION:.2f} x {kind} {reference:.4g}{note}"
        verdict = at_least(measured, REFERENCE_FRACTION * reference, threshold, metric)
        if verdict.failed and not confirmed:
            if measured < UNCONFIRMED_FAIL_FRACTION * reference:
                return Verdict(
                    FAIL,
                    threshold,
                    f"{metric} {measured:.4g} is below {UNCONFIRMED_FAIL_FRACTION:.2f} x "
                    f"{reference:.4g}: about half speed or worse",
                )
            return Verdict(
                WARN,
                threshold,
                f"{verdict.reason}, but the reference was not measured like the suite's figure: "
                "confirm with --baseline from a known-good unit or the fleet median",
            )
        return verdict
    return Verdict(NOT_JUDGED, "no measured reference, no --baseline")


def mig_share(instance_sms: int | None, parent_sms: int | None) -> float | None:
    """A MIG instance's share of its GPU, by streaming multiprocessors (NVML's multiprocessor
    count of each); None when either is unknown, and then the instance's speed is not judged."""
    if not instance_sms or not parent_sms or instance_sms > parent_sms:
        return None
    return instance_sms / parent_sms


def judge_figure(
    metric: str,
    measured: float,
    reference: "ReferenceLike | None",
    baseline: float | None = None,
    mig: bool = False,
    share: float | None = None,
) -> Verdict:
    """A speed figure against the model's measured reference (gpu_peaks.yaml) or --baseline.

    For a MIG instance (`mig`) a TFLOPS reference is the parent GPU's scaled by the instance's share
    of SMs (`share`, see mig_share); with the share unknown, or for memory bandwidth (which follows
    memory slices, not SMs), the figure is not judged. A whole-GPU baseline says nothing about one
    instance, so it is not used there."""
    if mig:
        if not metric.endswith("_tflops"):
            return Verdict(
                NOT_JUDGED,
                "MIG instance: no share for this figure",
                "a MIG instance's memory bandwidth follows its memory slices, not its share of SMs",
            )
        if share is None:
            return Verdict(
                NOT_JUDGED,
                "MIG instance's share of SMs unknown",
                "NVML did not give the instance's or the GPU's multiprocessor count",
            )
        if reference is None:
            return throughput_verdict(metric, measured)
        note = f"{share:.3f} of the GPU's SMs x {reference.value:.4g}; {reference.describe()}"
        return throughput_verdict(
            metric,
            measured,
            reference=share * reference.value,
            reference_note=note,
            confirmed=reference.confirmed,
        )
    if reference is None:
        return throughput_verdict(metric, measured, baseline)
    return throughput_verdict(
        metric,
        measured,
        baseline,
        reference=reference.value,
        reference_note=reference.describe(),
        confirmed=reference.confirmed,
    )


#: Under the same load at the same time, GPUs of one model in one server run within a few percent
#: of each other; one below this share of their median is the odd one out (cooling, power, clocks).
MIN_SHARE_OF_PEERS = 0.85


def peer_verdict(measured: float, peers: list[float]) -> Verdict:
    """This GPU's sustained figure against the median of the same-model GPUs loaded with it (its
    own figure included). Judges GPUs no reference covers too; needs at least two GPUs."""
    if len(peers) < 2:
        return Verdict(NOT_JUDGED, "no other GPU of this model under the same load")
    ordered = sorted(peers)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    threshold = (
        f">= {MIN_SHARE_OF_PEERS:.2f} x median {median:.4g} of {len(peers)} same-model GPUs "
        "under the same load"
    )
    return at_least(measured, MIN_SHARE_OF_PEERS * median, threshold, "sustained TFLOPS")


def loss_falls_verdict(first_loss: float, last_loss: float) -> Verdict:
    threshold = f"last <= {1 - MIN_LOSS_DROP:.2f} x first"
    if last_loss <= (1 - MIN_LOSS_DROP) * first_loss:
        return Verdict(PASS, threshold)
    return Verdict(
        FAIL,
        threshold,
        f"loss went from {first_loss:.4g} to {last_loss:.4g}: the model does not learn",
    )


#: Share of the loaded samples that may show a bad clock-event reason before the GPU fails.
MAX_BAD_SAMPLE_SHARE = 0.1


def sustained_clocks_verdict(samples: list[dict]) -> Verdict:
    """Clock-event reasons sampled under the sustained load (dicts as nvml.Sample.to_dict()).

    Thermal, hardware and power-brake slowdowns in more than MAX_BAD_SAMPLE_SHARE of the samples
    fail; sw_power_cap is what a GPU at its default limit shows under full load and passes.
    """
    from validate.host.nvml_names import BAD_THROTTLE_REASONS

    read = [s for s in samples if s.get("reasons") is not None]
    threshold = f"thermal/hardware slowdown in <= {MAX_BAD_SAMPLE_SHARE:.0%} of samples"
    if not read:
        return Verdict(SKIP, threshold, "NVML reported no clock-event reasons during the load")
    bad: dict[str, int] = {}
    for s in read:
        for reason in set(s["reasons"]) & BAD_THROTTLE_REASONS:
            bad[reason] = bad.get(reason, 0) + 1
    worst = max(bad.values(), default=0)
    if worst <= MAX_BAD_SAMPLE_SHARE * len(read):
        return Verdict(PASS, threshold)
    listed = ", ".join(
        f"{name} in {count}/{len(read)} samples" for name, count in sorted(bad.items())
    )
    return Verdict(
        FAIL, threshold, f"clocks held down under load: {listed}; {clock_event_causes(list(bad))}"
    )


def clock_summary(samples: list[dict]) -> str:
    """'1980/1980 MHz median, 690 W, 71 C' over the samples that have the figures."""

    def median(key: str) -> float | None:
        values = sorted(s[key] for s in samples if s.get(key) is not None)
        return values[len(values) // 2] if values else None

    sm, top, watts, temp = (
        median("sm_clock_mhz"),
        median("max_sm_clock_mhz"),
        median("power_watts"),
        median("temperature_c"),
    )
    parts = [f"SM {sm:.0f}/{top:.0f} MHz" if sm is not None and top else "SM clock unknown"]
    if watts is not None:
        parts.append(f"{watts:.0f} W")
    if temp is not None:
        parts.append(f"{temp:.0f} C")
    return ", ".join(parts) + f" (median of {len(samples)} samples)"
