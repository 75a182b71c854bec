"""Issue 21 item 10: options that used to end in a traceback are one line, exit 2, at option-check
time: --base-image by the engine's reference grammar (after --dry said fine), over-long --image,
--prefix and --json names, and a --prefix under /proc."""

from __future__ import annotations

import pytest
from invoke import Config, Context
from invoke.exceptions import Exit
from teamcases import CPU_STACK_ARGS, run_invoke

LONG = "n" * 300


def context(dry: bool = False) -> Context:
    return Context(Config(overrides={"run": {"dry": dry}}))


@pytest.mark.parametrize(
    "base_image, words",
    [
        ("x y", "--base-image 'x y' is not an image reference"),
        ("Ubuntu:22.04", "--base-image 'Ubuntu:22.04' is not an image reference"),
        ("Team/cuda:12", "the repository path must be lower case"),
        ("r.example.com/" + LONG, "the name is 314 characters, the limit is 255"),
        ("nvidia/cuda@sha256:abc", "a digest is sha256: and 64 hex digits"),
    ],
)
@pytest.mark.parametrize("dry", [True, False])
def test_a_bad_base_image_is_one_line_before_dry_or_any_build(
    tmp_path, monkeypatch, base_image, words, dry
):
    from gpuenv.cli.images import build

    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path))
    with pytest.raises(Exit) as err:
        build(context(dry), cuda="cpu", torch="2.13.0", python="3.11", base_image=base_image)
    assert err.value.code == 2 and words in err.value.message and "\n" not in err.value.message
    assert list(tmp_path.iterdir()) == [], "nothing was locked"


def test_good_base_images_pass_the_dry_run(tmp_path):
    for base_image in (
        "local/base:1",
        "nvidia/cuda:12.4.1-base-ubuntu22.04",
        "nvidia/cuda@sha256:" + "0" * 64,
        "registry.local:5000/team/base:V1",
    ):
        proc = run_invoke(
            "--dry",
            "build",
            *CPU_STACK_ARGS,
            "--base-image",
            base_image,
            env={"GPUENV_LOCKS_DIR": str(tmp_path)},
        )
        assert proc.returncode == 0 and f"base image: {base_image}" in proc.stdout, proc.stderr


def test_the_base_image_from_invoke_yaml_is_checked_too(tmp_path, monkeypatch):
    from gpuenv.cli.images import build

    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path))
    config = Config(overrides={"run": {"dry": True}, "gpuenv": {"base_image": "local/Base:1"}})
    with pytest.raises(Exit) as err:
        build(Context(config), cuda="cpu", torch="2.13.0", python="3.11")
    assert (
        err.value.code == 2
        and "'local/Base:1'" in err.value.message
        and "\n" not in err.value.message
    )


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(local=True, json=f"/tmp/{LONG}.json"), "--json /tmp/nnnn"),
        (dict(json=f"{LONG}/r.json"), "is 300 bytes long; a file or folder name is at most 255"),
        (dict(hosts="ssh://127.0.0.1:1", image="x", json=f"/tmp/{LONG}.json"), "is 305 bytes long"),
        (
            dict(hosts="ssh://127.0.0.1:1", image="x", report=f"/tmp/{LONG}.html"),
            "--report /tmp/nnnn",
        ),
        (
            dict(hosts="ssh://127.0.0.1:1", image="r.example.com/" + LONG),
            "the name is 314 characters, the limit is 255",
        ),
        (dict(image="r.example.com/" + LONG), "the name is 314 characters, the limit is 255"),
        (
            dict(slurm=True, prefix="/proc/envs/torch"),
            "--prefix /proc/envs/torch: it is under /proc",
        ),
        (dict(slurm=True, prefix=f"/shared/{LONG}"), "is 300 bytes long"),
        (
            dict(slurm=True, prefix="/shared/envs/torch", rundir="/sys/gpuenv"),
            "--rundir /sys/gpuenv: it is under /sys",
        ),
    ],
)
def test_validate_paths_and_images_that_cannot_be_are_one_line(options, words):
    from gpuenv.cli.validation import validate

    with pytest.raises(Exit) as err:
        validate(context(), **options)
    assert err.value.code == 2 and words in err.value.message, err.value.message
    assert "\n" not in err.value.message and len(err.value.message) < 400


def test_the_suite_itself_refuses_an_over_long_report_name_in_one_line():
    import subprocess
    import sys

    from teamcases import ROOT

    done = subprocess.run(
        [sys.executable, "-m", "validate", "--json", f"/tmp/{LONG}.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        done.stdout.startswith("validate: --json: cannot write /tmp/nnn")
        and "a file or folder name is at most 255" in done.stdout
    )


@pytest.mark.parametrize(
    "task, options, flag",
    [
        ("envs.lock", dict(team_file=f"/tmp/{LONG}.yml"), "--team-file"),
        ("envs.lock", dict(wheelhouse=f"/tmp/{LONG}"), "--wheelhouse"),
        ("envs.lock", dict(file=f"/tmp/{LONG}/environment.yml"), "--file"),
        ("envs.export", dict(output=f"/tmp/{LONG}.yml"), "--output"),
        ("envs.install", dict(prefix="/tmp/gpuenv-env", wheelhouse=f"/tmp/{LONG}"), "--wheelhouse"),
        ("images.build", dict(ca_cert=f"/tmp/{LONG}.pem"), "--ca-cert"),
        ("images.build", dict(wheelhouse=f"/tmp/{LONG}"), "--wheelhouse"),
    ],
)
def test_over_long_path_options_are_one_line_before_any_work(
    tmp_path, monkeypatch, task, options, flag
):
    import importlib

    module, name = task.split(".")
    function = getattr(importlib.import_module(f"gpuenv.cli.{module}"), name)
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path))
    with pytest.raises(Exit) as err:
        function(context(), cuda="cpu", torch="2.13.0", python="3.11", **options)
    assert err.value.code == 2 and err.value.message.startswith(f"gpuenv: {flag} /tmp/nnnn"), (
        err.value.message
    )
    assert (
        "a file or folder name is at most 255" in err.value.message
        and "\n" not in err.value.message
    )
    assert list(tmp_path.iterdir()) == []
