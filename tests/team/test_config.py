"""The team's settings: Invoke's layers, where each value came from, one-line errors, the
StackRequest.

Unit tests feed layer data to the pure functions; the CLI tests run the real Invoke (tasks.py and
the `gpuenv` command) against invoke.yaml files written by the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from teamcases import run_gpuenv, run_invoke

from gpuenv.cli.config import (
    DEFAULT_ORIGIN,
    Layer,
    Settings,
    StackRequest,
    effective_rows,
    env_var,
    origins,
    parse_registry,
    settings_from,
    stack_request,
)
from gpuenv.errors import BadInput

# ---------------------------------------------------------------- pure: origins and checks


def layers(**sections) -> list[Layer]:
    out = [Layer(DEFAULT_ORIGIN, {})]
    for label, section in sections.items():
        out.append(Layer(label.replace("_", "."), section, is_env=label == "env"))
    return out


def test_later_layer_wins_and_is_named():
    where = origins(
        layers(
            user_yaml={"python": "3.10", "cuda": "12.1"},
            invoke_yaml={"python": "3.11"},
            env={"python": "3.12"},
        )
    )
    assert where["python"] == "INVOKE_GPUENV_PYTHON"
    assert where["cuda"] == "user.yaml"
    assert where["backend"] == DEFAULT_ORIGIN


def test_null_in_a_file_does_not_claim_the_value():
    where = origins(layers(invoke_yaml={"python": None, "fleet": {"parallel": None}}))
    assert where["python"] == DEFAULT_ORIGIN and where["fleet.parallel"] == DEFAULT_ORIGIN


def test_nested_keys_and_their_variables():
    assert env_var("fleet.slurm.partition") == "INVOKE_GPUENV_FLEET_SLURM_PARTITION"
    where = origins(layers(x_yaml={"fleet": {"slurm": {"partition": "gpu"}}}))
    assert where["fleet.slurm.partition"] == "x.yaml"


def test_settings_are_checked_and_normalised():
    merged = {
        "framework": "PyTorch",
        "cuda": "12.1.1",
        "python": "py3.11",
        "backend": "uv",
        "platforms": "linux-64,linux-aarch64",
        "registry": "Registry.Example.com:5000",
        "fleet": {"hosts": ["ssh://a", "ssh://b"], "parallel": "8"},
    }
    settings = settings_from(merged, layers(invoke_yaml=merged))
    assert (settings.framework, settings.cuda, settings.python, settings.backend) == (
        "torch",
        "12.1",
        "3.11",
        "uv",
    )
    assert settings.platforms == ("linux-64", "linux-aarch64")
    assert settings.registry == "registry.example.com:5000"
    assert settings.fleet.hosts == ("ssh://a", "ssh://b") and settings.fleet.parallel == 8
    assert settings.source("cuda") == "invoke.yaml"


@pytest.mark.parametrize(
    "section, words",
    [
        ({"backend": "pip"}, ["invoke.yaml", "gpuenv.backend", "'pip'", "conda-lock, uv"]),
        ({"python": 3.1}, ["invoke.yaml", "gpuenv.python", "number", 'python: "3.10"']),
        ({"cuda": "12.7"}, ["invoke.yaml", "gpuenv.cuda", "12.7", "'cpu'"]),
        ({"framework": "jax"}, ["invoke.yaml", "gpuenv.framework", "'jax'", "torch, tensorflow"]),
        ({"platforms": ["win-64"]}, ["invoke.yaml", "gpuenv.platforms", "'win-64'", "linux-64"]),
        (
            {"registry": "https://r.example.com/x"},
            ["invoke.yaml", "gpuenv.registry", "scheme", "r.example.com"],
        ),
        ({"fleet": {"parallel": 0}}, ["invoke.yaml", "gpuenv.fleet.parallel", "1 or more"]),
        ({"frameworks": "torch"}, ["invoke.yaml", "unknown key gpuenv.frameworks", "framework"]),
    ],
)
def test_a_bad_value_names_file_key_and_fix(section, words):
    with pytest.raises(BadInput) as err:
        settings_from(section, layers(invoke_yaml=section))
    text = err.value.render()
    assert "\n" not in text
    for word in words:
        assert word in text, text


def test_a_bad_variable_is_named_as_the_variable():
    with pytest.raises(BadInput, match=r"^INVOKE_GPUENV_BACKEND: gpuenv.backend 'poetry'"):
        settings_from({"backend": "poetry"}, layers(env={"backend": "poetry"}))


@pytest.mark.parametrize(
    "value, expected",
    [
        ("127.0.0.1:5000", "127.0.0.1:5000"),
        ("localhost", "localhost"),
        ("REG.example.com", "reg.example.com"),
    ],
)
def test_registry_hosts(value, expected):
    assert parse_registry(value) == expected


@pytest.mark.parametrize(
    "value, word",
    [
        ("myteam", "Docker Hub"),
        ("r.example.com:99999", "out of range"),
        ("http://r:5000", "scheme"),
        ("r.io/team", "path"),
    ],
)
def test_bad_registry_hosts(value, word):
    with pytest.raises(BadInput, match=word):
        parse_registry(value)


def test_command_line_beats_file():
    settings = Settings(
        framework="torch",
        cuda="12.1",
        python="3.11",
        backend="uv",
        platforms=("linux-64",),
        base_image="local/cuda:12",
    )
    request = stack_request({"cuda": "cpu", "python": None, "platforms": []}, settings)
    assert request == StackRequest(
        framework="torch",
        cuda="cpu",
        python="3.11",
        backend="uv",
        platforms=("linux-64",),
        base_image="local/cuda:12",
    )
    assert request.resolver_options()["cuda"] == "cpu"


def test_a_framework_pin_on_the_command_line_implies_its_framework():
    settings = Settings(framework="torch")
    assert stack_request({"tensorflow": "2.15"}, settings).framework == "tensorflow"
    assert (
        stack_request({"tensorflow": "2.15", "framework": "torch"}, settings).framework == "torch"
    )


def test_effective_rows_say_what_none_means_and_where_values_came_from():
    settings = settings_from({"python": "3.11"}, layers(invoke_yaml={"python": "3.11"}))
    rows = {
        key: (value, source) for key, value, source in effective_rows(settings, {"cuda": "cpu"})
    }
    assert rows["python"] == ("3.11", "invoke.yaml")
    assert rows["cuda"] == ("cpu", "command line")
    assert rows["backend"] == ("(conda-lock)", DEFAULT_ORIGIN)


# ---------------------------------------------------------------- through the real Invoke


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def resolve_json(proc) -> dict:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_gpuenv_command_reads_the_nearest_invoke_yaml_and_every_layer_in_order(tmp_path):
    project = tmp_path / "team"
    (project / "sub").mkdir(parents=True)
    write(project, "invoke.yaml", 'gpuenv:\n  cuda: cpu\n  framework: torch\n  python: "3.11"\n')
    home = tmp_path / "home"
    home.mkdir()
    write(
        home, ".invoke.yaml", 'gpuenv:\n  python: "3.12"\n  cuda: "12.1"\n'
    )  # user file: below the project's
    env = {"HOME": str(home)}
    stack = resolve_json(run_gpuenv("resolve", "--json", cwd=project / "sub", env=env))
    assert (stack["cuda"], stack["python"]) == ("cpu", "3.11")
    stack = resolve_json(
        run_gpuenv(
            "resolve", "--json", cwd=project / "sub", env={**env, "INVOKE_GPUENV_PYTHON": "3.12"}
        )
    )
    assert stack["python"] == "3.12"
    other = write(tmp_path, "other.yaml", 'gpuenv:\n  python: "3.10"\n')
    stack = resolve_json(
        run_gpuenv(
            "-f",
            str(other),
            "resolve",
            "--json",
            cwd=project,
            env={**env, "INVOKE_GPUENV_PYTHON": "3.12"},
        )
    )
    assert stack["python"] == "3.10"
    stack = resolve_json(
        run_gpuenv("-f", str(other), "resolve", "--json", "-p", "3.12", cwd=project, env=env)
    )
    assert stack["python"] == "3.12"


def test_doctor_shows_each_value_and_its_origin(tmp_path):
    write(tmp_path, "invoke.yaml", "gpuenv:\n  cuda: cpu\n  registry: 127.0.0.1:5000\n")
    proc = run_gpuenv(
        "doctor", "--json", cwd=tmp_path, env={"INVOKE_GPUENV_BACKEND": "uv", "HOME": str(tmp_path)}
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["team_stack"]["cuda"] == "cpu", (
        "the stack the tasks build from the settings alone"
    )
    rows = {row["key"]: row for row in report["settings"]["values"]}
    assert rows["cuda"]["value"] == "cpu" and rows["cuda"]["source"] == "invoke.yaml"
    assert rows["backend"]["value"] == "uv" and rows["backend"]["source"] == "INVOKE_GPUENV_BACKEND"
    assert rows["registry"]["value"] == "127.0.0.1:5000"
    assert rows["python"]["source"] == "default"
    table = run_gpuenv("doctor", cwd=tmp_path, env={"HOME": str(tmp_path)}).stdout
    assert "INVOKE_GPUENV" not in table and "invoke.yaml" in table


def test_doctor_reports_a_bad_file_and_exits_2(tmp_path):
    write(tmp_path, "invoke.yaml", "gpuenv:\n  backend: pip\n")
    proc = run_gpuenv("doctor", cwd=tmp_path, env={"HOME": str(tmp_path)})
    assert proc.returncode == 2, "doctor must not pass while the settings are invalid"
    assert (
        "settings  not available: invoke.yaml: gpuenv.backend 'pip' is not a lock backend"
        in proc.stdout
    )
    assert (
        proc.stderr.strip().startswith(
            "gpuenv: the settings are invalid: invoke.yaml: gpuenv.backend"
        )
        and "Traceback" not in proc.stderr
    )


def test_a_bad_file_value_is_one_line_with_exit_2(tmp_path):
    write(tmp_path, "invoke.yaml", "gpuenv:\n  python: 3.10\n")
    proc = run_gpuenv("resolve", cwd=tmp_path, env={"HOME": str(tmp_path)})
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("gpuenv: invoke.yaml: gpuenv.python")


@pytest.mark.parametrize(
    "text, words",
    [
        ("gpuenv: {\n", ["invoke.yaml:2: not valid YAML"]),
        ("gpuenv:\n  fleet: 3\n", ["sets a section", "gpuenv.fleet:"]),
        ("gpuenv: [torch]\n", ["sets a section"]),
    ],
)
def test_a_file_invoke_cannot_load_is_one_line_for_the_gpuenv_command(tmp_path, text, words):
    write(tmp_path, "invoke.yaml", text)
    proc = run_gpuenv("resolve", cwd=tmp_path, env={"HOME": str(tmp_path)})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr
    for word in words:
        assert word in proc.stderr


def test_tasks_py_takes_a_runtime_file_too(tmp_path):
    other = write(tmp_path, "team.yaml", 'gpuenv:\n  cuda: cpu\n  python: "3.12"\n')
    stack = resolve_json(run_invoke("-f", str(other), "resolve", "--json"))
    assert (stack["cuda"], stack["python"]) == ("cpu", "3.12")


def test_short_flags_mean_the_same_in_every_task():
    for name in ("lock", "build", "push", "install", "run", "resolve"):
        proc = run_invoke(name, "--help")
        assert proc.returncode == 0, proc.stderr
        assert "-c STRING, --cuda=STRING" in proc.stdout, name
        assert "-p STRING, --python=STRING" in proc.stdout, name
    for name in ("lock", "build", "push", "install"):
        assert "-v, --verbose" in run_invoke(name, "--help").stdout, name


def test_the_gpuenv_command_is_declared_and_runs_outside_the_project(tmp_path):
    import tomllib
    from teamcases import ROOT

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gpuenv"] == "gpuenv.cli.program:main"
    proc = run_gpuenv("--list", cwd=tmp_path, env={"HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    for name in ("build", "push", "install", "lock", "validate", "doctor"):
        assert f"  {name} " in proc.stdout
    assert run_gpuenv("--version", cwd=tmp_path).stdout.strip() == "gpuenv 0.1.0"


# ---------------------------------------------------------------- read once per task


@pytest.mark.parametrize(
    "argv",
    [
        ["--dry", "build", "--driver", "550.54.15", "--gpu-arch", "9.0"],
        ["--dry", "lock", "--driver", "550.54.15", "--gpu-arch", "9.0"],
        ["resolve", "--driver", "550.54.15", "--gpu-arch", "9.0"],
        ["--dry", "validate", "--local"],
    ],
    ids=lambda argv: argv[1] if argv[0] == "--dry" else argv[0],
)
def test_each_task_reads_the_settings_once(argv, tmp_path, monkeypatch, capsys):
    """Invoke's layers are checked once per task and the Settings passed down (build read them
    three times, lock twice): the real task, in this process, with settings_from counted."""
    from invoke import Program

    from gpuenv.cli import config, namespace

    reads = []

    def counted(merged, found):
        reads.append(1)
        return settings_from(merged, found)

    monkeypatch.setattr(config, "settings_from", counted)
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path / "locks"))  # no lock, no current stack
    monkeypatch.chdir(tmp_path)
    Program(namespace=namespace()).run(["invoke", *argv], exit=False)
    assert "gpuenv:" not in capsys.readouterr().err
    assert len(reads) == 1
