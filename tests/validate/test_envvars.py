"""Every environment variable the suite reads is checked before the run and named when wrong
(validate/envvars.py): before, an empty VALIDATE_DDP_JOIN_TIMEOUT aborted the whole suite as
"interrupted" (exit 130) without naming the variable."""

from __future__ import annotations

import ast
import os
import re
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


@pytest.mark.parametrize(
    ("name", "value"),
    [("VALIDATE_DATAPARALLEL_TIMEOUT", ""), ("VALIDATE_DDP_FAULT", "absent")],
)
def test_the_suite_refuses_a_bad_probe_setting_in_one_line_before_running(name, value):
    """The DataParallel bound was read at collection by float() (an empty one ended the run as
    "interrupted" without its name) and a mistyped fault was ignored (the fault test then proved
    nothing): both are one line naming the variable, exit 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "validate", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, name: value, "PYTHONPATH": str(ROOT)},
    )
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, out[-2000:]
    assert "\n" not in out and out.startswith(f"validate: {name}={value!r} is not "), out
    assert "unset it" in out and f"give e.g. {name}=" in out


def test_the_dataparallel_bound_is_the_probe_bound_unless_given():
    name = "VALIDATE_DATAPARALLEL_TIMEOUT"
    assert envvars.seconds(name, {}) == envvars.SECONDS["VALIDATE_PROBE_TIMEOUT"]
    assert envvars.seconds(name, {"VALIDATE_PROBE_TIMEOUT": "240"}) == 240
    assert envvars.seconds(name, {"VALIDATE_PROBE_TIMEOUT": "240", name: "60"}) == 60
    with pytest.raises(envvars.BadVariable, match="the default is VALIDATE_PROBE_TIMEOUT's"):
        envvars.seconds(name, {name: "0"})


@pytest.mark.parametrize(
    ("value", "fault"),
    [(None, None), ("", None), ("absent:1", ("absent", 1)), ("slow:0", ("slow", 0))],
)
def test_a_ddp_fault_is_read(value, fault):
    environ = {} if value is None else {"VALIDATE_DDP_FAULT": value}
    assert envvars.ddp_fault(environ) == fault and envvars.problem(environ) is None


@pytest.mark.parametrize("value", ["absent", "absent:", "slow:one", "late:1", "absent:-1"])
def test_a_mistyped_ddp_fault_is_one_line(value):
    with pytest.raises(envvars.BadVariable) as caught:
        envvars.ddp_fault({"VALIDATE_DDP_FAULT": value})
    assert str(caught.value) == (
        f"VALIDATE_DDP_FAULT={value!r} is not slow:RANK or absent:RANK: unset it (no fault) or "
        "give e.g. VALIDATE_DDP_FAULT=absent:1"
    )
    assert envvars.problem({"VALIDATE_DDP_FAULT": value}) == str(caught.value)


def test_a_dataparallel_fault_is_read_and_a_mistyped_one_is_one_line():
    name = "VALIDATE_DATAPARALLEL_FAULT"
    assert [envvars.dataparallel_fault(e) for e in ({}, {name: ""}, {name: "hang"})] == [
        None,
        None,
        "hang",
    ]
    assert envvars.problem({name: "Hang"}) == (
        f"{name}='Hang' is not hang or abort: unset it (no fault) or give e.g. {name}=hang"
    )


def _setting_reads(source: str) -> list[str]:
    """Every read of a VALIDATE_* variable in `source` (os.environ.get, os.getenv,
    os.environ[...], environ.get), the name given literally or by a module constant."""
    tree = ast.parse(source)
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name) and isinstance(node.value.value, str)
    }

    def named(key: ast.AST) -> str | None:
        value = key.value if isinstance(key, ast.Constant) else None
        value = constants.get(key.id) if isinstance(key, ast.Name) else value
        return value if isinstance(value, str) and value.startswith("VALIDATE_") else None

    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            func = ast.unparse(node.func)
            if func.endswith(("environ.get", "getenv", "environ.pop")) and named(node.args[0]):
                reads.append(f"{func}({named(node.args[0])})")
        if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
            if named(node.slice):
                reads.append(f"environ[{named(node.slice)}]")
    return reads


def test_no_module_but_envvars_reads_a_suite_setting():
    """One place checks and names a bad value: every other module of validate/ asks envvars.py,
    and every VALIDATE_* name the suite mentions is one envvars.py declares."""
    reads, undeclared = {}, set()
    for path in sorted((ROOT / "validate").rglob("*.py")):
        if path.name == "envvars.py":
            continue
        source = path.read_text(encoding="utf-8")
        if _setting_reads(source):
            reads[str(path.relative_to(ROOT))] = _setting_reads(source)
        undeclared |= set(re.findall(r"\bVALIDATE_[A-Z_]*[A-Z]", source)) - set(envvars.NAMES)
    assert reads == {} and undeclared == set()


def test_a_read_outside_envvars_is_caught():
    source = (
        'import os\nFAULT = "VALIDATE_X_FAULT"\n'
        'T = float(os.environ.get("VALIDATE_X_TIMEOUT", "9"))\n'
        "def f():\n    return os.environ[FAULT], os.getenv('HOME')\n"
    )
    assert _setting_reads(source) == [
        "os.environ.get(VALIDATE_X_TIMEOUT)",
        "environ[VALIDATE_X_FAULT]",
    ]
