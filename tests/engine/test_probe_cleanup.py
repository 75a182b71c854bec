"""A throwaway probe container is removed whatever happens (issue 28: failed tests left containers
in the Created state). An image with no /bin/sh makes the probe's start fail after the container
was created: the SDK's `containers.run(remove=True)` left exactly that container behind."""

from __future__ import annotations

import subprocess
import time
import uuid

import dockercases
import pytest

from gpuenv.errors import ToolError

pytestmark = pytest.mark.docker


@pytest.fixture
def image_without_sh(docker_engine):
    """An empty image (no /bin/sh, nothing at all), imported from an empty tar, removed
    afterwards."""
    name = f"gpuenv-test-empty:{uuid.uuid4().hex[:12]}"
    done = subprocess.run(
        ["docker", "import", "-", name],
        input=subprocess.run(["tar", "-c", "-T", "/dev/null"], capture_output=True).stdout,
        capture_output=True,
        timeout=120,
    )
    if done.returncode != 0:
        pytest.skip(
            f"docker import of an empty tar failed: {done.stderr.decode(errors='replace').strip()}"
        )
    yield name
    subprocess.run(["docker", "rmi", "-f", name], capture_output=True, timeout=120)


def test_a_probe_whose_start_fails_leaves_no_container(image_without_sh):
    from gpuenv.engine import Engine

    since = time.time()
    with pytest.raises(ToolError) as err:
        Engine.local().image_python(image_without_sh, "3.11")
    assert "check that the image has /bin/sh" in err.value.render()
    assert dockercases.containers_created_since(since, ancestor=image_without_sh) == [], (
        "the probe's container was left behind"
    )
