"""Known-good baselines: the figures of a healthy server, saved and compared by GPU model.

A datasheet peak says what a GPU could do; a baseline says what the same model did on a server
the team trusts, which is the sharper comparison (`--save-baseline` then `--baseline`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from validate.reading import InputRefused, decode_input, load_json_input, read_input
from validate.report.record import Record, write_json

BASELINE_FORMAT = "gpuenv-validate-baseline/1"
HOST_KEY = "host"  # CPU figures (training on CPU) are kept under this key
#: A baseline holds a few figures per GPU model: a file past this size is not one (nor is
#: /dev/zero).
MAX_BASELINE_BYTES = 1 << 20
#: {"format", "models": {model: {check: figure}}} is three levels; a little room for later fields.
MAX_DEPTH = 16
#: A measured figure is a short decimal; 5,000 digits is an attack on int() (CVE-2020-10735).
MAX_NUMBER_CHARS = 64


class BaselineError(ValueError):
    """The baseline file cannot be used; `str()` is one line: which file, why, and the fix."""

    def __init__(self, message: str, fix: str = "give a file saved with --save-baseline") -> None:
        super().__init__(message)
        self.message, self.fix = message, fix

    def __str__(self) -> str:
        return f"{self.message}: {self.fix}"


def build_baseline(records: list[Record], gpu_names: dict[str, str]) -> dict[str, Any]:
    """Measured values by GPU model (NVML name) and check; the first GPU of a model wins."""
    models: dict[str, dict[str, float]] = {}
    for record in records:
        if record.value is None or not math.isfinite(record.value) or record.value <= 0:
            continue  # not a figure a later run can be held to (load_baseline refuses it)
        model = gpu_names.get(record.gpu, HOST_KEY) if record.gpu else HOST_KEY
        models.setdefault(model, {}).setdefault(record.check, record.value)
    return {"format": BASELINE_FORMAT, "models": models}


def save_baseline(path: str | Path, records: list[Record], gpu_names: dict[str, str]) -> None:
    write_json(path, build_baseline(records, gpu_names))


def load_baseline(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a baseline file: {model: {check: value}}; every way it can be unusable is one line."""
    return parse_baseline(read_baseline_bytes(path), path)


def read_baseline_bytes(path: str | Path) -> bytes:
    """The bytes of a baseline file, read once through the one bounded reader: a regular file of
    at most MAX_BASELINE_BYTES (a FIFO or /dev/zero is refused at once instead of hanging or
    filling memory). Callers that need the bytes again (the fleet copies them to every host) keep
    these rather than reading twice.
    """
    try:
        return read_input(path, MAX_BASELINE_BYTES)
    except InputRefused as err:
        fix = (
            "make one with --save-baseline"
            if "does not exist" in str(err)
            else "give a file saved with --save-baseline"
        )
        raise BaselineError(f"baseline file {path}: {err}", fix) from None


def parse_baseline(data: bytes, path: str | Path) -> dict[str, dict[str, float]]:
    """The models of a baseline file's bytes; `path` only names the file in messages.

    Numbers must be plain finite figures above zero (a throughput of 0, -3 or NaN judges
    nothing), JSON must be shallow and its numbers short: no input can raise past this function.
    """
    try:
        parsed = load_json_input(
            decode_input(data), max_depth=MAX_DEPTH, max_digits=MAX_NUMBER_CHARS
        )
    except InputRefused as err:
        raise BaselineError(f"baseline file {path}: {err}") from None
    if (
        not isinstance(parsed, dict)
        or parsed.get("format") != BASELINE_FORMAT
        or not isinstance(parsed.get("models"), dict)
    ):
        raise BaselineError(f"baseline file {path} is not a {BASELINE_FORMAT} file")
    models: dict[str, dict[str, float]] = {}
    for model, checks in parsed["models"].items():
        if not isinstance(checks, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in checks.values()
        ):
            raise BaselineError(
                f"baseline file {path}: model {model!r} must map check names to numbers"
            )
        for check, value in checks.items():
            if not math.isfinite(value) or value <= 0:
                raise BaselineError(
                    f"baseline file {path}: model {model!r}, check {check!r}: {value:g} is not a "
                    "figure above zero"
                )
        models[model] = {check: float(value) for check, value in checks.items()}
    return models


def baseline_value(
    models: dict[str, dict[str, float]] | None, model: str | None, check: str
) -> float | None:
    """The baseline figure for this model and check, or None (no baseline, other model)."""
    if not models:
        return None
    value = models.get(model or HOST_KEY, {}).get(check)
    return float(value) if isinstance(value, (int, float)) else None
