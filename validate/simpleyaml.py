"""The one reader of the suite's data tables (gpu_peaks.yaml, scaling.yaml, health_limits.yaml,
gpu_archs.yaml, pci_ids.yaml, nvml_fields.yaml, driver_floor.yaml): the YAML subset they are
kept to, read without PyYAML. Images may lack PyYAML, and a table read by one reader everywhere
parses the same in an image and on a laptop. Shared by the host reader and the judge, so neither
imports the other; the suite never imports PyYAML (tests/test_owners.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class TableError(ValueError):
    """A data table is malformed; the message names the line, or the entry and the field."""


def _scalar(text: str) -> Any:
    text = text.strip()
    if text in ("null", "~", ""):
        return None
    if text in ("true", "false"):
        return text == "true"
    if text.startswith(("[", '"', "{")):
        return json.loads(text)
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text


def parse_simple_yaml(text: str) -> dict[str, list[dict[str, Any]]]:
    """Read the subset the tables use: top-level keys, each holding a list of flat mappings."""
    result: dict[str, list[dict[str, Any]]] = {}
    current_list: list[dict[str, Any]] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            key, _, rest = line.partition(":")
            if rest.strip():
                raise TableError(f"line {number}: expected 'key:' opening a list, got {line!r}")
            current_list = result.setdefault(key.strip(), [])
            continue
        if current_list is None:
            raise TableError(f"line {number}: indented line before any top-level key")
        body = line.strip()
        if body.startswith("- "):
            current_list.append({})
            body = body[2:]
        if not current_list:
            raise TableError(f"line {number}: mapping entry outside a list item")
        key, sep, value = body.partition(":")
        if not sep:
            raise TableError(f"line {number}: expected 'key: value', got {body!r}")
        current_list[-1][key.strip()] = _scalar(value)
    return result


def load_table(path: Path) -> dict[str, list[dict[str, Any]]]:
    """One of the suite's data tables, read by the subset reader (never PyYAML: see above)."""
    return parse_simple_yaml(path.read_text(encoding="utf-8"))
