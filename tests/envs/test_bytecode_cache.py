"""The bytecode of a conda environment is compiled once per file between a host install and the
image's environment (gpuenv/envs/condalock.py: compile_bytecode): each .pyc names its source
relative to the prefix, so it depends only on the source, its place in the prefix and the Python,
and gpuenv's bytecode cache keeps it by those. Real compiles by this test's Python, in prefixes
whose bin/python is it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuenv.envs import condalock

SOURCES = {
    "boom.py": "def go():\n    raise RuntimeError('boom')\n",
    "pkg/__init__.py": "VALUE = 41 + 1\n",
    "pkg/mod.py": "from pkg import VALUE\n\n\ndef twice():\n    return VALUE * 2\n",
}
TAG = sys.implementation.cache_tag


def _prefix(root: Path) -> Path:
    site = root / "lib" / "python3.11" / "site-packages"
    for rel, text in SOURCES.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (root / "bin").mkdir()
    (root / "bin" / "python").symlink_to(sys.executable)
    return site


def _compile(root: Path, cache: Path) -> str:
    said: list[str] = []
    condalock.compile_bytecode(root, said.append, cache=cache)
    return "".join(said)


def _pycs(site: Path) -> dict[str, bytes]:
    return {p.relative_to(site).as_posix(): p.read_bytes() for p in site.rglob("*.pyc")}


def test_the_second_prefix_takes_every_pyc_from_the_cache_and_both_hold_the_same_bytes(tmp_path):
    first, second = _prefix(tmp_path / "host" / "env"), _prefix(tmp_path / "stage" / "env")
    cache = tmp_path / "bytecode"
    assert "0 .pyc files from the bytecode cache, 3 compiled" in _compile(first.parents[2], cache)
    assert "3 .pyc files from the bytecode cache, 0 compiled" in _compile(second.parents[2], cache)
    assert len(_pycs(first)) == 3 and _pycs(first) == _pycs(second)
    # compiled afresh elsewhere (an empty cache): the same bytes, so a cold image build's
    # environment layer does not depend on where or whether the host installed the lock
    third = _prefix(tmp_path / "other" / "place")
    assert "3 compiled" in _compile(third.parents[2], tmp_path / "empty")
    assert _pycs(third) == _pycs(first)


def test_the_cached_bytecode_is_used_and_a_traceback_names_the_real_path(tmp_path):
    _compile(_prefix(tmp_path / "host" / "env").parents[2], tmp_path / "bytecode")
    site = _prefix(tmp_path / "stage" / "env")
    _compile(site.parents[2], tmp_path / "bytecode")
    done = subprocess.run(
        [sys.executable, "-v", "-c", "import pkg.mod, boom; print(pkg.mod.twice()); boom.go()"],
        env={"PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout == "84\n"
    for rel in ("boom", "pkg/__init__", "pkg/mod"):  # -v: loaded from the cached .pyc
        pyc = Path(site / rel).parent / "__pycache__"
        assert f"code object from '{pyc}/" in done.stderr, done.stderr[-2000:]
    assert f'File "{site / "boom.py"}", line 2, in go' in done.stderr


def test_a_cache_entry_cut_short_is_compiled_again_never_used(tmp_path):
    cache = tmp_path / "bytecode"
    _compile(_prefix(tmp_path / "host" / "env").parents[2], cache)
    entries = sorted(cache.rglob("*.pyc"))
    assert len(entries) == 3
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:20])
    site = _prefix(tmp_path / "stage" / "env")
    assert "0 .pyc files from the bytecode cache, 3 compiled" in _compile(site.parents[2], cache)
    done = subprocess.run(
        [sys.executable, "-c", "import pkg.mod; print(pkg.mod.twice())"],
        env={"PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout == "84\n", done.stderr
    assert all(len(entry.read_bytes()) > 20 for entry in entries), "the cache was mended"


def test_a_cache_entry_changed_in_place_is_compiled_again_never_used(tmp_path):
    cache = tmp_path / "bytecode"
    first = _prefix(tmp_path / "host" / "env")
    _compile(first.parents[2], cache)
    for entry in sorted(cache.rglob("*.pyc")):  # the same length, one byte of the code changed
        data = bytearray(entry.read_bytes())
        data[20] ^= 0xFF
        entry.write_bytes(bytes(data))
    site = _prefix(tmp_path / "stage" / "env")
    assert "0 .pyc files from the bytecode cache, 3 compiled" in _compile(site.parents[2], cache)
    assert _pycs(site) == _pycs(first)


def test_an_unwritable_cache_is_no_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    site = _prefix(tmp_path / "env")
    assert "3 compiled" in _compile(site.parents[2], blocker / "bytecode")
    assert len(_pycs(site)) == 3


def test_pip_the_installer_is_left_uncompiled_and_still_runs_from_its_sources(tmp_path):
    site = _prefix(tmp_path / "env")
    (site / "pip").mkdir()
    (site / "pip" / "__init__.py").write_text("VERSION = '23.2.1'\n")
    (site / "pip" / "__main__.py").write_text("from pip import VERSION\n\nprint(VERSION)\n")
    (site / "pkg" / "pip").mkdir()  # only the top-level pip is the installer
    (site / "pkg" / "pip" / "__init__.py").write_text("INNER = True\n")
    assert "0 .pyc files from the bytecode cache, 4 compiled" in _compile(
        site.parents[2], tmp_path / "bytecode"
    )
    assert sorted(_pycs(site)) == [
        f"__pycache__/boom.{TAG}.pyc",
        f"pkg/__pycache__/__init__.{TAG}.pyc",
        f"pkg/__pycache__/mod.{TAG}.pyc",
        f"pkg/pip/__pycache__/__init__.{TAG}.pyc",
    ]
    done = subprocess.run(
        [sys.executable, "-B", "-m", "pip"],
        env={"PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stdout == "23.2.1\n", done.stderr
