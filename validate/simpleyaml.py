"""The YAML subset the suite's data tables use (gpu_peaks.yaml, gpu_archs.yaml), read without
PyYAML: images may lack it. Shared by the host reader and the judge, so neither imports the other."""

from __future__ import annotations

import json
from typing import Any


class PeakTableError(ValueError):
    """The peak table is malformed; the message names the entry and the field."""


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
