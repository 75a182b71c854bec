"""The bytecode of a conda environment is compiled once per file between a host install and the
image's environment (gpuenv/envs/condalock.py: compile_bytecode): each .pyc names its source
relative to the prefix, so it depends only on the source, its place in the prefix and the Python,
and gpuenv's bytecode cache keeps it by those. Real compiles by this test's Python, in prefixes
whose bin/python is it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from gpuenv.envs import condalock
from gpuenv.errors import ToolError

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


#: Enough sources that most of them go to the pool of workers (eight at a time), the last few
#: compiled by the bytecode step's main process.
MANY = {
    **SOURCES,
    **{f"many/m{i}.py": f"N = {i}\n\n\ndef f(x):\n    return x * N + {i}\n" for i in range(20)},
}


def _many(root: Path) -> Path:
    site = _prefix(root)
    for rel, text in MANY.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    (site / "pkg" / "mod.py").chmod(0o600)  # the .pyc takes its source's mode, as py_compile's
    return site


def test_each_pyc_is_the_one_py_compile_writes_for_its_path_in_the_prefix(tmp_path):
    """The bytecode step compiles itself (one read of each source, in its workers or its main
    process): each .pyc and cache entry is still byte for byte, and mode for mode, what
    py_compile writes (as `compileall.compile_file(stripdir=prefix)` calls it), whether compiled
    or from the cache."""
    import py_compile

    site = _many(tmp_path / "host" / "env")
    cache = tmp_path / "bytecode"
    assert f"0 .pyc files from the bytecode cache, {len(MANY)} compiled" in _compile(
        site.parents[2], cache
    )
    again = _many(tmp_path / "stage" / "env")
    assert f"{len(MANY)} .pyc files from the bytecode cache, 0 compiled" in _compile(
        again.parents[2], cache
    )
    for rel in MANY:
        expected = tmp_path / "expected" / f"{rel}c"
        py_compile.compile(
            str(site / rel),
            cfile=str(expected),
            dfile=f"lib/python3.11/site-packages/{rel}",
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
        for made in (site, again):
            pyc = Path(importlib.util.cache_from_source(str(made / rel)))
            assert pyc.read_bytes() == expected.read_bytes(), rel
            assert pyc.stat().st_mode == expected.stat().st_mode, rel
    entries = sorted(p.read_bytes()[:-32] for p in cache.rglob("*.pyc"))
    assert entries == sorted(
        Path(importlib.util.cache_from_source(str(site / rel))).read_bytes() for rel in MANY
    )


def test_a_source_that_does_not_compile_is_named_and_the_others_are_compiled(tmp_path):
    site = _prefix(tmp_path / "env")
    (site / "broken.py").write_text("def broken(:\n")
    with pytest.raises(ToolError) as caught:
        _compile(site.parents[2], tmp_path / "bytecode")
    assert "broken.py" in caught.value.message, caught.value.message
    assert len(_pycs(site)) == 3


def test_a_pyc_path_that_is_a_link_is_refused_never_written_through(tmp_path):
    """As py_compile refuses it: a package shipping __pycache__/x.pyc as a link to a file
    elsewhere must not get that file overwritten, whether the .pyc is compiled or comes from the
    cache."""
    cache = tmp_path / "bytecode"
    _compile(_prefix(tmp_path / "host" / "env").parents[2], cache)
    for name, use in (("fresh", tmp_path / "empty"), ("cached", cache)):
        site = _prefix(tmp_path / name / "env")
        outside = tmp_path / f"outside-{name}"
        outside.write_bytes(b"keep me")
        pyc = Path(importlib.util.cache_from_source(str(site / "boom.py")))
        pyc.parent.mkdir()
        pyc.symlink_to(outside)
        with pytest.raises(ToolError) as caught:
            _compile(site.parents[2], use)
        assert "boom.py" in caught.value.message, caught.value.message
        assert outside.read_bytes() == b"keep me", name
