"""Hostile config, third pass (issue 29): each general rule with several cases.

- A key or section given twice in any YAML or JSON layer is one line naming the file and both
  lines (YAML and json keep the last silently: a second `gpuenv:` dropped every pin).
- Config files are read through the one bounded reader: regular files only, UTF-16 with a mark
  read, other encodings named.
- Errors blame where a bad value came from: the file and key, the variable, the option, or the
  capture, never an option nobody typed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hangbound import HANG_BOUND_S
from teamcases import one_line_exit_2, run_gpuenv

from gpuenv.cli.configfiles import ConfigFileError, load_file
from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.request import Request
from gpuenv.errors import BadInput


@pytest.fixture
def project(tmp_path):
    (tmp_path / "team").mkdir()
    (tmp_path / "home").mkdir()
    return tmp_path


# --- repeated keys --------------------------------------------------------------------------

REPEATED = [
    (
        "two-sections.yaml",
        'gpuenv:\n  cuda: "12.1"\n  torch: "2.3.1"\nother: 1\ngpuenv:\n  python: "3.11"\n',
        "'gpuenv' is given again",
        1,
        5,
    ),
    (
        "nested.yaml",
        "gpuenv:\n  fleet:\n    parallel: 2\n    hosts: [a]\n    parallel: 3\n",
        "'parallel' is given again",
        3,
        5,
    ),
    ("flow.yaml", "gpuenv: {cuda: cpu, cuda: '12.1'}\n", "'cuda' is given again", 1, 1),
    ("quoted.yaml", "gpuenv:\n  cuda: cpu\n  'cuda': '12.1'\n", "'cuda' is given again", 2, 3),
    (
        "two-sections.json",
        '{"gpuenv": {"cuda": "12.1"},\n "gpuenv": {}}',
        "'gpuenv' is given again",
        1,
        2,
    ),
    (
        "nested.json",
        '{"gpuenv": {"fleet": {\n"parallel": 2,\n"parallel": 3}}}',
        "'parallel' is given again",
        2,
        3,
    ),
    (
        "same-line.json",
        '{"gpuenv": {"cuda": "cpu", "cuda": "12.1"}}',
        "'cuda' is given again",
        1,
        1,
    ),
]


@pytest.mark.parametrize("name, text, words, first, second", REPEATED, ids=[r[0] for r in REPEATED])
def test_a_repeated_key_names_the_file_and_both_lines(tmp_path, name, text, words, first, second):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigFileError) as caught:
        load_file(str(path))
    line = caught.value.render()
    assert (
        line.startswith(f"{path}:{second}: ")
        and words in line
        and f"(first on line {first})" in line
    ), line
    assert "\n" not in line


# Keys are compared as json decodes them: an escape spells the same key (the review's case, and
# held-out spellings of it at other depths and lines).
DECODED_REPEATS = [
    ("escape.json", '{"gpuenv": {"cuda": "12.1", "cu\\u0064a": "cpu"}}', "cuda", 1, 1),
    ("section.json", '{"gpuenv": {"cuda": "12.1"},\n"gpu\\u0065nv": {}}', "gpuenv", 1, 2),
    (
        "upper-hex.json",
        '{"gpuenv": {"fleet": {\n"\\u0070arallel": 2,\n\n"parallel": 3}}}',
        "parallel",
        2,
        4,
    ),
    ("solidus.json", '{"a/b": 1,\n"a\\/b": 2}', "a/b", 1, 2),
]


@pytest.mark.parametrize(
    "name, text, key, first, second", DECODED_REPEATS, ids=[r[0] for r in DECODED_REPEATS]
)
def test_a_key_spelled_with_escapes_is_the_same_key(tmp_path, name, text, key, first, second):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigFileError) as caught:
        load_file(str(path))
    assert caught.value.render().startswith(
        f"{path}:{second}: {key!r} is given again (first on line {first})"
    ), caught.value.render()


LONG_NUMBERS = [
    ("int.yaml", "gpuenv:\n  fleet:\n    parallel: " + "9" * 5000 + "\n", 3, 5000),
    ("negative.yaml", "gpuenv:\n  x: -" + "1" * 4301 + "\n", 2, 4301),
    ("hex.yaml", "gpuenv:\n  x: 0x" + "f" * 40 + "\n", 2, 40),
    ("float.yaml", "gpuenv:\n\n  x: 1." + "5" * 400 + "\n", 3, 401),
    ("key.yaml", "gpuenv:\n  " + "7" * 31 + ": a\n", 2, 31),
    ("int.json", '{"gpuenv": {"fleet": {"parallel": ' + "9" * 5000 + "}}}", 1, 5000),
    ("second-line.json", '{"gpuenv": {},\n "x": [1, -' + "4" * 31 + "]}", 2, 31),
]


@pytest.mark.parametrize("name, text, line, digits", LONG_NUMBERS, ids=[r[0] for r in LONG_NUMBERS])
def test_a_number_longer_than_any_setting_is_one_line(tmp_path, name, text, line, digits):
    """Python's int() refuses 4,300+ digits with a ValueError (a traceback before): every number
    in a config file is bounded by the reader, with the line it is on."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigFileError) as caught:
        load_file(str(path))
    assert caught.value.render().startswith(
        f"{path}:{line}: a {digits}-digit number; at most 30 digits are read"
    ), caught.value.render()


