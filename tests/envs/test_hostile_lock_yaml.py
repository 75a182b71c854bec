"""A conda-lock.yml is YAML from the team's repository: read without expanding aliases past a
bound and without the loader's recursion reaching its limit, and a package listed twice (a bad
merge) named in one line (docs/hostile-input.md). Both readers: lockdir's (verify, wheelhouse)
and the install's (condalock.read_lock, which hands the same text to conda-lock)."""

from __future__ import annotations

import pytest

from gpuenv.envs import condalock, lockdir
from gpuenv.errors import DataError

HASH = "0123456789abcdef" * 4
MD5 = "0123456789abcdef" * 2


def _entry(name: str, version: str) -> str:
    return (
        f"- name: {name}\n  version: {version}\n  manager: conda\n  platform: linux-64\n  "
        "dependencies: {}\n  url: "
        f"https://conda.anaconda.org/conda-forge/linux-64/{name}-{version}-h_0.conda\n  hash: "
        f"{{md5: {MD5}, sha256: {HASH}}}\n  category: main\n  optional: false\n"
    )


def _lock(*entries: str, extra: str = "") -> str:
    return (
        "version: 1\nmetadata:\n  content_hash: {linux-64: abc}\n  channels: [{url: "
        "conda-forge, used_env_vars: []}]\n  platforms: [linux-64]\n  sources: "
        "[environment.yml]\n" + extra + "package:\n" + "".join(entries)
    )


def _bomb(levels: int = 9) -> str:
    """The classic 'billion laughs': 400 bytes, 10**levels values once expanded."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "bomb:\n" + "".join(f"  {line}\n" for line in lines)


CASES = {
    "alias-bomb": (
        _lock(_entry("python", "3.11.0"), extra=_bomb()),
        "expands to more than 1,000,000 values (YAML aliases followed)",
    ),
    "deep": (
        _lock(_entry("python", "3.11.0"), extra="deep: " + "[" * 50_000 + "]" * 50_000 + "\n"),
        "nested more than 32 levels deep",
    ),
    "deep-block": (
        _lock(
            _entry("python", "3.11.0"), extra="".join("  " * i + f"k{i}:\n" for i in range(1, 2000))
        ),
        "nested more than 32 levels deep",
    ),
    "listed-twice": (
        _lock(_entry("python", "3.11.0"), _entry("python", "3.11.1")),
        "conda package python is listed twice for linux-64",
    ),
    "listed-twice-same": (
        _lock(_entry("python", "3.11.0"), _entry("python", "3.11.0")),
        "conda package python is listed twice for linux-64",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("reader", ["lockdir", "install"])
def test_a_hostile_conda_lock_is_one_line_naming_it(tmp_path, case, reader):
    text, words = CASES[case]
    path = tmp_path / "conda-lock.yml"
    path.write_text(text)
    with pytest.raises(DataError) as caught:
        if reader == "lockdir":
            lockdir.read_conda_lock(path)
        else:
            condalock.read_lock(path, "linux-64")
    line = caught.value.render()
    assert line.startswith(f"{path}: {words}") and "\n" not in line, line


def test_the_bounds_leave_a_real_lock_and_its_aliases_alone(tmp_path):
    """A few aliases that expand to little are YAML as any dumper may write it: read."""
    path = tmp_path / "conda-lock.yml"
    first = _entry("python", "3.11.0").replace("  hash: {", "  hash: &h {")
    second = _entry("pip", "24.0.1").replace(
        f"  hash: {{md5: {MD5}, sha256: {HASH}}}", "  hash: *h"
    )
    path.write_text(_lock(first, second))
    assert "*h" in path.read_text()
    assert [p.name for p in lockdir.read_conda_lock(path)] == ["python", "pip"]
    assert sorted(p.name for p in condalock.read_lock(path, "linux-64").conda) == ["pip", "python"]


def test_the_shape_check_counts_aliases_as_expanded():
    assert lockdir.yaml_shape_problem(_bomb(levels=5), max_values=10**6) is None
    assert (
        lockdir.yaml_shape_problem(_bomb(levels=7), max_values=10**6)
        == "expands to more than 1,000,000 values (YAML aliases followed)"
    )
