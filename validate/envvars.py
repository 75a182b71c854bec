"""Every environment variable the suite reads as a setting, in one place, checked before the run.

A module that reads one at import (`float(os.environ.get(...))`) would turn an empty or mistyped
value into a ValueError inside pytest's collection, which ended the whole suite as "interrupted"
(exit 130) without naming the variable. `problem()` runs first (validate.cli's preflight): a bad
value is one line naming the variable, the value and the fix, exit 2.
"""

from __future__ import annotations

import math
import os

#: Seconds-valued settings and their defaults (what each bounds: the module that reads it).
SECONDS = {
    "VALIDATE_DDP_JOIN_TIMEOUT": 90.0,  # validate/measure/ddp.py: every rank's join
    "VALIDATE_DDP_RUN_TIMEOUT": 120.0,  # validate/measure/ddp.py: the training steps
    "VALIDATE_PROBE_TIMEOUT": 180.0,  # validate/measure/subproc.py: one probe
    "VALIDATE_TF_JIT_TIMEOUT": 1800.0,  # validate/session.py: TensorFlow's PTX JIT
    "VALIDATE_MULTINODE_TIMEOUT": 300.0,  # validate/measure/multinode.py: the multi-node job
}
#: The longest any of them may be: a day (a typo of extra zeros is not a setting).
MAX_SECONDS = 86400.0


class BadVariable(ValueError):
    """An environment variable with a value the suite cannot use; `str()` is one line."""


def seconds(name: str, environ: dict[str, str] | None = None) -> float:
    """The value of the seconds-valued variable `name`, or its default when unset."""
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    default = SECONDS[name]
    raw = environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        shown = repr(raw[:40]) + ("..." if len(raw) > 40 else "")
        raise BadVariable(
            f"{name}={shown} is not a number of seconds between 0 and {MAX_SECONDS:g}: "
            f"unset it (the default is {default:g}) or give e.g. {name}={default:g}"
        )
    return value


def problem(environ: dict[str, str] | None = None) -> str | None:
    """The first variable the suite reads whose value it cannot use, as one line; None if none."""
    for name in SECONDS:
        try:
            seconds(name, environ)
        except BadVariable as err:
            return str(err)
    return None