def test_numbers_up_to_the_bound_are_read(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(
        "gpuenv:\n  a: " + "9" * 30 + "\n  b: 0x" + "f" * 30 + "\n  c: '" + "9" * 5000 + "'\n"
    )
    assert load_file(str(path))["gpuenv"] == {
        "a": int("9" * 30),
        "b": int("f" * 30, 16),
        "c": "9" * 5000,
    }


def test_a_long_number_given_with_f_is_exit_2(project):
    run = project / "run.json"
    run.write_text('{"gpuenv": {"fleet": {"parallel": ' + "9" * 5000 + "}}}")
    line = one_line_exit_2(
        run_gpuenv(
            "-f",
            str(run),
            "doctor",
            cwd=project / "team",
            env={"HOME": str(project / "home")},
            timeout=120,
        )
    )
    assert line.startswith(f"gpuenv: {run}:1: a 5000-digit number; at most 30 digits are read"), (
        line
    )


def test_the_same_key_in_different_mappings_and_merge_keys_are_fine(tmp_path):
    ok = {
        "siblings.yaml": "gpuenv:\n  fleet:\n    slurm: {time: '1:00'}\n  cuda: cpu\n"
        "other:\n  cuda: x\n",
        "merge.yaml": "base: &b {cuda: '12.1'}\ngpuenv:\n  <<: *b\n  cuda: '12.4'\n",
        "lists.json": '{"gpuenv": {"platforms": ["linux-64", "linux-64"]}, "x": [{"a": 1}, '
        '{"a": 2}]}',
        "escaped.json": '{"a\\"b": 1, "a\\\\": 2, "k": "\\"k\\": 3"}',
    }
    for name, text in ok.items():
        path = tmp_path / name
        path.write_text(text)
        assert isinstance(load_file(str(path)), dict), name


def test_a_second_gpuenv_block_is_an_error_in_every_layer(project):
    """The committed project file, ~/.invoke.yaml and -f: each is checked (the issue's case:
    the pins were dropped and doctor said the stack floats)."""
    text = 'gpuenv:\n  cuda: "12.1"\n  python: "3.11"\n  torch: "2.3.1"\n\ngpuenv:\n  backend: uv\n'
    team, home = project / "team", project / "home"
    (team / "invoke.yaml").write_text(text)
    line = one_line_exit_2(run_gpuenv("doctor", cwd=team, env={"HOME": str(home)}, timeout=120))
    assert line.startswith(
        f"gpuenv: {team / 'invoke.yaml'}:6: 'gpuenv' is given again (first on line 1)"
    ), line
    (team / "invoke.yaml").unlink()
    (home / ".invoke.yaml").write_text(text)
    line = one_line_exit_2(run_gpuenv("doctor", cwd=team, env={"HOME": str(home)}, timeout=120))
    assert f"{home / '.invoke.yaml'}:6: 'gpuenv' is given again" in line, line
    (home / ".invoke.yaml").unlink()
    (project / "run.json").write_text('{"gpuenv": {"cuda": "cpu"}, "gpuenv": {"python": "3.11"}}')
    line = one_line_exit_2(
        run_gpuenv(
            "-f",
            str(project / "run.json"),
            "doctor",
            cwd=team,
            env={"HOME": str(home)},
            timeout=120,
        )
    )
    assert f"{project / 'run.json'}:1: 'gpuenv' is given again" in line, line


# --- the one bounded reader ---------------------------------------------------------------


def test_only_small_regular_files_in_a_known_encoding(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    folder = tmp_path / "folder.yaml"
    folder.mkdir()
    nomark = tmp_path / "nomark.yaml"
    nomark.write_bytes("gpuenv:\n  cuda: cpu\n".encode("utf-16-le"))
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("gpuenv:\n  # café\n".encode("latin-1"))
    cases = {
        fifo: "it is a FIFO (named pipe), not a regular file",
        link: "it is a device, not a regular file",
        folder: "it is a folder, not a regular file",
        nomark: "UTF-16 without a byte-order mark: save it as UTF-8",
        latin: "not UTF-8 text (byte 0xe9 on line 2)",
    }
    for path, words in cases.items():
        started = time.monotonic()
        with pytest.raises(ConfigFileError) as caught:
            load_file(str(path))
        assert words in caught.value.render() and str(path) in caught.value.render()
        assert time.monotonic() - started < HANG_BOUND_S
    for codec in (
        "utf-16",
        "utf-8-sig",
    ):  # PowerShell and Notepad write these: read as the same file
        marked = tmp_path / f"{codec}.yaml"
        marked.write_bytes("gpuenv:\n  cuda: cpu\n".encode(codec))
        assert load_file(str(marked)) == {"gpuenv": {"cuda": "cpu"}}


# --- errors blame where the value came from ------------------------------------------------


@pytest.mark.parametrize(
    "where, value, blamed",
    [
        ("file", 'torch: "9.9"', "invoke.yaml: gpuenv.torch 9.9: no PyTorch release 9.9 is known"),
        (
            "file",
            'tensorflow: "1.0"',
            "invoke.yaml: gpuenv.tensorflow 1.0: no TensorFlow release 1.0 is known",
        ),
        (
            "variable",
            "INVOKE_GPUENV_TORCH=9.9",
            "INVOKE_GPUENV_TORCH 9.9: no PyTorch release 9.9 is known",
        ),
        ("option", "--torch=9.9", "--torch 9.9: no PyTorch release 9.9 is known"),
        ("file+option", 'torch: "2.3.1"|--torch=9.9', "--torch 9.9: no PyTorch release"),
    ],
)
def test_an_unknown_release_blames_its_source(project, where, value, blamed):
    team, env, args = project / "team", {"HOME": str(project / "home")}, []
    for part in value.split("|"):
        if part.startswith("--"):
            args.append(part)
        elif "=" in part and part.startswith("INVOKE_"):
            key, _, text = part.partition("=")
            env[key] = text
        else:
            (team / "invoke.yaml").write_text(f"gpuenv:\n  {part}\n")
    line = one_line_exit_2(run_gpuenv("resolve", *args, cwd=team, env=env, timeout=120))
    assert line.startswith(f"gpuenv: {blamed}"), line


def test_a_capture_or_this_host_is_blamed_for_their_gpus():
    for origins, words in (
        (
            (("gpu_archs", "the GPUs of --host x.xml"),),
            "the GPUs of --host x.xml 1.0: compute capability 1.0 is not known",
        ),
        ((), "--gpu-arch 1.0: compute capability 1.0 is not known"),
    ):
        with pytest.raises(BadInput) as caught:
            resolve_stack(Request(driver="550.54.15", gpu_archs=("1.0",), origins=origins))
        assert caught.value.render().startswith(words), caught.value.render()


def test_request_for_host_records_the_capture_as_the_origin_of_gpu_archs():
    from gpuenv.compat.host import HostSource, request_for_host

    capture = (
        Path(__file__).resolve().parents[1]
        / "validate"
        / "captures"
        / "nvidia-smi-xml"
        / "a100-sxm4-40gb-570.148.08.xml"
    )
    server = HostSource(str(capture))
    request = request_for_host(host=server, origins={"torch": "invoke.yaml: gpuenv.torch"})
    assert request.blame("gpu_archs") == f"the GPUs of --host {capture}"
    assert (
        request.blame("torch") == "invoke.yaml: gpuenv.torch"
        and request.blame("python") == "--python"
    )
    assert request_for_host(host=server, gpu_arch="8.0").blame("gpu_archs") == "--gpu-arch"


# --- a conflict between settings names their file and key, and fixes them there --------------

FILE = "invoke.yaml"


def _from_file(**values: str) -> Request:
    """A request whose values all came from the project's invoke.yaml, as gpuenv.cli.config makes
    it."""
    return Request(
        driver="570.148.08",
        origins=tuple(sorted((k, f"{FILE}: gpuenv.{k}") for k in values)),
        **values,
    )


def _refusal(request: Request) -> str | None:
    try:
        resolve_stack(request)
    except BadInput as err:
        return err.render()
    except Exception as err:  # NoCompatibleStack and the other GpuenvErrors
        return getattr(err, "render", lambda: None)() or f"{type(err).__name__}: {err}"
    return None


# The review's three and held-out combinations: each value from invoke.yaml.
COMBINATIONS = [
    {"torch": t, "python": p, "cuda": c}
    for t in ("2.0", "2.3.1", "2.15", "2.7.1")
    for p in ("2.7", "3.8", "3.14", "3.15")
    for c in ("11.8", "12.1", "13.2", "cpu")
]


def test_every_refusal_of_values_from_a_file_names_them_and_fixes_them_there():
    """Before: `torch: "2.0"` with `python: "3.14"` gave "use --python 3.11 ... or drop --torch",
    options nobody typed. Over 64 combinations: every refusal names each file value's origin, and
    no fix drops an option that was not given."""
    refused = 0
    for values in COMBINATIONS:
        line = _refusal(_from_file(**values))
        if line is None:
            continue
        refused += 1
        for key, value in values.items():
            assert f"drop --{key}" not in line, (values, line)
            assert f"{FILE}: gpuenv.{key}" in line, (values, line)
        assert "\n" not in line
    assert refused >= 20, "the combinations hold enough conflicts to mean something"


@pytest.mark.parametrize(
    "values, words",
    [
        (
            {"torch": "2.0", "python": "3.14"},
            ['set gpuenv.python: "3.11" in invoke.yaml', "remove gpuenv.torch from invoke.yaml"],
        ),
        (
            {"python": "2.7"},
            ["python 2.7 from invoke.yaml: gpuenv.python", 'set gpuenv.python: "3.'],
        ),
        (
            {"torch": "2.15", "cuda": "11.8"},
            ["cuda 11.8 from invoke.yaml: gpuenv.cuda", 'set gpuenv.torch: "2.'],
        ),  # driver 570: no CUDA 13
    ],
)
def test_the_reviews_conflicts_are_fixed_in_the_file(values, words):
    line = _refusal(_from_file(**values))
    assert line is not None and all(w in line for w in words), line
    assert "--python" not in line and "--torch" not in line and "--cuda 1" not in line, line


def test_a_typed_option_and_a_file_value_are_each_fixed_where_they_are():
    """--python typed, torch from the file: the fix names the option for one and the file for the
    other."""
    request = Request(
        driver="570.148.08",
        torch="2.0",
        python="3.14",
        origins=(("torch", f"{FILE}: gpuenv.torch"),),
    )
    line = _refusal(request)
    assert (
        "use --python 3.11" in line
        and "remove gpuenv.torch from invoke.yaml" in line
        and "drop --torch" not in line
    ), line
    variable = Request(
        driver="570.148.08",
        torch="2.0",
        python="3.14",
        origins=(("python", "INVOKE_GPUENV_PYTHON"), ("torch", "INVOKE_GPUENV_TORCH")),
    )
    line = _refusal(variable)
    assert (
        "set INVOKE_GPUENV_PYTHON=3.11" in line
        and "unset INVOKE_GPUENV_TORCH" in line
        and "--" not in line.split(": ", 1)[1].split("(gives")[0]
    ), line


def test_a_conflict_in_invoke_yaml_end_to_end(project):
    team = project / "team"
    (team / "invoke.yaml").write_text('gpuenv:\n  torch: "2.0"\n  python: "3.14"\n')
    proc = run_gpuenv(
        "resolve",
        "--driver",
        "570.148.08",
        cwd=team,
        env={"HOME": str(project / "home")},
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    line = proc.stderr.strip()
    assert (
        "\n" not in line
        and "torch 2.0 from invoke.yaml: gpuenv.torch" in line
        and "remove gpuenv.torch from invoke.yaml" in line
    ), line
    assert "drop --torch" not in line and "use --python" not in line, line
