"""The GPU table (gpu_peaks.yaml): datasheet peaks and the figures healthy GPUs measured (each
with its public source), loaded, validated, and matched by NVML's GPU name.

Images get only `validate/`, and PyYAML is not always there, so the file is kept to the strict
YAML subset that validate/simpleyaml.py reads, everywhere (a test checks PyYAML reads it alike).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from validate.judge.verdict import FAIL, INFO, PASS, SKIP, Verdict
from validate.simpleyaml import TableError, load_table

PEAKS_FILE = Path(__file__).with_name("gpu_peaks.yaml")

#: Metric name -> field of the table; the speed checks use these names.
METRICS = ("fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops", "memory_bandwidth_gbs")

#: The suite's own matmul (validate/measure/bench.py): a measurement taken this way confirms a
#: floor.
SUITE_MATMUL_METHODS = ("torch.matmul", "torch.mm")
#: TensorFlow's matmul as the suite times it (validate/measure: chained tf.matmul, timed on the
#: host): only a reference measured this way confirms a floor for TensorFlow's figures. A
#: torch.matmul figure is another method, so TensorFlow's figures are judged against it unconfirmed.
SUITE_TF_MATMUL_METHODS = ("tf.matmul", "tf.linalg.matmul")
SUITE_MATMUL_N = 8192
#: A measurement's source that is this project's own run, kept with its raw output in the
#: repository (the path after the prefix; tests/validate/judge/test_peaks_own_runs.py checks it
#: exists).
OWN_SOURCE = "gpuenv:"
_DTYPES = {"fp32", "tf32", "bf16", "fp16", "bytes"}


@dataclass(frozen=True)
class Measurement:
    """One figure a healthy GPU of a model measured, with how and where (a public source)."""

    metric: str
    value: float
    method: str
    n: int | None
    dtype: str
    source: str
    date: str
    note: str = ""

    @property
    def matches_suite(self) -> bool:
        """Taken like the suite's own PyTorch figure (torch.matmul at n = 8192, same dtype)?"""
        return self.taken_like(SUITE_MATMUL_METHODS)

    def taken_like(self, methods: tuple[str, ...]) -> bool:
        """Taken with one of these methods at the suite's n = 8192, in the figure's own dtype?"""
        return (
            self.method in methods
            and self.n == SUITE_MATMUL_N
            and self.metric == f"{self.dtype}_tflops"
        )

    def describe(self) -> str:
        size = f"n={self.n}" if self.n else "no single n"
        return f"{self.method} {self.dtype} {size}, {self.source}"


