"""The conda test channel's tools (a C compiler, pip's wheel): on a machine scripts/setup.sh set up
the tests that need the channel fail when one is missing; elsewhere they skip, naming the tool and
the set-up step that installs it (docs/testing.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from condachannel import build as condachannel

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def no_compiler(tmp_path, monkeypatch):
    """A PATH with no `cc` on it: the machine of a slim runner."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def test_a_missing_compiler_fails_where_the_set_up_installed_it(no_compiler, tmp_path):
    prefix = tmp_path / "venv"
    prefix.mkdir()
    (prefix / condachannel.SETUP_MARKER).write_text("made by scripts/setup.sh\n")
    promised, why = condachannel.tools_problem(prefix)
    assert promised, why
    assert "no C compiler (cc)" in why and "GPUENV_SETUP_STEPS=testtools" in why


def test_a_missing_compiler_skips_elsewhere_naming_the_step(no_compiler, tmp_path):
    promised, why = condachannel.tools_problem(tmp_path)
    assert not promised
    assert "no C compiler (cc)" in why and "step testtools" in why


def test_nothing_is_said_when_the_tools_are_here(tmp_path):
    if condachannel.standin_problem():
        pytest.skip(f"this machine lacks them: {condachannel.standin_problem()}")
    assert condachannel.tools_problem(tmp_path) is None


def test_the_set_up_writes_the_marker_the_tests_read_and_runs_their_check():
    script = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    step = script[script.index("if wants testtools; then") :]
    step = step[: step.index("\nfi\n")]
    assert f".venv/{condachannel.SETUP_MARKER}" in step
    assert "tests/condachannel/build.py --check" in step
    assert re.search(r"STEPS=\$\{GPUENV_SETUP_STEPS:-[^}]*\btesttools\b", script)


def test_a_second_builder_waits_for_the_first_and_takes_its_channel(tmp_path):
    """The test command's two workers may both miss the channel cache: the one that finds the
    build lock held waits, then returns the channel the first one made, building nothing."""
    import fcntl
    import threading

    channel = tmp_path / f"channel-{condachannel.recipes_hash()}"
    got: list[Path] = []
    with open(tmp_path / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first builder, still at work
        waiter = threading.Thread(
            target=lambda: got.append(condachannel.build_channel(tmp_path)), daemon=True
        )
        waiter.start()
        waiter.join(2)
        assert waiter.is_alive() and not got, "the second builder waits while the lock is held"
        (channel / "noarch").mkdir(parents=True)
        (channel / "noarch" / "repodata.json").write_text("{}")  # the first builder's result
    waiter.join(30)
    assert got == [channel]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".build.lock", channel.name], (
        "no second build was started"
    )
