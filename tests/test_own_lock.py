"""gpuenv's own lock (requirements/dev.lock.txt): the venv the tests run in is exactly the lock, the
lock covers pyproject.toml's ranges, a tampered hash stops the set-up's install step with one
line, and the relock's table names a test for every direct dependency."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "dev.lock.txt"


def load_script(name: str):
    """A module of scripts/ (not a package), as `python scripts/NAME.py` sees its neighbours."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "scripts"))


install_lock = load_script("install_lock")
relock_own = load_script("relock_own")


def installed() -> dict[str, str]:
    """Every distribution of the running interpreter, by normalized name."""
    return {
        install_lock.normalize(d.metadata["Name"]): d.version
        for d in importlib.metadata.distributions()
    }


def test_the_running_venv_is_exactly_the_lock():
    """What a fresh clone's set-up installs, checked where the tests run (CI runs them in that
    .venv): every pin at its version, and nothing the lock does not list beside pip and gpuenv."""
    locked = install_lock.pins(LOCK.read_text())
    have = installed()
    wrong = {
        n: f"{have.get(n, 'not installed')} (lock: {v})"
        for n, v in locked.items()
        if have.get(n) != v
    }
    extra = sorted(set(have) - set(locked) - install_lock.KEPT)
    fix = "GPUENV_SETUP_STEPS=venv bash scripts/setup.sh"
    assert not wrong, f"installed versions differ from {LOCK.name}: {wrong}; {fix}"
    assert not extra, f"installed but not in {LOCK.name}: {extra}; {fix}"
    assert len(locked) > 100 and "torch" in locked and "tensorflow-cpu" in locked


def test_the_lock_pins_every_input_inside_its_range():
    """Each requirement of pyproject.toml (with its dev extras) and requirements/dev.in is pinned,
    and the pin is inside the declared range: an input added or narrowed without a relock fails."""
    locked = install_lock.pins(LOCK.read_text())
    direct = relock_own.direct_dependencies()
    assert {"pyyaml", "py-rattler", "docker", "torch", "pytest"} <= set(direct)
    outside = {}
    for name, line in direct.items():
        requirement = Requirement(line)
        if name not in locked or not requirement.specifier.contains(
            Version(locked[name]), prereleases=True
        ):
            outside[name] = f"{line!r}, lock: {locked.get(name, 'missing')}"
    assert not outside, f"relock (python scripts/relock_own.py --keep): {outside}"


def test_every_pin_has_hashes_and_the_torch_cpu_file_is_the_one_pytorch_serves():
    text = LOCK.read_text()
    hashes = r"((?: \\\n\s+--hash=sha256:[0-9a-f]{64})*)"
    entries = re.findall(r"^(\S+==\S+)" + hashes, text, re.MULTILINE)
    assert entries and all(hashes for _, hashes in entries), [pin for pin, h in entries if not h]
    # the wheel of https://download.pytorch.org/whl/cpu, cp311 manylinux_2_28_x86_64 (also the
    # quickstart lock's): pip's find-links or the index, the same bytes
    assert re.search(
        r"^torch==2\.13\.0\+cpu \\\n\s+--hash=sha256:6746dbcbeb526eb61330b76b41ff1b4e"
        r"b848951103a892eeb080dfa2b264667b\n",
        text,
        re.MULTILINE,
    )


def small_entry(name: str = "six") -> str:
    """The lock's own entry for a small pure-Python wheel, with the lock's target line."""
    text = LOCK.read_text()
    target = re.search(r"^# target: .*$", text, re.MULTILINE).group(0)
    entry = re.search(rf"^{name}==.*?(?=^\S)", text, re.MULTILINE | re.DOTALL).group(0)
    return f"{target}\n{entry}"


def run_install(lock: Path, target: Path) -> subprocess.CompletedProcess[str]:
    """The set-up's install step, into a throwaway folder (no venv is touched)."""
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "install_lock.py"),
            "--python",
            sys.executable,
            "--lock",
            str(lock),
            "--target",
            str(target),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.network
def test_a_tampered_hash_stops_the_install_with_one_line(tmp_path):
    """pip checks every file against the lock; the set-up says which package, both hashes and the
    fix in one line, and stops (non-zero)."""
    good = tmp_path / "good.lock.txt"
    good.write_text(small_entry())
    untampered = run_install(good, tmp_path / "good")
    if untampered.returncode != 0:
        pytest.skip(
            f"no index serves six here, so no hash can be checked: {untampered.stderr.strip()}"
        )
    assert (tmp_path / "good" / "six.py").is_file()

    bad = tmp_path / "bad.lock.txt"
    bad.write_text(re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, small_entry()))
    done = run_install(bad, tmp_path / "bad")
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("install_lock: six==1.17.0: the file pip downloaded (")
    assert f"but {bad} expects {'0' * 64}" in lines[0] and "relock_own.py" in lines[0]
    assert not (tmp_path / "bad" / "six.py").exists()


def test_an_interpreter_the_lock_is_not_for_is_refused_in_one_line(tmp_path):
    lock = tmp_path / "other.lock.txt"
    lock.write_text(small_entry().replace("CPython 3.11,", "CPython 3.9,"))
    done = run_install(lock, tmp_path / "t")
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, lines
    assert f"{lock} is for CPython 3.9 on x86_64 Linux" in lines[0]
    assert f"{sys.executable} is cpython 3.{sys.version_info[1]}" in lines[0]


def test_every_direct_dependency_has_tests_the_relock_runs():
    direct = relock_own.direct_dependencies()
    assert sorted(set(direct) - set(relock_own.TESTS)) == []
    assert sorted(set(relock_own.TESTS) - set(direct)) == []
    missing = [p for paths in relock_own.TESTS.values() for p in paths if not (ROOT / p).exists()]
    assert missing == []


def test_a_moved_transitive_pin_runs_the_tests_of_who_pulls_it_in():
    """From uv's `# via` lines: numpy comes with matplotlib and TensorFlow (through contourpy, h5py,
    keras, ml-dtypes too), six with TensorFlow only; a direct dependency is its own owner, and
    also runs the tests of the direct dependencies that need it (conda-lock reads YAML)."""
    via = relock_own.parents(LOCK.read_text())
    direct = set(relock_own.direct_dependencies())
    assert relock_own.owners("numpy", via, direct) == {"matplotlib", "tensorflow-cpu"}
    assert relock_own.owners("six", via, direct) == {"tensorflow-cpu"}
    assert relock_own.owners("pyyaml", via, direct) == {"pyyaml", "conda-lock"}
    moved = relock_own.changes({"a": "1", "b": "2"}, {"b": "3", "c": "1"})
    assert [str(c) for c in moved] == ["a 1 -> (removed)", "b 2 -> 3", "c (new) -> 1"]


def test_a_relock_says_which_tests_broke_by_name(tmp_path):
    """What the relock prints per changed dependency: pytest's last line, then each FAILED or
    ERROR line, so a bump's breakage is named, not only counted."""
    case = tmp_path / "test_case.py"
    case.write_text("def test_good():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2\n")
    passed, summary = relock_own.run_tests(sys.executable, [str(case)])
    last, *broken = summary.splitlines()
    assert not passed and "1 failed, 1 passed" in last, summary
    assert len(broken) == 1 and broken[0].lstrip().startswith("FAILED "), summary
    assert "test_case.py::test_bad" in broken[0], summary
    case.write_text("def test_good():\n    pass\n")
    assert relock_own.run_tests(sys.executable, [str(case)])[0] is True
