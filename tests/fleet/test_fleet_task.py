"""The fleet side of `invoke validate`: command line over invoke.yaml (gpuenv.fleet) over defaults,
and every mistake refused in one line before any host is contacted."""

from __future__ import annotations

import pytest
from invoke import Config, Context
from invoke.exceptions import Exit

from gpuenv.cli.settings import team_settings
from gpuenv.cli.validation import validate
from gpuenv.errors import BadInput
from gpuenv.fleet.modes import merge_options, wants_fleet

TEAM = {
    "gpuenv": {
        "fleet": {
            "hosts": ["ssh://ops@gpu1", "ssh://ops@gpu2:2222"],
            "parallel": 4,
            "slurm": {"partition": "gpu", "time": "30", "prefix": "/shared/envs/torch"},
        }
    }
}


def fleet_config(config: Config) -> dict:
    """The fleet section as the validate task reads it: checked once, as config.FleetSettings."""
    return team_settings(Context(config)).fleet.as_config()


def test_config_section_is_read_from_invokes_config_and_may_be_absent():
    assert fleet_config(Config()) == {"outlier_floor": 0.9, "slurm": {}}
    assert fleet_config(Config(overrides={"gpuenv": {"python": "3.11"}})) == {
        "outlier_floor": 0.9,
        "slurm": {},
    }
    cfg = fleet_config(Config(overrides=TEAM))
    assert (
        cfg["hosts"] == ["ssh://ops@gpu1", "ssh://ops@gpu2:2222"]
        and cfg["slurm"]["partition"] == "gpu"
    )


def test_command_line_beats_config_beats_defaults():
    cfg = fleet_config(Config(overrides=TEAM))
    opts = merge_options({"hosts": True}, cfg)  # a bare --hosts
    assert opts.hosts == ["ssh://ops@gpu1", "ssh://ops@gpu2:2222"] and opts.parallel == 4
    opts = merge_options({"hosts": "ssh://me@other", "parallel": "2"}, cfg)
    assert opts.hosts == ["ssh://me@other"] and opts.parallel == 2
    slurm = merge_options({"slurm": True, "time": "5"}, cfg)
    assert (slurm.hosts, slurm.partition, slurm.time, slurm.prefix) == (
        None,
        "gpu",
        "5",
        "/shared/envs/torch",
    )
    assert merge_options({"hosts": "ssh://a"}, {}).parallel == 8


def test_only_the_command_line_asks_for_a_fleet_run():
    """Hosts in a shared invoke.yaml do not turn `invoke validate` of this machine into a rack
    run."""
    assert (
        not wants_fleet({}) and wants_fleet({"hosts": True}) and wants_fleet({"hosts": "ssh://a"})
    )
    assert wants_fleet({"slurm": True})


def test_bare_hosts_flag_through_invoke_reads_invoke_yaml(tmp_path, invoke_cli):
    (tmp_path / "team.yaml").write_text("gpuenv:\n  fleet:\n    hosts: [gpu1.example]\n")
    proc = invoke_cli("-f", str(tmp_path / "team.yaml"), "validate", "--hosts")
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "gpuenv: host 'gpu1.example' is not an ssh:// URL: write it as ssh://user@host or ssh://user@host:2222"
    )
    proc = invoke_cli("validate", "--hosts")
    assert (
        proc.returncode == 2
        and "--hosts without a value, and invoke.yaml has no gpuenv.fleet.hosts" in proc.stderr
    )


@pytest.mark.parametrize(
    "given, config, word",
    [
        ({"hosts": "ssh://a", "parallel": "many"}, {}, "--parallel 'many' is not a number"),
        ({"hosts": "ssh://a", "parallel": "0"}, {}, "--parallel 0"),
        ({"slurm": True, "nodes": "two"}, {}, "--nodes 'two'"),
        ({"hosts": "ssh://a"}, {"slurm": "gpu"}, "gpuenv.fleet.slurm"),
        ({"hosts": "ssh://a,ftp://b"}, {}, "'ftp://b' is not an ssh:// URL"),
    ],
)
def test_bad_values_are_one_line_errors(given, config, word):
    with pytest.raises(BadInput, match=__import__("re").escape(word)):
        merge_options(given, config)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(hosts="ssh://a", slurm=True), "--hosts and --slurm both given"),
        (dict(hosts="ssh://a", cuda="12.1"), "stack options do not apply"),
        (dict(hosts="ssh://a", save_baseline="b.json"), "--save-baseline"),
        (dict(parallel="4"), "are fleet options"),
        (dict(slurm=True, nodes="2", nodelist="gpu[1-2]"), "--nodes and --nodelist both given"),
        (dict(slurm=True, time="soon", prefix="/p"), "--time 'soon'"),
        (dict(slurm=True), "nothing to run on the nodes"),
        (dict(hosts="ssh://a", report="fleet.pdf"), "--report fleet.pdf is not an .html file"),
        (
            dict(hosts="ssh://a", baseline="/nonexistent/b.json", image="x"),
            "baseline file /nonexistent/b.json: it does not exist: make one with --save-baseline",
        ),
        (
            dict(hosts="ssh://a", image="x", gpus="some"),
            "--gpus 'some': 'some' is not a GPU index or UUID",
        ),
        (
            dict(slurm=True, prefix="/p", gpus="two"),
            "--gpus 'two': 'two' is not a GPU index or UUID",
        ),
    ],
)
def test_task_refuses_mistakes_with_exit_2_before_any_work(kwargs, word):
    with pytest.raises(Exit) as err:
        validate(Context(Config()), **kwargs)
    assert err.value.code == 2 and word in str(err.value.message)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30", 1800),
        ("0:30", 30),
        ("1:00:00", 3600),
        ("2-0", 172800),
        ("1-2:03", 93780),
        ("0-0:0:5", 5),
    ],
)
def test_time_limits_in_slurm_forms(text, seconds):
    from gpuenv.cli.fleet import time_limit_seconds

    assert time_limit_seconds(text) == seconds


def test_bad_time_for_hosts_stops_before_any_host():
    with pytest.raises(Exit) as err:
        validate(Context(Config()), hosts="ssh://a", image="x", time="soon")
    assert err.value.code == 2 and "--time 'soon' is not a time limit" in err.value.message
