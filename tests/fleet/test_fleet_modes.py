"""gpuenv/fleet/modes.py: which servers `invoke validate` validates. A mix of this server's run and
a fleet's is one line naming the flags given and the way out, before any host or engine is asked;
the old spellings (`invoke validate --hosts/--slurm/--from-reports`) stay the fleet's."""

from __future__ import annotations

import pytest

from gpuenv.errors import BadInput
from gpuenv.fleet.modes import FLEET_ONLY, check_mode


@pytest.mark.parametrize(
    "given",
    [{"hosts": "ssh://a"}, {"hosts": True}, {"slurm": True}, {"from_reports": "reports/"}],
)
def test_each_fleet_flag_asks_for_a_fleet_run(given):
    assert check_mode(given, []) is True


def test_nothing_fleet_is_this_server():
    assert check_mode({"local": True, "replay": "x.xml", "health_only": True}, []) is False
    assert check_mode({"cuda": "12.1"}, ["--cuda"]) is False


def test_a_fleet_option_without_a_fleet_names_the_options_given():
    with pytest.raises(BadInput) as err:
        check_mode({"parallel": "4", "nodes": "2", "report": None}, [])
    assert err.value.message.startswith(
        "--parallel --nodes given without --hosts, --slurm or --from-reports: "
    )
    assert err.value.fix.endswith("or drop --parallel --nodes")
    assert "\n" not in err.value.message


@pytest.mark.parametrize("name", FLEET_ONLY)
def test_every_fleet_only_option_is_refused_alone(name):
    with pytest.raises(BadInput, match=f"^--{name.replace('_', '-')} given without"):
        check_mode({name: ["x"] if name == "sbatch_arg" else "1"}, [])


@pytest.mark.parametrize(
    "given, stack, named",
    [
        ({"hosts": "ssh://a", "local": True}, [], "--local"),
        ({"slurm": True, "replay": "x.xml", "record": "r/"}, [], "--replay --record"),
        ({"from_reports": "d", "health_only": True}, [], "--health-only"),
        ({"hosts": "ssh://a"}, ["--cuda", "--python"], "--cuda --python"),
    ],
)
def test_this_servers_options_in_a_fleet_run_are_named(given, stack, named):
    with pytest.raises(BadInput) as err:
        check_mode(given, stack)
    assert err.value.message.startswith(f"{named}: a fleet run validates other servers")
    assert err.value.fix.startswith(f"drop {named} ")


@pytest.mark.parametrize(
    "given, word",
    [
        ({"hosts": "ssh://a", "slurm": True}, "--hosts and --slurm both given"),
        ({"hosts": "ssh://a", "from_reports": "d"}, "--from-reports renders reports already"),
        ({"slurm": True, "from_reports": "d"}, "so --hosts/--slurm do not apply"),
    ],
)
def test_two_fleet_modes_at_once_are_refused(given, word):
    with pytest.raises(BadInput, match=word):
        check_mode(given, [])


def test_the_old_spelling_still_reaches_the_fleet_through_invoke(tmp_path, invoke_cli):
    """`invoke validate --from-reports EMPTY` is the fleet's (its one-line refusal), not a mixing
    error and not the suite on this server."""
    empty = tmp_path / "reports"
    empty.mkdir()
    proc = invoke_cli("validate", "--from-reports", str(empty))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and str(empty) in proc.stderr


def test_without_image_the_fleet_uses_the_tag_of_this_hosts_stack_image(tmp_path, monkeypatch):
    """`invoke validate --hosts URL` with no --image: the local image of the stack this host
    resolves to, found on the engine the task passes (here a recorded answer), named by its tag;
    an image with no tag is refused in one line (the hosts could not know it)."""
    from types import SimpleNamespace

    from gpuenv.cli.fleet import stack_image_ref
    from gpuenv.compat.host import resolve_for_host
    from gpuenv.engine import ImageInfo
    from gpuenv.images import plan as images

    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(tmp_path))  # no lock: the newest image of the stack
    stack = resolve_for_host()
    labels = {images.STACK_LABEL: stack.stack_id}
    tagged = ImageInfo("sha256:tagged", ["gpuenv/x:abc"], 1, "2026-11-27T10:00:00Z", labels)
    engine = SimpleNamespace(
        find_images=lambda wanted: [tagged] if wanted == labels else [],
        image_info=lambda ref: tagged if ref == tagged.id else None,
    )
    assert stack_image_ref(engine) == "gpuenv/x:abc"
    bare = ImageInfo("sha256:bare", [], 1, "2026-11-27T10:00:00Z", labels)
    engine = SimpleNamespace(find_images=lambda wanted: [bare], image_info=lambda ref: bare)
    with pytest.raises(BadInput, match="has no tag the hosts could know it by"):
        stack_image_ref(engine)