@dataclass(frozen=True)
class ReferenceFigure:
    """The figure a floor is drawn from: the lowest confirmed measurement, else the lowest
    unconfirmed one (then a figure below the floor warns instead of failing)."""

    value: float
    confirmed: bool
    measurements: tuple[Measurement, ...]

    def describe(self) -> str:
        lowest = min(self.measurements, key=lambda m: m.value)
        extra = f", lowest of {len(self.measurements)} units" if len(self.measurements) > 1 else ""
        kind = "" if self.confirmed else "unconfirmed: "
        return f"{kind}{lowest.describe()}{extra}"


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet peaks of one GPU model (None where the model has no such mode, or where NVIDIA
    publishes no datasheet figure for it, e.g. AWS's A10G), its measured references, and, per
    metric with none, why not (`no_reference`: the sources searched)."""

    model: str
    nvml_names: tuple[str, ...]
    source: str
    fp32_tflops: float | None
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    memory_bandwidth_gbs: float | None
    nvlink_gbs: float | None = None  # datasheet NVLink bandwidth per GPU, both directions
    nvlink_links: int | None = None  # NVLinks the product has (nvlink_links_source)
    measured: tuple[Measurement, ...] = ()
    no_reference: tuple[tuple[str, str], ...] = ()  # (metric, why no public figure is used)

    def peak(self, metric: str) -> float | None:
        """The datasheet figure: shown beside a measurement, never a floor."""
        return getattr(self, metric)

    def reference_for(
        self, metric: str, methods: tuple[str, ...] = SUITE_MATMUL_METHODS
    ) -> ReferenceFigure | None:
        """What the floor for this metric is drawn from, or None: the figure is not judged.

        `methods` is how the figure being judged was measured: only a reference taken the same way
        confirms the floor (like for like); any other measurement draws it unconfirmed."""
        mine = [m for m in self.measured if m.metric == metric]
        confirmed = [m for m in mine if m.taken_like(methods)]
        chosen = confirmed or mine
        if not chosen:
            return None
        return ReferenceFigure(min(m.value for m in chosen), bool(confirmed), tuple(chosen))


@dataclass(frozen=True)
class Interconnect:
    """The NCCL all-reduce floor for one kind of GPU-to-GPU link."""

    name: str
    min_fraction: float
    of: str
    source: str


def _number(entry: dict[str, Any], key: str, where: str, optional: bool) -> float | None:
    value = entry.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TableError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


def _measurements(entry: dict[str, Any], where: str) -> tuple[Measurement, ...]:
    """The `measured_<metric>` lists: each item needs a value, method, n, dtype and an https
    source."""
    out: list[Measurement] = []
    for key, raw in entry.items():
        if not key.startswith("measured_"):
            continue
        metric = key.removeprefix("measured_")
        if metric not in METRICS:
            raise TableError(f"{where}: {key}: unknown metric (use one of {', '.join(METRICS)})")
        if not isinstance(raw, list) or not raw:
            raise TableError(f"{where}: {key} must be a non-empty list of measurements")
        for position, item in enumerate(raw):
            at = f"{where}: {key}[{position}]"
            if not isinstance(item, dict):
                raise TableError(f"{at} must be a mapping")
            unknown = set(item) - {"value", "method", "n", "dtype", "source", "date", "note"}
            if unknown:
                raise TableError(f"{at} has unknown keys {sorted(unknown)}")
            value = item.get("value")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise TableError(f"{at}: 'value' must be a positive number, got {value!r}")
            for field in ("method", "date"):
                if not isinstance(item.get(field), str) or not item[field]:
                    raise TableError(f"{at} needs a '{field}'")
            if item.get("dtype") not in _DTYPES:
                raise TableError(f"{at}: 'dtype' must be one of {', '.join(sorted(_DTYPES))}")
            size = item.get("n", "missing")
            if size is not None and (
                isinstance(size, bool) or not isinstance(size, int) or size <= 0
            ):
                raise TableError(f"{at}: 'n' must be a matrix size or null, got {size!r}")
            source = item.get("source")
            if not isinstance(source, str) or not source.startswith(("https://", OWN_SOURCE)):
                raise TableError(
                    f"{at}: 'source' must be an https:// URL a reader can open, or "
                    f"{OWN_SOURCE}PATH (this project's own measurement, kept in the repository), "
                    f"got {source!r}"
                )
            out.append(
                Measurement(
                    metric,
                    float(value),
                    item["method"],
                    size,
                    item["dtype"],
                    source,
                    str(item["date"]),
                    str(item.get("note") or ""),
                )
            )
    return tuple(out)


def _no_reference(
    entry: dict[str, Any], where: str, measured: tuple[Measurement, ...]
) -> tuple[tuple[str, str], ...]:
    """`no_reference`: metric -> why no public figure is used (the sources searched); a metric
    listed here and measured too is a contradiction in the data."""
    raw = entry.get("no_reference")
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        raise TableError(
            f"{where}: no_reference must be a mapping of metric to the reason no public figure "
            "is used"
        )
    out = []
    for metric, why in raw.items():
        if metric not in METRICS:
            raise TableError(
                f"{where}: no_reference: unknown metric {metric!r} (use one of "
                f"{', '.join(METRICS)})"
            )
        if not isinstance(why, str) or not why.strip():
            raise TableError(
                f"{where}: no_reference: {metric} needs the reason (what was searched)"
            )
        if any(m.metric == metric for m in measured):
            raise TableError(f"{where}: {metric} is both measured and listed under no_reference")
        out.append((metric, why.strip()))
    return tuple(out)


def parse_interconnects(data: Any) -> dict[str, Interconnect]:
    """The 'interconnects:' list: NCCL floors per link kind, each with its source."""
    out: dict[str, Interconnect] = {}
    for position, entry in enumerate(
        data.get("interconnects") or [] if isinstance(data, dict) else []
    ):
        where = f"interconnects[{position}]"
        if not isinstance(entry, dict) or entry.get("name") not in ("nvlink", "pcie"):
            raise TableError(f"{where}: 'name' must be nvlink or pcie")
        fraction = entry.get("min_fraction")
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, (int, float))
            or not 0 < fraction <= 1
        ):
            raise TableError(f"{where}: 'min_fraction' must be a number in (0, 1]")
        source = entry.get("source")
        if not isinstance(source, str) or not source.startswith("https://"):
            raise TableError(f"{where}: 'source' must be an https:// URL, got {source!r}")
        out[entry["name"]] = Interconnect(
            entry["name"], float(fraction), str(entry.get("of", "")), source
        )
    return out


def _nvlink_links(entry: dict[str, Any], where: str) -> int | None:
    """The product's NVLink count, which needs its own source (a whitepaper or a system record)."""
    links = entry.get("nvlink_links")
    if links is None:
        return None
    source = entry.get("nvlink_links_source")
    if isinstance(links, bool) or not isinstance(links, int) or links < 1:
        raise TableError(f"{where}: 'nvlink_links' must be a whole number of links")
    if not isinstance(source, str) or not source.startswith("https://"):
        raise TableError(f"{where}: 'nvlink_links' needs 'nvlink_links_source', an https:// URL")
    return links


def parse_table(data: Any) -> list[GpuPeaks]:
    """Validate the loaded document and build the entries (every entry needs a source URL)."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise TableError("the peak table must have a top-level 'gpus:' list")
    entries: list[GpuPeaks] = []
    seen: dict[str, str] = {}
    for position, entry in enumerate(data["gpus"]):
        if not isinstance(entry, dict):
            raise TableError(f"gpus[{position}] must be a mapping")
        where = f"gpus[{position}] ({entry.get('model', '?')})"
        model = entry.get("model")
        names = entry.get("nvml_names")
        source = entry.get("source")
        if not isinstance(model, str) or not model:
            raise TableError(f"{where}: 'model' is missing")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise TableError(f"{where}: 'nvml_names' must be a non-empty list of names")
        if not isinstance(source, str) or not source.startswith("https://"):
            raise TableError(f"{where}: 'source' must be an https:// URL, got {source!r}")
        for name in names:
            if name.lower() in seen:
                raise TableError(
                    f"{where}: NVML name {name!r} is also listed by {seen[name.lower()]}"
                )
            seen[name.lower()] = model
        for key in (
            "fp32_tflops",
            "memory_bandwidth_gbs",
        ):  # null is allowed, but must be written: a forgotten key is an error
            if key not in entry:
                raise TableError(
                    f"{where}: {key} is missing (null when NVIDIA publishes no datasheet figure)"
                )
        measured = _measurements(entry, where)
        entries.append(
            GpuPeaks(
                model=model,
                nvml_names=tuple(names),
                source=source,
                fp32_tflops=_number(entry, "fp32_tflops", where, optional=True),
                tf32_tflops=_number(entry, "tf32_tflops", where, optional=True),
                bf16_tflops=_number(entry, "bf16_tflops", where, optional=True),
                fp16_tflops=_number(entry, "fp16_tflops", where, optional=True),
                memory_bandwidth_gbs=_number(entry, "memory_bandwidth_gbs", where, optional=True),
                nvlink_gbs=_number(entry, "nvlink_gbs", where, optional=True),
                nvlink_links=_nvlink_links(entry, where),
                measured=measured,
                no_reference=_no_reference(entry, where, measured),
            )
        )
    return entries


def load_peaks(path: Path = PEAKS_FILE) -> list[GpuPeaks]:
    """Load and validate the table."""
    return parse_table(load_table(path))


def load_interconnects(path: Path = PEAKS_FILE) -> dict[str, Interconnect]:
    return parse_interconnects(load_table(path))


def nccl_floor(
    interconnect: str, link_gbs: float | None, rules: dict[str, Interconnect]
) -> tuple[float, str] | None:
    """(minimum bus bandwidth GB/s, the rule in words) for an all-reduce over this interconnect,
    or None when the link bandwidth or the rule is unknown."""
    rule = rules.get(interconnect)
    if rule is None or not link_gbs:
        return None
    return (
        rule.min_fraction * link_gbs,
        f">= {rule.min_fraction:.2f} x {link_gbs:.4g} GB/s ({rule.of})",
    )


def _bare(name: str) -> str:
    return " ".join(name.lower().split()).removeprefix("nvidia ")


def peaks_for(gpu_name: str, table: list[GpuPeaks]) -> GpuPeaks | None:
    """The entry whose NVML names include this name (case-insensitive; drivers before ~470 omit
    the leading "NVIDIA ", e.g. "A100-SXM4-40GB"), or None: no reference."""
    wanted = _bare(gpu_name)
    for entry in table:
        if any(wanted == _bare(name) for name in entry.nvml_names):
            return entry
    return None


def expected_nvlinks(gpu: Any, table: list[GpuPeaks]) -> int | None:
    """How many NVLinks the GPU's product has (gpu_peaks.yaml), or None when not known."""
    entry = peaks_for(gpu.name, table)
    return entry.nvlink_links if entry else None


def interconnect_of(gpus: list[Any], table: list[GpuPeaks]) -> tuple[str, float | None]:
    """How the GPUs are meant to talk to each other, and the one-way GB/s per GPU an all-reduce can
    use: ("nvlink", datasheet NVLink / 2) when every GPU's product has NVLinks (gpu_peaks.yaml's
    nvlink_links) or, for products the table does not count, when every GPU has active NVLinks
    (NVML); else ("pcie", the slowest GPU's link). From the product, not from the links that
    happen to be up: a GPU whose NVLinks are all down keeps its host judged by the NVLink floor
    (and nvlink_links_verdict names it). The figure is None when unknown (then only --baseline
    judges)."""
    from validate.judge.pcie import pcie_link_theoretical_gbs

    by_product = bool(gpus) and all(expected_nvlinks(g, table) for g in gpus)
    if by_product or (gpus and all(g.nvlink_active_links for g in gpus)):
        entries = [peaks_for(g.name, table) for g in gpus]
        figures = [e.nvlink_gbs for e in entries if e is not None and e.nvlink_gbs]
        return "nvlink", (min(figures) / 2 if len(figures) == len(gpus) else None)
    links = [pcie_link_theoretical_gbs(g.pcie_link_gen_max, g.pcie_link_width_max) for g in gpus]
    return "pcie", (min(links) if links and all(links) else None)  # type: ignore[type-var]


def nvlink_links_verdict(gpu: Any, table: list[GpuPeaks], whole_gpus: int) -> tuple[str, Verdict]:
    """(measured text, verdict): the GPU's active NVLinks against what its product has. On a host
    with two or more whole GPUs each link must be up: one down is DCGM's DCGM_FR_NVLINK_DOWN
    (its NVLink health watch fails it), all down leaves the GPU on PCIe only."""
    expected = expected_nvlinks(gpu, table)
    active = gpu.nvlink_active_links
    threshold = f"all {expected} NVLinks active" if expected else "every NVLink the product has"
    if expected is None:
        return (
            "not judged",
            Verdict(
                SKIP,
                threshold,
                f"GPU {gpu.index}: how many NVLinks a {gpu.name} has is not in "
                "validate/judge/gpu_peaks.yaml (nvlink_links)",
            ),
        )
    if active is None:
        return (
            "not reported",
            Verdict(
                SKIP,
                threshold,
                f"GPU {gpu.index}: NVLink state not reported (NVML NotSupported: "
                "a virtual machine, or the capture does not hold it)",
            ),
        )
    text = f"{active} of {expected} active"
    if whole_gpus < 2:
        return (text, Verdict(INFO, threshold, "one GPU here: no peer to link to"))
    if active >= expected:
        return (text, Verdict(PASS, threshold))
    fix = (
        "check nvidia-smi nvlink -s -i N and nvidia-smi -q -d FABRIC, the fabric manager "
        "(journalctl -u nvidia-fabricmanager), then reset the GPU or reseat it; DCGM's NVLink "
        "health watch fails a link down (DCGM_FR_NVLINK_DOWN)"
    )
    what = (
        "every NVLink is down: it reaches its peers over PCIe only"
        if active == 0
        else f"{expected - active} NVLink(s) down"
    )
    return (
        text,
        Verdict(
            FAIL,
            threshold,
            f"GPU {gpu.index}: {active} of {expected} NVLinks active (the {gpu.name} has "
            f"{expected}): {what}: {fix}",
        ),
    )
