"""Fixtures of the fleet tests: the local Docker engine, a small image that holds the real suite,
and real servers on loopback (tests/fleet/servers.py). Everything a test starts, it stops; the
image is removed at the end of the session."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import dockercases
import pytest
import servers
from dockercases import BASE_IMAGE
from servers import SUITE_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
# a tag of this session's own: another session on the engine builds and removes its own
SUITE_IMAGE = f"gpuenv-fleet-test-suite:{dockercases.SESSION}"


def _suite_context() -> bytes:
    import pytest as pytest_module

    site = Path(pytest_module.__file__).resolve().parents[1]
    dockerfile = (
        f"FROM {BASE_IMAGE}\n"
        "# the suite and the few pure-Python packages it imports; python -> python3 as in "
        "gpuenv images\n"
        "COPY lib/ /opt/suite/lib/\nCOPY validate/ /opt/suite/validate/\n"
        "COPY bin/ /usr/local/bin/\n"
        f"{dockercases.session_label_line()}"
        "ENV PYTHONPATH=/opt/suite/lib:/opt/suite\nUSER 1000:1000\nWORKDIR /tmp\n"
        'CMD ["python", "-m", "validate"]\n'
    )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dockercases.add_dockerfile(tar, dockerfile)
        link = tarfile.TarInfo("bin/python")
        link.type, link.linkname = tarfile.SYMTYPE, "/usr/bin/python3"
        tar.addfile(link)
        for name in SUITE_PACKAGES:
            if (site / name).exists():
                tar.add(
                    site / name,
                    f"lib/{name}",
                    filter=lambda t: None if "__pycache__" in t.name else t,
                )
        tar.add(
            ROOT / "validate", "validate", filter=lambda t: None if "__pycache__" in t.name else t
        )
    buf.seek(0)
    return buf.getvalue()


@pytest.fixture(scope="session")
def suite_image(docker_engine) -> str:
    """A small image with the real suite (no frameworks), built once; removed at the end."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    if (
        engine.image_info(BASE_IMAGE) is None
    ):  # made by this machine's setup, so no outside cause: a failure
        pytest.fail(
            f"the local base image {BASE_IMAGE} is missing: run scripts/setup.sh "
            f"(or scripts/make-test-base-image.sh {BASE_IMAGE})",
            pytrace=False,
        )
    result = engine.build_image(
        io.BytesIO(_suite_context()),
        dockerfile="Dockerfile",
        tags=[SUITE_IMAGE],
        buildargs={},
        progress=lambda text: None,
    )
    yield SUITE_IMAGE
    dockercases.remove_image(engine, result.image.id)


@pytest.fixture
def ssh_server(tmp_path):
    reason = servers.missing(servers.SSHD, "ssh-keygen", "docker")
    if reason:
        pytest.skip(f"sshd test server: {reason}")
    with servers.sshd(tmp_path / "sshd") as server:
        yield server


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """One cluster for the module's tests (starting and stopping slurmd takes seconds), with
    SLURM_CONF pointing the client commands (sbatch, squeue ...) at it while it runs."""
    reason = servers.missing(
        "munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel"
    )
    if reason:
        pytest.skip(f"Slurm test cluster: {reason}")
    yield from servers.running_cluster(tmp_path_factory.mktemp("slurm"))
