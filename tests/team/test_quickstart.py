"""The README's quickstart, run as written (issue 28): its set-up block, then its main job here,
with no GPU and no registry, in a fresh copy of the checkout, to a ready verdict.

The commands are read from README.md ("## Quickstart": the set-up, the main job here, the GPU
server's line), so when the README changes this test runs the new text. Of the set-up
(scripts/setup.sh) the Docker engine and the venv are this machine's own: the copy's `.venv` is a
link to this test's virtual environment, and GPUENV_SETUP_STEPS runs the set-up's other steps as
written (the local base images, the wheelhouse from the committed lock).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import dockercases
import pytest
from teamcases import ROOT

pytestmark = [
    pytest.mark.docker,
    pytest.mark.network,
]  # the wheelhouse step downloads the lock's wheels


def quickstart_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 3, (
        "the quickstart is three blocks: set-up, the main job here, the GPU server"
    )
    return blocks


def copy_checkout(target: Path) -> Path:
    """The checkout as a fresh clone has it: the committed lock and current.json, no wheelhouse, no
    venv."""
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", ".pytest_cache", "wheelhouse", "gpuenv-fleet", "reports"
    )
    shutil.copytree(ROOT, target, ignore=ignore)
    return target


def test_the_readme_quickstart_runs_as_written_to_a_ready_verdict(tmp_path, docker_engine):
    from gpuenv.engine import Engine

    setup, here, gpu_server = quickstart_blocks()
    assert "scripts/setup.sh" in setup and "invoke build" in here and "--cuda" in gpu_server
    checkout = copy_checkout(tmp_path / "checkout")
    (checkout / ".venv").symlink_to(Path(sys.prefix))
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GPUENV_", "INVOKE_", "UV_", "VIRTUAL_ENV"))
        },
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "PYTHONPATH": str(checkout),
        "HOME": str(home),
        "GPUENV_SETUP_STEPS": "images wheelhouse",
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", setup],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if not any((checkout / "wheelhouse").glob("torch-2.13.0+cpu-*.whl")):
        pytest.skip(
            "the set-up found no torch 2.13.0+cpu wheel (pip's find-links and "
            "download.pytorch.org both out of reach)"
        )

    engine = Engine.local()
    stack_label = {"io.gpuenv.stack": "torch2.13.0-cpu-py3.11"}
    before = {
        image.id for image in engine.find_images(stack_label)
    }  # the engine is shared: remove only what this build made
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", here],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
    )
    out = done.stdout + done.stderr
    try:
        assert done.returncode == 0, out[-4000:]
        assert "Traceback" not in out
        remembered = [line for line in out.splitlines() if "remembered from the last" in line]
        assert len(remembered) == 2, (
            "build and validate each say once which stack they address:\n" + out[-3000:]
        )
        assert all("torch2.13.0-cpu-py3.11" in line for line in remembered)
        assert "no index, and no network during the build" in out
        assert done.stdout.rstrip().endswith(
            "validate: every check passed (or skipped with its reason)"
        ), out[-2000:]
        assert not subprocess.run(
            [
                "git",
                "diff",
                "--quiet",
                "--no-index",
                str(ROOT / "envs/locks/current.json"),
                str(checkout / "envs/locks/current.json"),
            ]
        ).returncode, "the committed current.json is unchanged"

        # reports go to any folder the user names (mounted for them), and the path printed is theirs
        elsewhere = tmp_path / "reports"
        elsewhere.mkdir()
        done = subprocess.run(
            [
                "bash",
                "-c",
                f"invoke validate --quick --json {elsewhere}/v.json --junit {elsewhere}/v.xml",
            ],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=2400,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert (
            f"JSON report: {elsewhere}/v.json" in done.stdout
            and "/gpuenv-reports" not in done.stdout.split("JSON report:")[1]
        )
        assert json.loads((elsewhere / "v.json").read_text())["summary"]["ok"] is True
        assert (elsewhere / "v.xml").stat().st_uid == os.getuid(), "written as the caller"
    finally:
        if not os.environ.get("GPUENV_TEST_KEEP_IMAGES"):
            for image in engine.find_images(stack_label):
                if (
                    image.id not in before
                    # this build's image (tagged by its inputs' hash), and a classic build's install
                    # stage
                ):
                    dockercases.remove_build_cache(image.labels)
                    dockercases.remove_image(engine, image.id)

    # the GPU server's line, planned here (no driver: the stack is not checked against one); nothing
    # is built
    first = gpu_server.strip().split(" && ")[0]
    assert first.startswith("invoke build ")
    done = subprocess.run(
        ["bash", "-c", first.replace("invoke build", "invoke --dry build", 1)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "nothing was built (--dry)" in done.stdout, (
        done.stdout[-2000:] + done.stderr[-2000:]
    )
