"""Known-good baselines: the figures of a healthy server, saved and compared by GPU model.

A datasheet peak says what a GPU could do; a baseline says what the same model did on a server
the team trusts, which is the sharper comparison (`--save-baseline` then `--baseline`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from validate.report import Record, write_json

BASELINE_FORMAT = "gpuenv-validate-baseline/1"
HOST_KEY = "host"  # CPU figures (training on CPU) are kept under this key


class BaselineError(ValueError):
    """The baseline file cannot be used; the message says which file and why."""


def build_baseline(records: list[Record], gpu_names: dict[str, str]) -> dict[str, Any]:
    """Measured values by GPU model (NVML name) and check; the first GPU of a model wins."""
    models: dict[str, dict[str, float]] = {}
    for record in records:
        if record.value is None:
            continue
        model = gpu_names.get(record.gpu, HOST_KEY) if record.gpu else HOST_KEY
        models.setdefault(model, {}).setdefault(record.check, record.value)
    return {"format": BASELINE_FORMAT, "models": models}


def save_baseline(path: str | Path, records: list[Record], gpu_names: dict[str, str]) -> None:
    write_json(path, build_baseline(records, gpu_names))


def load_baseline(path: str | Path) -> dict[str, dict[str, float]]:
    """Read a baseline file: {model: {check: value}}; every way it can be unusable is one line."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"baseline file {path} does not exist (make one with --save-baseline)") from None
    except IsADirectoryError:
        raise BaselineError(f"baseline {path} is a folder, not a file saved with --save-baseline") from None
    except UnicodeDecodeError:
        raise BaselineError(f"baseline file {path} is not text (binary data): give a file saved with --save-baseline") from None
    except json.JSONDecodeError as err:
        raise BaselineError(f"baseline file {path} is not JSON: {err}") from None
    except OSError as err:
        raise BaselineError(f"baseline file {path} cannot be read: {err.strerror or err}") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or not isinstance(data.get("models"), dict):
        raise BaselineError(f"baseline file {path} is not a {BASELINE_FORMAT} file")
    for model, checks in data["models"].items():
        if not isinstance(checks, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in checks.values()
        ):
            raise BaselineError(f"baseline file {path}: model {model!r} must map check names to numbers")
    return data["models"]


def baseline_value(models: dict[str, dict[str, float]] | None, model: str | None, check: str) -> float | None:
    """The baseline figure for this model and check, or None (no baseline, other model)."""
    if not models:
        return None
    value = models.get(model or HOST_KEY, {}).get(check)
    return float(value) if isinstance(value, (int, float)) else None
