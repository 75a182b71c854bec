"""Known-good baselines: the figures of a healthy server, saved and compared by GPU model.

A datasheet peak says what a GPU could do; a baseline says what the same model did on a server
the team trusts, which is the sharper comparison (`--save-baseline` then `--baseline`).
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from validate.files import json_nesting_depth
from validate.report.record import Record, write_json

BASELINE_FORMAT = "gpuenv-validate-baseline/1"
HOST_KEY = "host"  # CPU figures (training on CPU) are kept under this key
#: A baseline holds a few figures per GPU model: a file past this size is not one (nor is /dev/zero).
MAX_BASELINE_BYTES = 1 << 20
#: {"format", "models": {model: {check: figure}}} is three levels; a little room for later fields.
MAX_DEPTH = 16
#: A measured figure is a short decimal; 5,000 digits is an attack on int() (CVE-2020-10735).
MAX_NUMBER_CHARS = 64


class BaselineError(ValueError):
    """The baseline file cannot be used; the message says which file and why."""


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
    """The bytes of a baseline file, read once: a regular file of at most MAX_BASELINE_BYTES.

    Opened without blocking and checked on the open descriptor, so a FIFO or a device
    (/dev/zero) is refused at once instead of hanging or filling memory. Callers that need the
    bytes again (the fleet copies them to every host) keep these rather than reading twice.
    """
    try:
        _check_kind(path, os.stat(path).st_mode)  # a device is never even opened (a tape would rewind)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BaselineError(f"baseline file {path} does not exist (make one with --save-baseline)") from None
    except OSError as err:
        raise BaselineError(f"baseline file {path} cannot be read: {err.strerror or err}") from None
    except BaselineError:
        raise
    except ValueError:  # a NUL byte in the path
        raise BaselineError(f"baseline file {path!r} is not a path (it holds a NUL byte)") from None
    try:
        st = os.fstat(fd)
        _check_kind(path, st.st_mode)  # again on what was opened: the path may have been swapped meanwhile
        if st.st_size > MAX_BASELINE_BYTES:
            raise BaselineError(f"baseline file {path} is {st.st_size} bytes; a baseline is at most {MAX_BASELINE_BYTES} (1 MiB)")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_BASELINE_BYTES:  # the file may grow after fstat: never read past the limit
            chunk = os.read(fd, MAX_BASELINE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_BASELINE_BYTES:
            raise BaselineError(f"baseline file {path} is over {MAX_BASELINE_BYTES} bytes (1 MiB), the most a baseline may be")
        return b"".join(chunks)
    except OSError as err:
        raise BaselineError(f"baseline file {path} cannot be read: {err.strerror or err}") from None
    finally:
        os.close(fd)


def parse_baseline(data: bytes, path: str | Path) -> dict[str, dict[str, float]]:
    """The models of a baseline file's bytes; `path` only names the file in messages.

    Numbers must be plain finite figures above zero (a throughput of 0, -3 or NaN judges
    nothing), JSON must be shallow and its numbers short: no input can raise past this function.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BaselineError(f"baseline file {path} is not text (binary data): give a file saved with --save-baseline") from None
    depth = json_nesting_depth(text, stop_above=MAX_DEPTH)
    if depth > MAX_DEPTH:
        raise BaselineError(f"baseline file {path} is nested more than {MAX_DEPTH} levels deep, which no baseline is")
    try:
        parsed = json.loads(text, parse_int=_number, parse_float=_number, parse_constant=_constant)
    except _BadNumber as err:
        raise BaselineError(f"baseline file {path}: {err}") from None
    except json.JSONDecodeError as err:
        raise BaselineError(f"baseline file {path} is not JSON: {err}") from None
    except (ValueError, RecursionError) as err:  # belt and braces: json may still refuse a value
        raise BaselineError(f"baseline file {path} is not usable JSON: {type(err).__name__}") from None
    if not isinstance(parsed, dict) or parsed.get("format") != BASELINE_FORMAT or not isinstance(parsed.get("models"), dict):
        raise BaselineError(f"baseline file {path} is not a {BASELINE_FORMAT} file")
    models: dict[str, dict[str, float]] = {}
    for model, checks in parsed["models"].items():
        if not isinstance(checks, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in checks.values()
        ):
            raise BaselineError(f"baseline file {path}: model {model!r} must map check names to numbers")
        for check, value in checks.items():
            if not math.isfinite(value) or value <= 0:
                raise BaselineError(f"baseline file {path}: model {model!r}, check {check!r}: {value:g} is not a figure above zero")
        models[model] = {check: float(value) for check, value in checks.items()}
    return models


class _BadNumber(ValueError):
    pass


def _number(literal: str) -> float:
    """A JSON number as a float; refused when longer than any measured figure could be."""
    if len(literal) > MAX_NUMBER_CHARS:
        raise _BadNumber(f"a number of {len(literal)} characters; figures have at most {MAX_NUMBER_CHARS}")
    value = float(literal)
    if not math.isfinite(value):
        raise _BadNumber(f"the number {literal[:20]} is out of range")
    return value


def _constant(name: str) -> float:
    raise _BadNumber(f"{name} is not a figure (NaN and Infinity are not measurements)")


def _check_kind(path: str | Path, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise BaselineError(f"baseline {path} is a folder, not a file saved with --save-baseline")
    if not stat.S_ISREG(mode):
        raise BaselineError(f"baseline {path} is {_file_kind(mode)}, not a file saved with --save-baseline")


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def baseline_value(models: dict[str, dict[str, float]] | None, model: str | None, check: str) -> float | None:
    """The baseline figure for this model and check, or None (no baseline, other model)."""
    if not models:
        return None
    value = models.get(model or HOST_KEY, {}).get(check)
    return float(value) if isinstance(value, (int, float)) else None
