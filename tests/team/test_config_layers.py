"""Config that is truthful and bounded (issue 21 items 6, 7) and the team's pins (issue 19 item 3).

The committed invoke.yaml against the code's defaults; every layer in Invoke's order; typos in keys
and variables; hostile files (size, alias bombs, encodings, shapes, YAML's base-60) each one line,
exit 2; a pinned stack that stays the same on every driver. The CLI cases run the real `gpuenv`.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from hangbound import HANG_BOUND_S
from teamcases import ROOT, one_line_exit_2, run_gpuenv

from gpuenv.cli.config import (
    DEFAULT_ORIGIN,
    DEFAULTS,
    IMPLIED,
    KNOWN_KEYS,
    Layer,
    flatten,
    settings_from,
)
from gpuenv.errors import BadInput

# ---------------------------------------------------------------- the committed invoke.yaml

_KEY_LINE = re.compile(r"^(?P<indent>\s*)# \s*(?P<key>[a-z_]+):(?P<rest>.*)$")


def committed_keys() -> dict[str, str]:
    """Every `# key: example   # default: X` line of invoke.yaml, as {dotted key: X}."""
    text = (ROOT / "invoke.yaml").read_text()
    found: dict[str, str] = {}
    path: list[tuple[int, str]] = []
    for line in text.split("gpuenv:\n", 1)[1].splitlines():
        match = _KEY_LINE.match(line)
        if not match:
            continue
        depth = (line.index(match["key"] + ":") - 4) // 2  # top-level keys are written "  # key:"
        path = [p for p in path if p[0] < depth] + [(depth, match["key"])]
        rest = match["rest"]
        if "# default:" in rest:
            default = rest.split("# default:", 1)[1].strip()
            found[".".join(k for _, k in path)] = re.split(r"\s{2,}", default)[0]
    return found


def test_committed_invoke_yaml_lists_every_key_with_its_true_default():
    listed = committed_keys()
    assert tuple(listed) == KNOWN_KEYS, (
        "invoke.yaml and gpuenv.cli.config.DEFAULTS list different keys (or order)"
    )
    assert listed == {key: IMPLIED[key] for key in KNOWN_KEYS}
    assert listed["fleet.parallel"] == "8"
    assert set(flatten(DEFAULTS)) == set(IMPLIED)


def test_committed_invoke_yaml_sets_nothing_and_its_examples_are_valid(tmp_path):
    data = yaml.safe_load((ROOT / "invoke.yaml").read_text())
    assert data == {"gpuenv": None}, (
        "the committed file must leave every key unset (commented), so other layers take effect"
    )
    uncommented = re.sub(
        r"^  # (\s*[a-z_]+:)", r"  \1", (ROOT / "invoke.yaml").read_text(), flags=re.M
    )
    section = yaml.safe_load(uncommented)["gpuenv"]
    (tmp_path / "wheels").mkdir()
    settings = settings_from(
        None, [Layer(DEFAULT_ORIGIN, {}), Layer("invoke.yaml", section, folder=str(tmp_path))]
    )
    assert (
        settings.fleet.parallel == 8
        and settings.fleet.outlier_floor == 0.9
        and settings.fleet.slurm_time == "00:30:00"
    )


# ---------------------------------------------------------------- layers, typos, types (pure)


def layers(**sections) -> list[Layer]:
    return [Layer(DEFAULT_ORIGIN, {})] + [
        Layer(name.replace("_", "."), section) for name, section in sections.items()
    ]


@pytest.mark.parametrize(
    "section, words",
    [
        (
            {"fleet": {"paralel": 4}},
            ["invoke.yaml: unknown key gpuenv.fleet.paralel", "did you mean gpuenv.fleet.parallel"],
        ),
        ({"fleet": {"parallel": True}}, ["gpuenv.fleet.parallel True is not a whole number"]),
        ({"fleet": {"parallel": 8.5}}, ["gpuenv.fleet.parallel 8.5 is not a whole number"]),
        (
            {"fleet": {"outlier_floor": 1.5}},
            ["gpuenv.fleet.outlier_floor 1.5 is not above 0 and at most 1"],
        ),
        ({"fleet": {"outlier_floor": 0}}, ["gpuenv.fleet.outlier_floor 0 is not above 0"]),
        ({"fleet": {"outlier_floor": True}}, ["gpuenv.fleet.outlier_floor True is not a number"]),
        ({"torch": 2.1}, ["gpuenv.torch", "is the number 2.1", 'torch: "2.3.1"']),
        ({"strict_driver": "maybe"}, ["gpuenv.strict_driver 'maybe' is not true or false"]),
        ({"wheelhouse": "no/such/folder"}, ["gpuenv.wheelhouse 'no/such/folder': no such folder"]),
        ({"fleet": "x"}, ["gpuenv.fleet is 'x', but it is a section"]),
    ],
)
def test_bad_values_and_typos_name_the_file_and_key(section, words):
    with pytest.raises(BadInput) as err:
        settings_from(None, layers(invoke_yaml=section))
    text = err.value.render()
    assert "\n" not in text
    for word in words:
        assert word in text, text


def test_null_in_a_higher_file_does_not_hide_a_lower_one():
    settings = settings_from(
        None,
        layers(
            user_yaml={"python": "3.12", "fleet": {"parallel": 3}},
            invoke_yaml={"python": None, "fleet": {"parallel": None, "hosts": None}},
        ),
    )
    assert settings.python == "3.12" and settings.source("python") == "user.yaml"
    assert settings.fleet.parallel == 3 and settings.source("fleet.parallel") == "user.yaml"


def test_outlier_floor_defaults_to_0_9_and_reads_a_variable():
    assert settings_from(None, layers()).fleet.outlier_floor == 0.9
    env = Layer("environment", {"fleet": {"outlier_floor": "0.75"}}, is_env=True)
    settings = settings_from(None, [Layer(DEFAULT_ORIGIN, {}), env])
    assert (
        settings.fleet.outlier_floor == 0.75
        and settings.source("fleet.outlier_floor") == "INVOKE_GPUENV_FLEET_OUTLIER_FLOOR"
    )


def test_a_relative_wheelhouse_is_read_from_the_file_s_folder(tmp_path):
    (tmp_path / "wheels").mkdir()
    settings = settings_from(
        None,
        [
            Layer(DEFAULT_ORIGIN, {}),
            Layer("invoke.yaml", {"wheelhouse": "wheels"}, folder=str(tmp_path)),
        ],
    )
    assert settings.wheelhouse == str(tmp_path / "wheels")


# ---------------------------------------------------------------- through the real `gpuenv`


def write(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.fixture
def project(tmp_path):
    """A team folder holding a copy of the committed invoke.yaml, and an empty HOME."""
    (tmp_path / "team").mkdir()
    (tmp_path / "home").mkdir()
    write(tmp_path / "team", "invoke.yaml", (ROOT / "invoke.yaml").read_text())
    return tmp_path


def test_home_and_system_files_take_effect_beside_the_committed_file_and_doctor_names_them(project):
    home = project / "home"
    write(home, ".invoke.yaml", 'gpuenv:\n  python: "3.12"\n  cuda: cpu\n')
    proc = run_gpuenv("doctor", "--json", cwd=project / "team", env={"HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    rows = {row["key"]: row for row in json.loads(proc.stdout)["settings"]["values"]}
    assert rows["python"]["value"] == "3.12" and rows["python"]["source"].endswith(".invoke.yaml")
    assert rows["backend"]["source"] == "default"
    stack = json.loads(
        run_gpuenv("resolve", "--json", cwd=project / "team", env={"HOME": str(home)}).stdout
    )
    assert (stack["cuda"], stack["python"]) == ("cpu", "3.12")


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "gpuenv:\n  fleet:\n    paralel: 4\n",
            "gpuenv: invoke.yaml: unknown key gpuenv.fleet.paralel: did you mean "
            "gpuenv.fleet.parallel?",
        ),
        (
            "gpuenv:\n  fleet:\n    parallel: true\n",
            "gpuenv: invoke.yaml: gpuenv.fleet.parallel True is not a whole number",
        ),
        ("- gpuenv\n", "gpuenv: {path}: the top level is a list, not a mapping"),
        ("just text\n", "gpuenv: {path}: the top level is a text, not a mapping"),
        (
            b"gpuenv:\n  cuda: \xff\xfe\n",
            "gpuenv: {path}: not UTF-8 text (byte 0xff on line 2): save it as UTF-8",
        ),
        ("gpuenv:\n  cuda: [\n", "gpuenv: {path}:3: not valid YAML"),
        ("x" * (1024 * 1024 + 1), "gpuenv: {path}: it is 1,048,577 bytes, over the 1 MiB limit"),
        (
            "gpuenvs:\n  cuda: cpu\n",
            "gpuenv: {path}: unknown section 'gpuenvs': did you mean `gpuenv:`?",
        ),
    ],
    ids=["typo", "bool-count", "list", "string", "not-utf8", "bad-yaml", "too-big", "section-typo"],
)
def test_a_bad_project_file_is_one_line_exit_2(project, text, expected):
    path = write(project / "team", "invoke.yaml", text)
    line = one_line_exit_2(
        run_gpuenv("resolve", cwd=project / "team", env={"HOME": str(project / "home")})
    )
    assert line.startswith(expected.format(path=path)), line


def test_a_mistyped_variable_is_an_error_naming_it(project):
    line = one_line_exit_2(
        run_gpuenv(
            "resolve",
            cwd=project / "team",
            env={"HOME": str(project / "home"), "INVOKE_GPUENV_FLEET_PARALEL": "4"},
        )
    )
    assert line.startswith(
        "gpuenv: INVOKE_GPUENV_FLEET_PARALEL is not a gpuenv setting: did you mean "
        "INVOKE_GPUENV_FLEET_PARALLEL?"
    )


BOMB = "".join(
    [f'a: &a ["{"lol" * 3}","lol","lol","lol","lol","lol","lol","lol","lol"]\n']
    + [f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")]
)


@pytest.mark.parametrize(
    "name, text, expected",
    [
        ("missing.yaml", None, "gpuenv: -f {path}: no such config file"),
        ("folder.yaml", "DIR", "gpuenv: {path}: it is a folder, not a regular file"),
        ("notes.txt", "gpuenv: {}\n", "gpuenv: -f {path}: not a .yaml, .yml or .json file"),
        ("/dev/null", None, "gpuenv: /dev/null: it is a device, not a regular file"),
        ("bad.json", '{"gpuenv": {"cuda": }', "gpuenv: {path}:1: not valid JSON"),
        (
            "deep.json",
            "[" * 100_000 + "]" * 100_000,
            "gpuenv: {path}: nested more than 50 levels deep",
        ),
        (
            "deep.yaml",
            "a: " + "[" * 100_000 + "]" * 100_000,
            "gpuenv: {path}: nested more than 50 levels deep",
        ),
        ("bomb.yaml", BOMB, "gpuenv: {path} uses 72 YAML aliases; at most 64 are allowed"),
    ],
)
def test_a_bad_runtime_file_is_one_line_exit_2(project, name, text, expected):
    path = Path(name) if name.startswith("/") else project / name
    if text == "DIR":
        path.mkdir()
    elif text is not None:
        write(project, name, text)
    started = time.monotonic()
    line = one_line_exit_2(
        run_gpuenv(
            "-f",
            str(path),
            "resolve",
            cwd=project / "team",
            env={"HOME": str(project / "home")},
            timeout=60,
        )
    )
    assert line.startswith(expected.format(path=path)), line
    assert time.monotonic() - started < 30, (
        "a hostile config file must be refused, not worked through"
    )


def test_an_alias_bomb_is_refused_at_once_by_the_loader(tmp_path):
    from gpuenv.cli.configfiles import ConfigFileError, load_file

    assert len(BOMB) < 420
    deep = tmp_path / "deep.yaml"  # few aliases, 2**30 values: the expansion budget stops it
    deep.write_text(
        "a0: &a0 [x, x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 31))
    )
    for path in (write(tmp_path, "bomb.yaml", BOMB), deep):
        started = time.monotonic()
        with pytest.raises(ConfigFileError):
            load_file(str(path))
        assert time.monotonic() - started < HANG_BOUND_S


def test_base_60_is_read_as_the_text_written(project):
    write(project / "team", "invoke.yaml", "gpuenv:\n  fleet:\n    slurm:\n      time: 1:00:00\n")
    proc = run_gpuenv("doctor", "--json", cwd=project / "team", env={"HOME": str(project / "home")})
    rows = {row["key"]: row["value"] for row in json.loads(proc.stdout)["settings"]["values"]}
    assert rows["fleet.slurm.time"] == "1:00:00", (
        "YAML 1.1 would read 1:00:00 as 3600 (60 hours for Slurm)"
    )


def test_yaml_1_1_number_traps_are_read_as_written():
    from gpuenv.cli.configfiles import load_text

    data = load_text("a: 1:00:00\nb: 010\nc: 8\nd: 0.9\ne: 3.10\n", "x.yaml", "yaml")
    assert data == {
        "a": "1:00:00",
        "b": "010",
        "c": 8,
        "d": 0.9,
        "e": 3.1,
    }  # 3.1: refused by the version checks


def test_a_plain_large_config_is_read_quickly(tmp_path):
    """670 KB of real settings (15,000 fleet hosts) is read in well under a second, not 25 s."""
    from gpuenv.cli.configfiles import load_file

    hosts = "".join(f"    - ssh://gpu@node{i:05d}.cluster.example.com:22\n" for i in range(15000))
    path = write(tmp_path, "big.yaml", "gpuenv:\n  fleet:\n    hosts:\n" + hosts)
    assert path.stat().st_size > 670_000
    data = load_file(str(path))
    assert len(data["gpuenv"]["fleet"]["hosts"]) == 15000


# ---------------------------------------------------------------- the team pins its stack

PINS = 'gpuenv:\n  cuda: "12.1"\n  torch: "2.3.1"\n  python: "3.11"\n'


def test_pinned_stack_is_the_same_on_every_driver(project):
    write(project / "team", "invoke.yaml", PINS)
    env = {"HOME": str(project / "home")}
    seen = set()
    for driver in ("535.104.05", "550.54.15", "570.86.10", "580.65.06"):
        proc = run_gpuenv("resolve", "--json", "--driver", driver, cwd=project / "team", env=env)
        assert proc.returncode == 0, proc.stderr
        seen.add(json.loads(proc.stdout)["stack_id"])
    assert seen == {"torch2.3.1-cu121-py3.11"}
    proc = run_gpuenv("resolve", "--driver", "470.57.02", cwd=project / "team", env=env)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith(
        "gpuenv: this host cannot run the pinned stack torch2.3.1-cu121-py3.11: driver "
        "470.57.02 is older than"
    )
    assert "upgrade the driver, or pin another stack" in line
    doctor = run_gpuenv("doctor", cwd=project / "team", env=env).stdout
    assert "pinned (invoke.yaml): every server addresses this stack" in doctor


def test_without_pins_doctor_says_the_stack_floats(project):
    """No pins and no remembered stack (an empty lock folder: no envs/locks/current.json)."""
    locks = project / "no-locks"
    locks.mkdir(exist_ok=True)
    doctor = run_gpuenv(
        "doctor",
        cwd=project / "team",
        env={"HOME": str(project / "home"), "GPUENV_LOCKS_DIR": str(locks)},
    )
    assert doctor.returncode == 0, doctor.stderr
    assert "the stack floats: each host resolves its own" in doctor.stdout


def test_a_variable_over_a_file_value_of_another_type_is_checked_not_a_traceback(project):
    write(
        project / "team",
        "invoke.yaml",
        "gpuenv:\n  fleet:\n    parallel: 4\n    hosts: [ssh://a]\n",
    )
    env = {"HOME": str(project / "home"), "INVOKE_GPUENV_FLEET_PARALLEL": "x"}
    line = one_line_exit_2(run_gpuenv("resolve", cwd=project / "team", env=env))
    assert line.startswith(
        "gpuenv: INVOKE_GPUENV_FLEET_PARALLEL: gpuenv.fleet.parallel 'x' is not a number"
    )
    env = {"HOME": str(project / "home"), "INVOKE_GPUENV_FLEET_HOSTS": "ssh://b,ssh://c"}
    proc = run_gpuenv("doctor", "--json", cwd=project / "team", env=env)
    rows = {row["key"]: row for row in json.loads(proc.stdout)["settings"]["values"]}
    assert (
        rows["fleet.hosts"]["value"] == "ssh://b, ssh://c"
        and rows["fleet.hosts"]["source"] == "INVOKE_GPUENV_FLEET_HOSTS"
    )


def test_the_team_s_pins_reach_every_request_and_only_their_framework():
    from gpuenv.cli.config import Settings, stack_request

    team = Settings(
        cuda="12.1",
        python="3.11",
        torch="2.3.1",
        tensorflow="2.15.1",
        wheelhouse="/w",
        strict_driver=True,
    )
    request = stack_request({}, team)
    assert (request.framework, request.torch, request.tensorflow) == (None, "2.3.1", None)
    assert request.pinned and request.strict_driver and request.wheelhouse == "/w"
    request = stack_request({"framework": "TF"}, team)
    assert (request.framework, request.torch, request.tensorflow) == (
        "tensorflow",
        None,
        "2.15.1",
    ) and request.pinned
    request = stack_request({"tensorflow": "2.16"}, team)
    assert (request.framework, request.torch, request.tensorflow) == ("tensorflow", None, "2.16")
    assert not stack_request({}, Settings(cuda="12.1", torch="2.3.1")).pinned, (
        "no Python pinned: the stack still floats"
    )
