"""Every environment variable the suite reads is checked before the run and named when wrong
(validate/envvars.py): before, an empty VALIDATE_DDP_JOIN_TIMEOUT aborted the whole suite as
"interrupted" (exit 130) without naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from validate import envvars

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(envvars.SECONDS))
@pytest.mark.parametrize("value", ["", "ninety", "-5", "nan", "inf", "1e9"])
def test_a_bad_value_is_one_line_naming_the_variable(name, value):
    with pytest.raises(envvars.BadVariable) as caught:
        envvars.seconds(name, {name: value})
    assert str(caught.value).startswith(
        f"{name}={value!r} is not a number of seconds"
    ) and "unset it" in str(caught.value)
    assert envvars.problem({name: value}) == str(caught.value)


def test_unset_gives_the_default_and_a_good_value_is_read():
    assert envvars.seconds("VALIDATE_DDP_JOIN_TIMEOUT", {}) == 90
    assert envvars.seconds("VALIDATE_DDP_JOIN_TIMEOUT", {"VALIDATE_DDP_JOIN_TIMEOUT": " 30 "}) == 30
    assert envvars.problem({}) is None


@pytest.mark.parametrize("name", ["VALIDATE_DDP_JOIN_TIMEOUT", "VALIDATE_PROBE_TIMEOUT"])
def test_the_suite_refuses_an_empty_variable_in_one_line_before_running(name):
    proc = subprocess.run(
        [sys.executable, "-m", "validate", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, name: "", "PYTHONPATH": str(ROOT)},
    )
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, out[-2000:]
    assert (
        out == f"validate: {name}='' is not a number of seconds between 0 and 86400: unset it (the "
        f"default is {envvars.SECONDS[name]:g}) or give e.g. {name}={envvars.SECONDS[name]:g}"
    ), out
