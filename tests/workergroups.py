"""Which tests share a worker when the test command runs on two (pytest-xdist, `-n 2 --dist
loadscope`), as pytest hooks that tests/conftest.py takes in.

The test machine has one Docker engine, and the fleet and team tests start servers on it (an
sshd, a one-node Slurm with munge, a registry, headless Chromium). The Docker tests count what
they made on the engine since they started (containers whose command names gpuenv, build steps)
and build and remove images by name: run side by side, one test's count would see the other's
containers. So every test that uses the engine is in the `engine` unit, and the unit is run by
one worker, one test after another, in the order they were collected.

The Slurm tests that use no Docker, and the Chromium tests, make nothing on the engine, and each
Slurm module starts its own cluster on free loopback ports in its own folder (a second cluster
beside it is no conflict: tests/fleet/test_slurm_daemons_die.py starts one beside the others).
Most of their time is waiting (a job that waits out Slurm's time limit, whole minutes checked
every 30 s; suites on the cluster's nodes), so they are a unit of their own, `engine-slurm`, run
in order by one worker while the other runs the Docker tests: the waits of one overlap the other's
work. A Slurm test that also uses Docker (a node that runs the suite in an image) stays in the
`engine` unit, with a cluster of its own.

Both units are handed out first, `engine` then `engine-slurm`, being the longest units.
Everything else (PyTorch, TensorFlow, the replays of captures, the unit tests) goes a module at a
time, as xdist's loadscope does (modules with the most tests first), so a module's fixtures run
once; a worker done with its unit takes the next one left.

A test is in one of the engine units when
1. it needs one of ENGINE_FIXTURES (directly, or through a fixture that does: `base_image` and
   every image fixture need `docker_engine`), or
2. it is marked `docker`, or
3. its module is one of ENGINE_MODULES (it starts such a server inside the test).
It is in `engine-slurm` when it needs none of DOCKER_FIXTURES and is not marked `docker`, else in
`engine`. Each such test gets the `engine` mark, so `-m engine` (or `-m "not engine"`) selects
both units.

How the units reach the scheduler: xdist's own `--dist loadgroup` appends `@group` to a node id
in the worker, which pytest 9.2's structured node ids ignore (pytest-dev/pytest-xdist#1386:
nothing is grouped, silently). So each worker writes the unit and node id of each engine test to
a folder the controller named (`pytest_configure_node`), and the controller's scheduler reads
them once every worker has collected, before it hands out any work. Without xdist (`pytest
tests/x.py`, or `-p no:xdist`) only the mark is added.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import pytest

#: The mark of every engine test, and the name of the unit of the Docker tests.
ENGINE_GROUP = "engine"
#: The unit of the Slurm tests that use no Docker, and of the Chromium tests.
SLURM_UNIT = "engine-slurm"

#: The fixtures of the Docker engine and the servers in front of it or beside it: the sshd (SSH
#: Docker hosts), the registries.
DOCKER_FIXTURES = frozenset({"docker_engine", "ssh_server", "registry", "readonly_registry"})
#: The fixtures of the Slurm test clusters (tests/fleet/servers.py).
SLURM_FIXTURES = frozenset({"slurm_cluster", "two_nodes"})
#: The fixtures that stand for a shared server.
ENGINE_FIXTURES = DOCKER_FIXTURES | SLURM_FIXTURES

#: Modules whose tests start a shared server themselves rather than through a fixture.
ENGINE_MODULES = frozenset(
    {
        "tests/fleet/test_fleet_html_browser.py",  # headless Chromium opens the fleet pages
    }
)

#: The key of the workers' input (config.workerinput) that names the folder for the group's ids.
FOLDER_KEY = "gpuenv_engine_group_folder"
_FOLDER = pytest.StashKey[Path]()


def engine_unit(item: pytest.Item) -> str | None:
    """The engine unit of a test that uses the Docker engine, SSH, Slurm, a registry or Chromium
    (`engine`, or `engine-slurm` when it uses no Docker), else None."""
    fixtures = set(getattr(item, "fixturenames", ()))
    module = item.nodeid.split("::", 1)[0]
    docker = bool(fixtures & DOCKER_FIXTURES) or item.get_closest_marker("docker") is not None
    if docker:
        return ENGINE_GROUP
    if fixtures & SLURM_FIXTURES or module in ENGINE_MODULES:
        return SLURM_UNIT
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{ENGINE_GROUP}: uses the shared Docker engine, SSH, Slurm, a registry or Chromium "
        "(added by tests/workergroups.py; two units, `engine` and `engine-slurm`, each run in "
        "order by one xdist worker)",
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    units = {item.nodeid: unit for item in items if (unit := engine_unit(item))}
    for item in items:
        if item.nodeid in units:
            item.add_marker(getattr(pytest.mark, ENGINE_GROUP))
    folder = getattr(config, "workerinput", {}).get(FOLDER_KEY)
    if folder:  # an xdist worker: tell the controller's scheduler
        name = Path(folder) / config.workerinput["workerid"]
        partial = name.with_suffix(".partial")
        # "UNIT NODEID": a unit's name holds no space, a node id may (a parameter's)
        partial.write_text("".join(f"{unit} {nodeid}\n" for nodeid, unit in units.items()))
        partial.replace(name)  # whole or absent: the scheduler never reads half a list


@pytest.hookimpl(optionalhook=True)  # xdist's hooks: absent under -p no:xdist
def pytest_configure_node(node: Any) -> None:
    """On the controller, for each worker it starts: the folder the worker writes the group to."""
    config = node.config
    if _FOLDER not in config.stash:
        config.stash[_FOLDER] = Path(tempfile.mkdtemp(prefix="gpuenv-engine-group-"))
    node.workerinput[FOLDER_KEY] = str(config.stash[_FOLDER])


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_FOLDER, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def read_group(folder: Path) -> dict[str, str]:
    """The engine unit of each engine test's node id, as the workers wrote them (each collects
    them all)."""
    written = [path for path in folder.iterdir() if path.suffix != ".partial"]
    if not written:
        raise RuntimeError(
            f"no xdist worker wrote the engine units into {folder} (tests/workergroups.py): "
            "without them the server tests would run side by side"
        )
    lines = [line for path in written for line in path.read_text().splitlines()]
    return {nodeid: unit for unit, nodeid in (line.split(" ", 1) for line in lines)}


def unit_of(nodeid: str, group: Mapping[str, str]) -> str:
    """The scheduler's unit of work for a node id: its engine unit, else its module."""
    return group.get(nodeid) or nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """For `--dist loadscope`: xdist's loadscope scheduler (a module is a unit), with the two
    engine units handed out first, `engine` then `engine-slurm`."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EngineGroupThenModules(LoadScopeScheduling):
        group: dict[str, str] | None = None

        def schedule(self) -> None:
            if self.group is None and self.collection_is_completed:
                folder = config.stash.get(_FOLDER, None)
                self.group = read_group(folder) if folder is not None else {}
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid, self.group or {})

        def _assign_work_unit(self, node: Any) -> None:
            # The engine units first (`engine`, then `engine-slurm`): they are the longest units,
            # and the Slurm one mostly waits, beside the Docker one's work.
            for unit in (SLURM_UNIT, ENGINE_GROUP):
                if unit in self.workqueue:
                    self.workqueue.move_to_end(unit, last=False)
            super()._assign_work_unit(node)

    return EngineGroupThenModules(config, log)
