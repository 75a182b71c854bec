"""One set of stack options in every task that addresses a stack (issue 19 item 4), and no traceback
from the `gpuenv` command line whatever short flag comes before or after the task name (item 5).

The option test walks every task's real signature and its help as declared; the flag test runs
`gpuenv` (its real Program, in this process: a traceback would fail the test) with each short flag
the README documents.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from teamcases import ROOT

from gpuenv.cli import namespace
from gpuenv.cli.task import SHORT_FLAGS, STACK_HELP, STACK_OPTIONS

#: The tasks that address a stack (they resolve one from the stack options).
STACK_TASKS = {"build", "push", "run", "lock", "export", "install", "resolve", "validate", "verify"}


def tasks():
    ns = namespace()
    return {name: ns[name] for name in ns.task_names}


def parameters(task) -> list[str]:
    return list(inspect.signature(task.body).parameters)[1:]


@functools.cache
def declared_help() -> dict[str, dict[str, str]]:
    """Each task's `help` table as its `@task(help=...)` declares it, read in a fresh interpreter.

    Invoke pops an option's help from the task's table as it parses the task (Task.arg_opts), and
    the tasks are module objects: in this process any earlier in-process run (the flag test below,
    tests/team/test_config.py's) may have emptied them, whatever order the tests run in."""
    code = (
        "import json; from gpuenv.cli import namespace; ns = namespace(); "
        "print(json.dumps({name: ns[name].help for name in ns.task_names}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def options_without_help(name: str) -> list[str]:
    """The stack options task `name` declares no help for, as flags."""
    helps = declared_help()[name]
    return [f"--{o.replace('_', '-')}" for o in STACK_OPTIONS if not helps.get(o)]


def test_every_task_that_addresses_a_stack_takes_every_stack_option():
    found = {name for name, task in tasks().items() if "cuda" in parameters(task)}
    assert found == STACK_TASKS, (
        "a task that addresses a stack must be listed here (and take every stack option)"
    )
    for name in sorted(STACK_TASKS):
        task = tasks()[name]
        missing = [option for option in STACK_OPTIONS if option not in parameters(task)]
        assert not missing, (
            f"invoke {name} lacks --{', --'.join(m.replace('_', '-') for m in missing)}"
        )
        assert options_without_help(name) == [], f"invoke {name}: these options have no help"
        defaults = inspect.signature(task.body).parameters
        assert defaults["strict_driver"].default is False, (
            f"invoke {name} --strict-driver must be a flag"
        )
        assert all(defaults[o].default is None for o in STACK_OPTIONS if o != "strict_driver"), name


def test_the_help_is_read_as_declared_after_an_in_process_parse(monkeypatch, capsys, tmp_path):
    """Each stack task parsed here first (`gpuenv NAME --help`: Invoke pops the help it shows):
    the help check reads the declarations, not what the parse left, so it still passes."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "invoke.yaml").write_text("gpuenv: {}\n")
    for name in sorted(STACK_TASKS):
        assert run_gpuenv([name, "--help"], monkeypatch, capsys)[0] == 0
        assert not tasks()[name].help.get("cuda"), "Invoke no longer pops help: simplify this test"
        assert options_without_help(name) == [], name


def test_the_shared_help_covers_every_stack_option():
    assert set(STACK_OPTIONS) <= set(STACK_HELP)


def documented_short_flags() -> dict[str, str]:
    """`-c` cuda, `-f` framework, ... as the docs' `gpuenv` section lists them (docs/team.md)."""
    text = (ROOT / "docs" / "team.md").read_text()
    section = text.split("Short flags mean the same in every task:", 1)[1].split(".", 1)[0]
    found = dict((flag, name) for flag, name in re.findall(r"`(-[a-z])` ([a-z-]+)", section))
    assert found, "docs/team.md lists no short flags"
    return found


def test_the_readme_documents_the_short_flags_the_code_has():
    documented = documented_short_flags()
    code = {f"-{flag}": name.rstrip("_").replace("_", "-") for name, flag in SHORT_FLAGS.items()}
    assert documented == code


def task_with(option: str) -> str:
    """A task that has `option` (stack tasks first, so a value like 'cpu' makes sense)."""
    for name in (
        "resolve",
        "build",
        "run",
        "push",
        "export",
        "lock",
        "install",
        "validate",
        "doctor",
    ):
        if (
            option.replace("-", "_") in parameters(tasks()[name])
            or option == "json"
            and "json_" in parameters(tasks()[name])
        ):
            return name
    raise AssertionError(f"no task has --{option}")


VALUES = {
    "cuda": "cpu",
    "framework": "torch",
    "python": "3.11",
    "backend": "uv",
    "registry": "127.0.0.1:5000",
    "image": "x:y",
    "gpus": "none",
    "tag": "x:y",
    "wheelhouse": "/opt/wheels",
    "output": "env.yml",
}


def run_gpuenv(argv: list[str], monkeypatch, capsys) -> tuple[int, str]:
    from gpuenv.cli import program

    monkeypatch.setattr(sys, "argv", ["gpuenv", *argv])
    with pytest.raises(SystemExit) as done:
        program.main()
    code = (
        done.value.code
        if isinstance(done.value.code, int)
        else (0 if done.value.code is None else 1)
    )
    return code, capsys.readouterr().err


@pytest.mark.parametrize("flag", sorted(documented_short_flags()))
def test_each_short_flag_before_and_after_the_task_name_is_never_a_traceback(
    flag, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "invoke.yaml").write_text("gpuenv: {}\n")
    option = documented_short_flags()[flag]
    name = task_with(option)
    value = [VALUES[option]] if option in VALUES else []
    # after the task name: the task's option (--help: parsed, nothing run)
    code, err = run_gpuenv([name, flag, *value, "--help"], monkeypatch, capsys)
    assert code == 0, err
    # before the task name: Invoke's own option of that letter, or none; never a traceback
    code, err = run_gpuenv([flag, *value, name, "--help"], monkeypatch, capsys)
    assert "Traceback" not in err
    from gpuenv.cli.program import GpuenvProgram

    # Invoke's own option of that letter parses when it takes a value exactly as the task's does;
    # otherwise (no such letter, or a value left over) the line says where task options go.
    invokes_own = {
        n: a.takes_value for a in GpuenvProgram().core_args() for n in a.names if len(n) == 1
    }
    parses = flag.lstrip("-") in invokes_own and invokes_own[flag.lstrip("-")] == bool(value)
    assert code == (0 if parses else 2), err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gpuenv: "), err
        assert "after the task name" in lines[0], "the line says where task options go"


def test_a_reader_that_goes_away_ends_gpuenv_quietly():
    """`gpuenv --list | head`: the pipe closes before the list is written; gpuenv exits 0 with
    nothing on stderr (no BrokenPipeError traceback)."""
    import subprocess

    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = ['gpuenv', '--list']; from "
        "gpuenv.cli.program import main; main()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader is gone before gpuenv writes a byte
    err = proc.stderr.read().decode()
    assert (proc.wait(timeout=60), err) == (0, "")


@pytest.mark.parametrize("argv", [["--list"], ["build", "--help"]])
def test_a_reader_that_goes_away_ends_the_plain_invoke_command_quietly(argv):
    """`invoke --list | head` and `invoke build --help | head` (Invoke's own command, which loads
    tasks.py): the pipe closes early; exit 0, nothing on stderr."""
    import subprocess

    invoke = Path(sys.executable).with_name("invoke")
    proc = subprocess.Popen(
        [str(invoke), *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader is gone before a byte is written
    err = proc.stderr.read().decode()
    assert (proc.wait(timeout=60), err) == (0, "")
