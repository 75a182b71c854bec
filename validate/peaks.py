"""The GPU datasheet peak table (gpu_peaks.yaml): loaded, validated, matched by NVML's GPU name.

Images get only `validate/`, and PyYAML is not always there, so the file is kept to a strict
YAML subset that `parse_simple_yaml` reads when PyYAML is missing (a test checks both agree).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PEAKS_FILE = Path(__file__).with_name("gpu_peaks.yaml")

#: Metric name -> field of the table; the speed checks use these names.
METRICS = ("fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops", "memory_bandwidth_gbs")


class PeakTableError(ValueError):
    """The peak table is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class GpuPeaks:
    """Datasheet peaks of one GPU model (None where the model has no such mode)."""

    model: str
    nvml_names: tuple[str, ...]
    source: str
    fp32_tflops: float
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    memory_bandwidth_gbs: float

    def peak(self, metric: str) -> float | None:
        return getattr(self, metric)


def _scalar(text: str) -> Any:
    text = text.strip()
    if text in ("null", "~", ""):
        return None
    if text.startswith(("[", '"')):
        return json.loads(text)
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text


def parse_simple_yaml(text: str) -> dict[str, list[dict[str, Any]]]:
    """Read the subset gpu_peaks.yaml uses: one top-level key holding a list of flat mappings."""
    result: dict[str, list[dict[str, Any]]] = {}
    current_list: list[dict[str, Any]] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            key, _, rest = line.partition(":")
            if rest.strip():
                raise PeakTableError(f"line {number}: expected 'key:' opening a list, got {line!r}")
            current_list = result.setdefault(key.strip(), [])
            continue
        if current_list is None:
            raise PeakTableError(f"line {number}: indented line before any top-level key")
        body = line.strip()
        if body.startswith("- "):
            current_list.append({})
            body = body[2:]
        if not current_list:
            raise PeakTableError(f"line {number}: mapping entry outside a list item")
        key, sep, value = body.partition(":")
        if not sep:
            raise PeakTableError(f"line {number}: expected 'key: value', got {body!r}")
        current_list[-1][key.strip()] = _scalar(value)
    return result


def _number(entry: dict[str, Any], key: str, where: str, optional: bool) -> float | None:
    value = entry.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise PeakTableError(f"{where}: {key} must be a positive number, got {value!r}")
    return float(value)


def parse_table(data: Any) -> list[GpuPeaks]:
    """Validate the loaded document and build the entries (every entry needs a source URL)."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise PeakTableError("the peak table must have a top-level 'gpus:' list")
    entries: list[GpuPeaks] = []
    seen: dict[str, str] = {}
    for position, entry in enumerate(data["gpus"]):
        if not isinstance(entry, dict):
            raise PeakTableError(f"gpus[{position}] must be a mapping")
        where = f"gpus[{position}] ({entry.get('model', '?')})"
        model = entry.get("model")
        names = entry.get("nvml_names")
        source = entry.get("source")
        if not isinstance(model, str) or not model:
            raise PeakTableError(f"{where}: 'model' is missing")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise PeakTableError(f"{where}: 'nvml_names' must be a non-empty list of names")
        if not isinstance(source, str) or not source.startswith("https://"):
            raise PeakTableError(f"{where}: 'source' must be an https:// URL, got {source!r}")
        for name in names:
            if name.lower() in seen:
                raise PeakTableError(f"{where}: NVML name {name!r} is also listed by {seen[name.lower()]}")
            seen[name.lower()] = model
        entries.append(
            GpuPeaks(
                model=model,
                nvml_names=tuple(names),
                source=source,
                fp32_tflops=_number(entry, "fp32_tflops", where, optional=False),  # type: ignore[arg-type]
                tf32_tflops=_number(entry, "tf32_tflops", where, optional=True),
                bf16_tflops=_number(entry, "bf16_tflops", where, optional=True),
                fp16_tflops=_number(entry, "fp16_tflops", where, optional=True),
                memory_bandwidth_gbs=_number(entry, "memory_bandwidth_gbs", where, optional=False),  # type: ignore[arg-type]
            )
        )
    return entries


def load_peaks(path: Path = PEAKS_FILE) -> list[GpuPeaks]:
    """Load and validate the table, with PyYAML when installed, else with the subset reader."""
    text = path.read_text(encoding="utf-8")
    try:
        import yaml
    except ImportError:
        return parse_table(parse_simple_yaml(text))
    return parse_table(yaml.safe_load(text))


def peaks_for(gpu_name: str, table: list[GpuPeaks]) -> GpuPeaks | None:
    """The entry whose NVML names include this name (case-insensitive), or None: no reference."""
    wanted = gpu_name.strip().lower()
    for entry in table:
        if any(wanted == name.lower() for name in entry.nvml_names):
            return entry
    return None
