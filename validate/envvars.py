"""Every environment variable the suite reads as a setting, in one place, checked before the run.

A module that reads one at import (`float(os.environ.get(...))`) would turn an empty or mistyped
value into a ValueError inside pytest's collection, which ended the whole suite as "interrupted"
(exit 130) without naming the variable. So the probes and checks read their settings only through
this module (`seconds`, `ddp_fault`, `dataparallel_fault`), and `problem()` runs first
(validate.cli's preflight): a bad value is one line naming the variable, the value and the fix,
exit 2. The environment the suite validates (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, ...)
is no setting: the checks read and judge it themselves.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path

#: Seconds-valued settings and their defaults (what each bounds: the module that reads it).
SECONDS = {
    "VALIDATE_DDP_JOIN_TIMEOUT": 90.0,  # validate/measure/ddp.py: every rank's join
    "VALIDATE_DDP_RUN_TIMEOUT": 120.0,  # validate/measure/ddp.py: the training steps
    "VALIDATE_PROBE_TIMEOUT": 180.0,  # validate/measure/subproc.py: one probe
    "VALIDATE_TF_JIT_TIMEOUT": 1800.0,  # validate/session.py: TensorFlow's PTX JIT
    "VALIDATE_MULTINODE_TIMEOUT": 300.0,  # validate/measure/multinode.py: the multi-node job
    "VALIDATE_DATAPARALLEL_TIMEOUT": 180.0,  # validate/checks/test_07_multigpu.py: DataParallel
}
#: Settings whose default, when unset, is another one's value (a probe's own bound is the usual
#: probe bound unless given).
DEFAULT_FROM = {"VALIDATE_DATAPARALLEL_TIMEOUT": "VALIDATE_PROBE_TIMEOUT"}
#: The longest any of them may be: a day (a typo of extra zeros is not a setting).
MAX_SECONDS = 86400.0
#: Fault injection for the multi-GPU tests (validate/measure/ddp.py): rank R slow or absent, and
#: the DataParallel probe hanging or dying. Unset or empty: no fault.
DDP_FAULT = "VALIDATE_DDP_FAULT"
DDP_FAULT_KINDS = ("slow", "absent")
DATAPARALLEL_FAULT = "VALIDATE_DATAPARALLEL_FAULT"
DATAPARALLEL_FAULT_KINDS = ("hang", "abort")

#: The filesystem root the PCI bus is read under (validate/host/pcibus.py; a test and diagnostic
#: seam). Any path is a root: one without a sysfs tree reads as a bus with no devices.
SYSFS_ROOT = "VALIDATE_SYSFS_ROOT"

#: Every variable the suite reads as a setting: no other module of validate/ reads one
#: (tests/validate/test_envvars.py).
NAMES = (*SECONDS, DDP_FAULT, DATAPARALLEL_FAULT, SYSFS_ROOT)

Environ = Mapping[str, str]


class BadVariable(ValueError):
    """An environment variable with a value the suite cannot use; `str()` is one line."""


def _shown(name: str, raw: str) -> str:
    """`NAME='value'`, a long value cut short: the start of every one-line message."""
    return f"{name}={raw[:40]!r}" + ("..." if len(raw) > 40 else "")


def seconds(name: str, environ: Environ | None = None) -> float:
    """The value of the seconds-valued variable `name`, or its default when unset."""
    environ = os.environ if environ is None else environ
    raw = environ.get(name)
    if raw is None:
        fallback = DEFAULT_FROM.get(name)
        return SECONDS[name] if fallback is None else seconds(fallback, environ)
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        default = SECONDS[name]
        source = f"{DEFAULT_FROM[name]}'s value, " if name in DEFAULT_FROM else ""
        raise BadVariable(
            f"{_shown(name, raw)} is not a number of seconds between 0 and {MAX_SECONDS:g}: "
            f"unset it (the default is {source}{default:g}) or give e.g. {name}={default:g}"
        )
    return value


def ddp_fault(environ: Environ | None = None) -> tuple[str, int] | None:
    """(kind, rank) from VALIDATE_DDP_FAULT=slow:R or absent:R, or None when unset or empty."""
    raw = (os.environ if environ is None else environ).get(DDP_FAULT, "")
    if not raw:
        return None
    kind, _, rank = raw.strip().partition(":")
    if kind not in DDP_FAULT_KINDS or not rank.isdigit():
        raise BadVariable(
            f"{_shown(DDP_FAULT, raw)} is not slow:RANK or absent:RANK: unset it (no fault) or "
            f"give e.g. {DDP_FAULT}=absent:1"
        )
    return kind, int(rank)


def dataparallel_fault(environ: Environ | None = None) -> str | None:
    """`hang` or `abort` from VALIDATE_DATAPARALLEL_FAULT, or None when unset or empty."""
    raw = (os.environ if environ is None else environ).get(DATAPARALLEL_FAULT, "")
    if not raw:
        return None
    if raw.strip() not in DATAPARALLEL_FAULT_KINDS:
        raise BadVariable(
            f"{_shown(DATAPARALLEL_FAULT, raw)} is not hang or abort: unset it (no fault) or "
            f"give e.g. {DATAPARALLEL_FAULT}=hang"
        )
    return raw.strip()


def sysfs_root(environ: Environ | None = None) -> Path:
    """VALIDATE_SYSFS_ROOT when set and not empty, else the real root."""
    return Path((os.environ if environ is None else environ).get(SYSFS_ROOT) or "/")


def _readers() -> list[Callable[[Environ | None], object]]:
    """Every reader of this module: what `problem()` runs."""
    by_seconds = [lambda environ, name=name: seconds(name, environ) for name in SECONDS]
    return [*by_seconds, ddp_fault, dataparallel_fault]


def problem(environ: Environ | None = None) -> str | None:
    """The first variable the suite reads whose value it cannot use, as one line; None if none."""
    for read in _readers():
        try:
            read(environ)
        except BadVariable as err:
            return str(err)
    return None
