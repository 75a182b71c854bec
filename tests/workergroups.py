"""Which tests share a worker when the test command runs on two (pytest-xdist, `-n 2 --dist
loadscope`), as pytest hooks that tests/conftest.py takes in.

The test machine has one Docker engine, and the fleet and team tests start servers on it (an
sshd, a one-node Slurm with munge, a registry, headless Chromium). Those tests count what they
made on the engine since they started, build and remove images by name, and wait out Slurm's
time limits: run side by side, one test's count would see the other's containers. So every test
that uses one of them is in the `engine` group, and the whole group is one unit of work: one
worker runs it, one test after another, in the order they were collected. It is handed out
first, being the longest unit. Everything else (PyTorch, TensorFlow, the replays of captures, the
unit tests) goes a module at a time, as xdist's loadscope does (modules with the most tests
first), so a module's fixtures run once; a worker done with its unit takes the next one left.

A test is in the engine group when
1. it needs one of ENGINE_FIXTURES (directly, or through a fixture that does: `base_image` and
   every image fixture need `docker_engine`), or
2. it is marked `docker`, or
3. its module is one of ENGINE_MODULES (it starts such a server inside the test).
Each such test gets the `engine` mark, so `-m engine` (or `-m "not engine"`) selects the group.

How the group reaches the scheduler: xdist's own `--dist loadgroup` appends `@group` to a node id
in the worker, which pytest 9.2's structured node ids ignore (pytest-dev/pytest-xdist#1386:
nothing is grouped, silently). So each worker writes the node ids of the group to a folder the
controller named (`pytest_configure_node`), and the controller's scheduler reads them once every
worker has collected, before it hands out any work. Without xdist (`pytest tests/x.py`, or
`-p no:xdist`) only the mark is added.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

ENGINE_GROUP = "engine"

#: The fixtures that stand for a shared server: the Docker engine, the sshd in front of it, the
#: Slurm test clusters, the registries.
ENGINE_FIXTURES = frozenset(
    {
        "docker_engine",
        "ssh_server",
        "slurm_cluster",
        "two_nodes",
        "registry",
        "readonly_registry",
    }
)

#: Modules whose tests start a shared server themselves rather than through a fixture.
ENGINE_MODULES = frozenset(
    {
        "tests/fleet/test_fleet_html_browser.py",  # headless Chromium opens the fleet pages
    }
)

#: The key of the workers' input (config.workerinput) that names the folder for the group's ids.
FOLDER_KEY = "gpuenv_engine_group_folder"
_FOLDER = pytest.StashKey[Path]()


def in_engine_group(item: pytest.Item) -> bool:
    """Whether the test uses the Docker engine, SSH, Slurm, a registry or Chromium."""
    fixtures = set(getattr(item, "fixturenames", ()))
    module = item.nodeid.split("::", 1)[0]
    return (
        bool(fixtures & ENGINE_FIXTURES)
        or item.get_closest_marker("docker") is not None
        or module in ENGINE_MODULES
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{ENGINE_GROUP}: uses the shared Docker engine, SSH, Slurm, a registry or Chromium "
        "(added by tests/workergroups.py; one xdist worker runs these, in order)",
    )


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    group = [item for item in items if in_engine_group(item)]
    for item in group:
        item.add_marker(getattr(pytest.mark, ENGINE_GROUP))
    folder = getattr(config, "workerinput", {}).get(FOLDER_KEY)
    if folder:  # an xdist worker: tell the controller's scheduler
        name = Path(folder) / config.workerinput["workerid"]
        partial = name.with_suffix(".partial")
        partial.write_text("".join(f"{item.nodeid}\n" for item in group))
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


def read_group(folder: Path) -> set[str]:
    """The node ids of the engine group, as the workers wrote them (each collects them all)."""
    written = [path for path in folder.iterdir() if path.suffix != ".partial"]
    if not written:
        raise RuntimeError(
            f"no xdist worker wrote the engine group into {folder} (tests/workergroups.py): "
            "without it the server tests would run side by side"
        )
    return {line for path in written for line in path.read_text().splitlines()}


def unit_of(nodeid: str, group: set[str]) -> str:
    """The scheduler's unit of work for a node id: the engine group, else its module."""
    return ENGINE_GROUP if nodeid in group else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """For `--dist loadscope`: xdist's loadscope scheduler (a module is a unit), with the engine
    group as one unit handed out first."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EngineGroupThenModules(LoadScopeScheduling):
        group: set[str] | None = None

        def schedule(self) -> None:
            if self.group is None and self.collection_is_completed:
                folder = config.stash.get(_FOLDER, None)
                self.group = read_group(folder) if folder is not None else set()
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid, self.group or set())

        def _assign_work_unit(self, node: Any) -> None:
            # The engine group first: it is the longest unit, and mostly waits on servers.
            if ENGINE_GROUP in self.workqueue:
                self.workqueue.move_to_end(ENGINE_GROUP, last=False)
            super()._assign_work_unit(node)

    return EngineGroupThenModules(config, log)
