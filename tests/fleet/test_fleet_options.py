"""Every fleet option and output is checked before any host, job or engine is touched (issue 21,
item 3): each mistake is one line naming the value, exit 2. The hosts here do not exist; a check
that came too late would try to reach them and fail differently (or hang)."""

from __future__ import annotations

import re
import time

import pytest
from hangbound import HANG_BOUND_S
from invoke import Config, Context
from invoke.exceptions import Exit

from gpuenv.cli.fleet import time_limit_seconds
from gpuenv.cli.validation import validate
from gpuenv.errors import BadInput
from gpuenv.fleet.modes import merge_options
from gpuenv.fleet.slurm_job import MAX_LIMIT_S, limit_seconds
from gpuenv.fleet.sshhosts import normalise_host_url, parse_hosts

HOST = "ssh://ops@gpu-does-not-exist.invalid"


def refused(**kwargs) -> str:
    started = time.monotonic()
    with pytest.raises(Exit) as err:
        validate(Context(Config()), **kwargs)
    assert err.value.code == 2
    assert time.monotonic() - started < HANG_BOUND_S, "the check came after slow work"
    message = str(err.value.message)
    assert "\n" not in message and message.startswith("gpuenv: ")
    return message


@pytest.mark.parametrize("flag", ["report", "json", "junit"])
def test_an_output_in_a_folder_that_cannot_be_written(flag):
    name = {"report": "fleet.html", "json": "fleet.json", "junit": "fleet.xml"}[flag]
    message = refused(hosts=HOST, image="x", **{flag: f"/proc/{name}"})
    assert f"--{flag} /proc/{name}: the folder /proc cannot be written" in message


def test_an_output_under_a_file_or_in_an_unmakeable_folder(tmp_path):
    (tmp_path / "file").write_text("")
    message = refused(hosts=HOST, image="x", json=str(tmp_path / "file" / "sub" / "fleet.json"))
    assert f"{tmp_path / 'file'} is not a folder" in message
    assert "the folder /proc cannot be written" in refused(
        hosts=HOST, image="x", json="/proc/gpuenv/sub/fleet.json"
    )


def test_an_output_in_a_folder_yet_to_be_made_is_fine(tmp_path):
    """The report writer makes missing folders: only a folder that cannot be made is refused."""
    from gpuenv.cli.fleet import check_output_path

    check_output_path("--json", str(tmp_path / "new" / "deeper" / "fleet.json"), "fleet.json")
    assert not (tmp_path / "new").exists()  # checked, not made


def test_an_output_name_over_255_bytes(tmp_path):
    message = refused(hosts=HOST, image="x", junit=str(tmp_path / ("x" * 300 + ".xml")))
    # the task layer's path check (gpuenv/cli/paths.py) answers first, naming the option and the
    # limit
    assert (
        message.startswith("gpuenv: --junit ")
        and "at most 255" in message
        and len(message.splitlines()) == 1
    )


def test_an_output_that_is_a_special_file():
    assert "is not a regular file" in refused(hosts=HOST, image="x", json="/dev/null")


def test_a_read_only_mount_is_refused(tmp_path):
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    if (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("cannot mount a read-only tmpfs here (needs CAP_SYS_ADMIN)")
    try:
        message = refused(hosts=HOST, image="x", report=str(folder / "fleet.html"))
        assert "cannot be written (Read-only file system)" in message
        message = refused(slurm=True, prefix="/p", rundir=str(folder / "run"))
        assert (
            f"--rundir {folder / 'run'}: {folder} cannot be written (Read-only file system)"
            in message
        )
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_an_unmakeable_slurm_rundir(tmp_path):
    assert "--rundir /proc/gpuenv-run: it is under /proc" in refused(
        slurm=True, prefix="/p", rundir="/proc/gpuenv-run"
    )
    (tmp_path / "a-file").write_text("")
    message = refused(slurm=True, prefix="/p", rundir=str(tmp_path / "a-file" / "run"))
    assert (
        message.startswith("gpuenv: --rundir ")
        and "a-file" in message
        and "file" in message.split("a-file", 1)[1]
    )


@pytest.mark.parametrize("image", ["Bad Image!", "x@sha256:123", "UPPER/case"])
def test_a_bad_image_reference_reaches_no_host_and_no_job(image):
    assert "is not an image reference" in refused(hosts=HOST, image=image)
    assert "is not an image reference" in refused(slurm=True, prefix="/p", image=image)


@pytest.mark.parametrize(
    "url, word",
    [
        ("ssh://h/", "has a path"),
        ("ssh://h/x", "has a path"),
        ("ssh://h?x=1", "has a path"),
        ("ssh://h:", "bad port"),
        ("ssh://h:0", "out of range"),
        ("ssh://h:65536", "out of range"),
        ("ssh://h:1e3", "bad port"),
        ("ssh://u s@h", "host name"),
    ],
)
def test_host_urls_that_are_not_hosts(url, word):
    with pytest.raises(BadInput, match=re.escape(word)):
        normalise_host_url(url)


def test_one_host_written_two_ways_is_one_host():
    assert parse_hosts("ssh://ops@gpu1:052222,ssh://ops@gpu1:52222,ssh://ops@GPU1:52222") == [
        "ssh://ops@gpu1:52222"
    ]
    assert parse_hosts("ssh://gpu1:22,ssh://gpu1") == ["ssh://gpu1"]
    assert merge_options({"hosts": "ssh://a:0022,ssh://a"}, {}).hosts == ["ssh://a"]


@pytest.mark.parametrize("text", ["99999999999", "8-0", "10081", "0", "0:00"])
def test_time_limits_are_bounded(text):
    with pytest.raises(
        BadInput, match=r"--time '[^']+' is (more than the maximum of 7 days|no time at all)"
    ):
        time_limit_seconds(text)
    assert "--time" in refused(hosts=HOST, image="x", time=text)


def test_the_maximum_itself_is_taken():
    assert time_limit_seconds("7-0") == MAX_LIMIT_S
    assert limit_seconds("UNLIMITED") is None


def test_queue_time_is_checked_and_only_for_slurm():
    assert "--queue-time 'UNLIMITED' has no end" in refused(
        slurm=True, prefix="/p", queue_time="UNLIMITED"
    )
    assert "--queue-time '99999999999' is more than the maximum" in refused(
        slurm=True, prefix="/p", queue_time="99999999999"
    )
    assert "--queue-time is a Slurm option" in refused(hosts=HOST, image="x", queue_time="5")


def test_one_line_exit_2_through_invoke(invoke_cli, tmp_path):
    proc = invoke_cli("validate", "--hosts", "ssh://h/", "--image", "x")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "gpuenv: host 'ssh://h/' has a path, query or fragment; an SSH host has none: write it "
        "as ssh://user@host or ssh://user@host:2222"
    )
    proc = invoke_cli(
        "validate", "--hosts", "ssh://h", "--image", "x", "--json", "/proc/fleet.json"
    )
    assert (
        proc.returncode == 2
        and len(proc.stderr.strip().splitlines()) == 1
        and "/proc cannot be written" in proc.stderr
    )


