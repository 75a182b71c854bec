"""The conda path's small mistakes of issue 36, on the real local test channel: an export keeps the
channels its lock was solved from; `install --offline` and `build --offline` accept the same
channels; an unreachable mirror is named as the mirror; fetch lines never run together."""

from __future__ import annotations

import io
import os

import pytest
import yaml

pytestmark = pytest.mark.network  # the pip part of a conda lock is locked against PyPI


def _lock(folder, stack, channel, standin_wheels, *, mirrored: bool):
    from gpuenv.envs.locking import ensure_lock

    os.environ["GPUENV_LOCKS_DIR"] = str(folder / "locks")
    team = folder / "team.yml"
    team.write_text(yaml.safe_dump({"conda": ["gpuenv-probe"], "pip": []}))
    if mirrored:  # solved from conda-forge, read through the team's file:// mirror of it
        kwargs = {"mirrors": {"conda-forge": channel.as_uri()}}
    else:  # solved from the file:// channel itself
        kwargs = {"conda_channels": [channel.as_uri()]}
    lock = ensure_lock(
        stack, backend="conda-lock", wheelhouse=standin_wheels, team_file=team, **kwargs
    )
    return lock.directory, team


@pytest.fixture(scope="module")
def locks(tmp_path_factory, conda_channel, standin_wheels, cpu_stack, pypi):
    """Two conda locks of the CPU stack: from the file:// channel, and from conda-forge through
    a mirror."""
    made = {}
    try:
        for name in ("file", "mirrored"):
            folder = tmp_path_factory.mktemp(f"lock-{name}")
            made[name] = (
                folder,
                *_lock(
                    folder, cpu_stack, conda_channel, standin_wheels, mirrored=name == "mirrored"
                ),
            )
    finally:
        os.environ.pop("GPUENV_LOCKS_DIR", None)
    return made


def test_an_export_names_the_channels_its_lock_was_solved_from(
    locks, cpu_stack, conda_channel, tmp_path, monkeypatch
):
    from gpuenv.envs.export import export_environment

    for name, want in (
        ("file", [conda_channel.as_uri(), "nodefaults"]),
        ("mirrored", ["conda-forge", "nodefaults"]),
    ):
        folder, _lock_dir, team = locks[name]
        monkeypatch.setenv("GPUENV_LOCKS_DIR", str(folder / "locks"))
        out = tmp_path / f"{name}.yml"
        export_environment(cpu_stack, out, team_file=team)
        assert yaml.safe_load(out.read_text())["channels"] == want, name


def test_install_and_build_offline_accept_the_same_channels(
    locks, cpu_stack, conda_channel, standin_wheels, tmp_path
):
    from gpuenv.envs import install
    from gpuenv.errors import BadInput
    from gpuenv.images import plan as images

    def refusals(lock_dir, mirrors):
        found = []
        for plan in (
            lambda: install.plan_install(
                cpu_stack,
                lock_dir,
                tmp_path / "prefix",
                wheelhouse=standin_wheels,
                offline=True,
                mirrors=mirrors,
            ),
            lambda: images.plan_build(
                cpu_stack,
                lock_dir,
                base_image="gpuenv-test-base:bookworm-bare",
                wheelhouse=standin_wheels,
                offline=True,
                mirrors=mirrors,
            ),
        ):
            try:
                plan()
                found.append(None)
            except BadInput as err:
                found.append(err.message)
        return found

    # a lock solved from the file:// channel needs no mirror: both accept it
    # (install refused it before)
    assert refusals(locks["file"][1], {}) == [None, None]
    # conda-forge through its file:// mirror: both accept it
    assert refusals(locks["mirrored"][1], {"conda-forge": conda_channel.as_uri()}) == [None, None]
    # conda-forge with no mirror needs the network: both refuse it, in the same words,
    # naming the channel
    install_says, build_says = refusals(locks["mirrored"][1], {})
    assert (
        install_says == build_says and "https://conda.anaconda.org/conda-forge" in install_says
    ), (install_says, build_says)


def test_an_unreachable_mirror_is_named_as_the_mirror_and_no_mirror_is_advised(locks, tmp_path):
    from gpuenv.envs import conda, condalock
    from gpuenv.errors import ToolError

    _folder, lock_dir, _team = locks["mirrored"]
    package = condalock.read_lock(lock_dir / "conda-lock.yml", "linux-64").conda[0]
    with pytest.raises(ToolError) as err:  # nothing listens on port 9 of 127.0.0.1
        conda.fetch_verified(
            [package],
            tmp_path,
            mirrors={"https://conda.anaconda.org/conda-forge": "http://127.0.0.1:9/cf"},
        )
    assert (
        "127.0.0.1:9" in err.value.message
        and "check the mirror" in err.value.fix
        and "set a mirror" not in err.value.fix
    )


def test_fetch_lines_stay_separate_lines_in_a_failed_install_tail(
    locks, cpu_stack, standin_wheels, tmp_path
):
    from gpuenv.envs import condalock
    from gpuenv.progress import PLAIN, Reporter

    _folder, lock_dir, _team = locks["file"]
    out = io.StringIO()
    with pytest.raises(RuntimeError), Reporter(PLAIN, out=out) as report:
        condalock.install(
            lock_dir / "conda-lock.yml",
            into=tmp_path / "env",
            final_prefix=tmp_path / "env",
            platform="linux-64",
            have={"__cuda": None, "__glibc": "2.36"},
            target="this host",
            wheelhouse=standin_wheels,
            cache=tmp_path / "cache",
            say=report.phase,
            output=report.output,
        )
        raise RuntimeError("the work failed after the fetches: the tail is printed")
    fetches = [line for line in out.getvalue().splitlines() if "fetching " in line]
    assert len(fetches) >= 3, out.getvalue()
    assert all(line.count("fetching ") == 1 for line in fetches), fetches
