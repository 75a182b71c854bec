"""The README's air-gapped recipe, run exactly as written (issue 19 item 1).

The commands are read from docs/team.md ("Air-gapped servers", linked from the README): the first
block runs where PyPI answers, in a fresh copy of the checkout; the second runs inside a network
namespace with no network at all (`unshare -n`) and an empty uv cache, as on a server behind an air
gap. If the page changes, this test runs the new text.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from teamcases import ROOT, WHEELHOUSE

pytestmark = pytest.mark.network


def recipe_blocks() -> list[str]:
    text = (ROOT / "docs" / "team.md").read_text()
    section = text.split("### Air-gapped servers", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, "the recipe is two blocks: where the network is, then the server"
    return blocks


def no_network_available() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare binary (util-linux)"
    done = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"unshare -n is not allowed here: {done.stderr.strip()}"
    return None


def copy_checkout(target: Path) -> Path:
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", ".pytest_cache", "locks", "wheelhouse", "gpuenv-fleet"
    )
    shutil.copytree(ROOT, target, ignore=ignore)
    return target


def test_the_air_gapped_recipe_as_written(tmp_path):
    why = no_network_available()
    if why:
        pytest.skip(why)
    if not any(WHEELHOUSE.glob("torch-2.13.0+cpu-*.whl")):
        pytest.skip(f"no torch-2.13.0+cpu wheel in {WHEELHOUSE} (the recipe's framework wheel)")
    if shutil.which("python3.11") is None:
        pytest.skip(
            "no python3.11 on PATH (the recipe's pip download and the server's venv use it)"
        )
    online, offline = recipe_blocks()
    checkout = copy_checkout(tmp_path / "checkout")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPUENV_", "INVOKE_", "UV_"))},
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # `invoke` of this venv
        "PYTHONPATH": str(checkout),
        "HOME": str(home),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", online],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any((checkout / "wheelhouse").glob("torch-*.whl"))
    # the server: no network but its own loopback (a new namespace starts with lo down; an
    # air-gapped server has it up, and the suite's multi-process checks talk over it), an empty uv
    # cache
    cache = tmp_path / "empty-uv-cache"
    cache.mkdir()
    done = subprocess.run(
        ["unshare", "-n", "bash", "-euo", "pipefail", "-c", "ip link set lo up\n" + offline],
        cwd=checkout,
        env={**env, "UV_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "Traceback" not in out
    assert "installed torch2.13.0-cpu-py3.11 into" in out
    assert "validate: every check passed" in out, out[-2000:]
