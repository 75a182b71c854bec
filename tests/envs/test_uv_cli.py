"""The conda-lock and uv command lines (pure) and the one-line reading of their failures (recorded
output)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from lockcases import FIXTURES

from gpuenv.envs import uv
from gpuenv.errors import BadInput

OUTPUTS = FIXTURES / "tool-output"


def option(cmd: list[str], name: str) -> list[str]:
    return [cmd[i + 1] for i, part in enumerate(cmd) if part == name]


def test_uv_command_targets_the_stack_python_and_platform_not_this_host():
    cmd = uv.uv_compile_command(
        uv="uv",
        requirements=Path("req.in"),
        output=Path("out.txt"),
        python="3.10",
        python_platform="aarch64-manylinux_2_35",
        extra_index_urls=["https://download.pytorch.org/whl/cu121"],
        find_links=Path("/srv/wheels"),
    )
    assert cmd[:4] == ["uv", "pip", "compile", "req.in"]
    assert option(cmd, "--python-version") == ["3.10"]
    assert option(cmd, "--python-platform") == ["aarch64-manylinux_2_35"]
    assert option(cmd, "--extra-index-url") == ["https://download.pytorch.org/whl/cu121"]
    assert option(cmd, "--find-links") == ["/srv/wheels"]
    assert "--generate-hashes" in cmd and "--no-config" in cmd


def test_uv_command_without_wheelhouse_or_index():
    cmd = uv.uv_compile_command(
        uv="uv",
        requirements=Path("r"),
        output=Path("o"),
        python="3.11",
        python_platform="x86_64-manylinux_2_28",
    )
    assert "--find-links" not in cmd and "--extra-index-url" not in cmd


@pytest.mark.parametrize(
    "platform, glibc, expected",
    [
        ("linux-64", "2.35", "x86_64-manylinux_2_35"),
        ("linux-aarch64", "2.28", "aarch64-manylinux_2_28"),
    ],
)
def test_uv_python_platform(platform, glibc, expected):
    assert uv.uv_python_platform(platform, glibc) == expected


def test_uv_python_platform_refuses_unknown():
    with pytest.raises(BadInput, match="osx-arm64"):
        uv.uv_python_platform("osx-arm64", "2.28")


def test_unreachable_index_is_found_in_uv_output():
    text = (OUTPUTS / "uv-unreachable.txt").read_text()
    assert uv.unreachable_url(text) == "https://download.pytorch.org/whl/cpu/torch/"
    assert uv.unreachable_url((OUTPUTS / "uv-no-solution.txt").read_text()) is None


def test_uv_resolution_failure_in_one_line():
    line = uv.summarize_tool_output((OUTPUTS / "uv-no-solution.txt").read_text())
    assert "\n" not in line
    assert line.startswith(
        "No solution found when resolving dependencies; Because there is no version of numpy==0.0.1"
    )


def test_a_long_disk_full_line_keeps_the_root_cause_whole():
    """uv's disk-full output (recorded on a 1 MiB tmpfs) names two long paths before the reason:
    the one line cuts the front, never "No space left on device"."""
    line = uv.summarize_tool_output((OUTPUTS / "uv-disk-full.txt").read_text())
    assert "\n" not in line and len(line) <= 400
    assert line.startswith("Failed to install: filelock-4.2.12")
    assert line.endswith("No space left on device (os error 28)")


@pytest.mark.parametrize("columns", ["60", "200"])
def test_a_cause_uv_wraps_to_the_terminal_is_read_whole(tmp_path, columns):
    """uv wraps a long cause line to COLUMNS (a CI runner or a pytest worker may set it): the
    wrapped part belongs to the cause, so the DNS failure of a download with no network is read
    whole, "... Temporary failure in name resolution", however wide the terminal says it is."""
    if shutil.which("unshare") is None:
        pytest.fail("no unshare (util-linux) to run uv with no network", pytrace=False)
    env = {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1", "COLUMNS": columns}
    done = subprocess.run(
        ["unshare", "-n", uv.uv_binary(), "python", "install", "3.11.18"]
        + ["--install-dir", str(tmp_path / "python")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0, done.stdout
    causes = uv.uv_causes(done.stderr)
    assert causes[-1] == (
        "failed to lookup address information: Temporary failure in name resolution"
    ), done.stderr


@pytest.mark.parametrize(
    "program, fix",
    [("/nowhere/uv", "pip install uv"), ("/nowhere/env/bin/python", "check that /nowhere/env")],
)
def test_a_missing_program_is_worded_one_way_whoever_starts_it(tmp_path, program, fix):
    from gpuenv.errors import ToolError

    with pytest.raises(ToolError) as installing:
        uv.run_installer([program, "--version"], on_line=lambda _l: None, tool="the installer")
    assert installing.value.message == f"the installer cannot run: {program} not found"
    assert installing.value.fix.startswith(fix)
    if program.endswith("uv"):  # a lock's uv runs through the other runner: the same words
        with pytest.raises(ToolError) as locking:
            uv.run_uv_compile([program, "pip", "compile"], cwd=tmp_path)
        assert locking.value.message == f"uv cannot run: {program} not found"
        assert locking.value.fix == installing.value.fix