def test_plain_progress_lines_are_never_cut_at_80_columns():
    """Off a terminal (CI logs) each progress line stays one line, however long (issue 20, item
    4)."""
    import io

    from gpuenv.cli.fleet import HostProgress

    out = io.StringIO()
    detail = "waiting: ReqNodeNotAvail, UnavailableNodes:gpu[001-064],gpu[101-164] " + "x" * 80
    with HostProgress(out) as progress:
        progress("job 123456", "pending", detail)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith(detail) and len(lines[0]) > 150
    assert "\x1b[" not in out.getvalue()


def test_the_default_slurm_rundir_is_checked_too(monkeypatch):
    monkeypatch.chdir("/proc")
    assert "--rundir /proc/gpuenv-fleet: /proc cannot be written" in refused(
        slurm=True, prefix="/p"
    )


def test_nccl_settings_and_sbatch_options_come_from_invoke_yaml_and_the_command_line():
    """Review D9 and D7: `gpuenv.fleet.env` (NCCL/gloo/PyTorch settings) reaches every fleet run,
    and `--sbatch-arg` (or `fleet.slurm.sbatch_args`) the Slurm jobs; command line over file."""
    from gpuenv.cli.config import DEFAULT_ORIGIN, Layer, settings_from

    section = {
        "fleet": {
            "env": {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0"},
            "slurm": {"sbatch_args": ["--account=ml"]},
        }
    }
    settings = settings_from(None, [Layer(DEFAULT_ORIGIN, {}), Layer("invoke.yaml", section)])
    config = settings.fleet.as_config()
    opts = merge_options({"slurm": True}, config)
    assert opts.env == {
        "NCCL_SOCKET_IFNAME": "ib0",
        "GLOO_SOCKET_IFNAME": "ib0",
    } and opts.sbatch_args == ["--account=ml"]
    assert merge_options({"slurm": True, "sbatch_arg": ["--qos=high"]}, config).sbatch_args == [
        "--qos=high"
    ]
    with pytest.raises(BadInput, match="names 'LD_PRELOAD', not an NCCL/gloo/PyTorch setting"):
        settings_from(
            None,
            [
                Layer(DEFAULT_ORIGIN, {}),
                Layer("invoke.yaml", {"fleet": {"env": {"LD_PRELOAD": "/x.so"}}}),
            ],
        )
    with pytest.raises(BadInput, match="gpuenv.fleet.env in invoke.yaml names 'PATH'"):
        merge_options({"slurm": True}, {"env": {"PATH": "/x"}})
    with pytest.raises(BadInput, match="--sbatch-arg 'account=ml' is not an sbatch option"):
        merge_options({"slurm": True, "sbatch_arg": ["account=ml"]}, {})


def test_a_fleet_containers_options_carry_the_fabric_and_the_environment():
    """Review D1 and D9 for the SSH hosts' containers: a host with InfiniBand/RoCE ports gets the
    verbs devices and IPC_LOCK, every container the fleet's NCCL settings."""
    from gpuenv.engine.containers import container_options, fabric_options

    assert fabric_options(True) == {
        "devices": ["/dev/infiniband:/dev/infiniband:rwm"],
        "cap_add": ["IPC_LOCK"],
    }
    assert fabric_options(False) == {}
    assert (
        container_options("none", "1g", {"NCCL_SOCKET_IFNAME": "ib0"})["environment"][
            "NCCL_SOCKET_IFNAME"
        ]
        == "ib0"
    )
