"""invoke push, and run/validate --image, against a real registry (Debian's docker-registry on
loopback).

Push the session's CPU image, delete it from the engine, pull it back by digest through
`invoke run --image`, run in it, validate in it. A registry that is down or refuses the push is one
line, and nothing local is removed.
"""

from __future__ import annotations

import json
import re
import urllib.request

import dockercases
import pytest
from teamcases import CPU_STACK_ARGS, free_port, run_invoke

pytestmark = pytest.mark.docker

DIGEST_REF = re.compile(r"^(?P<repo>\S+/gpuenv/[\w.-]+)@(?P<digest>sha256:[0-9a-f]{64})$", re.M)
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


def registry_get(host: str, path: str, method: str = "GET"):
    request = urllib.request.Request(
        f"http://{host}{path}", method=method, headers={"Accept": MANIFEST_TYPES}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers, response.read()


def local_tags(image_id: str) -> list[str]:
    from gpuenv.engine import Engine

    engine = Engine.local()

    info = engine.image_info(image_id)
    return sorted(info.tags) if info else []


def test_push_then_pull_by_digest_then_run_and_validate(
    team_image, registry, locks_dir, cpu_stack, tmp_path, monkeypatch
):
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images

    engine = Engine.local()

    env = {"GPUENV_LOCKS_DIR": str(locks_dir)}
    # What push sends: the newest image of the current lock that carries this checkout's suite.
    # Other tests of this session may have built one of the same lock after the team image
    # (another base, another builder): each has its own name now, so ask, never assume.
    monkeypatch.setenv("GPUENV_LOCKS_DIR", str(locks_dir))
    pushed = engine.image_info(images.image_for_stack(engine, cpu_stack))
    assert pushed is not None
    pushed_tag = images.image_tags(cpu_stack, pushed.labels[images.INPUTS_LABEL])[0]
    tmp_path.chmod(0o777)  # the container's user writes the report into the mounted folder
    proc = run_invoke("push", *CPU_STACK_ARGS, "--registry", registry.host, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "\x1b" not in proc.stdout + proc.stderr, "output to a pipe must carry no control codes"
    assert "layer " in proc.stdout  # plain progress: one line per finished layer
    match = DIGEST_REF.search(proc.stdout.strip().splitlines()[-1])
    assert match, f"last line is not HOST/gpuenv/<stack>@sha256:...:\n{proc.stdout[-1500:]}"
    repo = f"{registry.host}/gpuenv/{cpu_stack.stack_id}"
    assert match["repo"] == repo
    ref = match.group(0)

    # The registry holds the lock-hash tag and the moving tag, both at the printed digest.
    _, body = registry_get(registry.host, f"/v2/gpuenv/{cpu_stack.stack_id}/tags/list")
    hash_tag = pushed_tag.rsplit(":", 1)[1]
    assert sorted(json.loads(body)["tags"]) == sorted([hash_tag, "latest"])
    for tag in (hash_tag, "latest"):
        headers, _ = registry_get(
            registry.host, f"/v2/gpuenv/{cpu_stack.stack_id}/manifests/{tag}", method="HEAD"
        )
        assert headers["Docker-Content-Digest"] == match["digest"]

    # Delete the image from the engine entirely; `run --image` must pull it back by digest.
    dockercases.remove_image(engine, pushed.id)
    assert engine.image_info(ref) is None
    try:
        proc = run_invoke(
            "run",
            "--image",
            ref,
            "--gpus",
            "none",
            "--",
            "python",
            "-c",
            "import torch; print('torch', torch.__version__)",
            cwd=tmp_path,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert f"{ref} is not on this engine: pulling it by digest" in proc.stdout
        assert "torch 2.13.0+cpu" in proc.stdout
        pulled = engine.image_info(ref)
        assert pulled is not None and pulled.id == pushed.id, (
            "the pulled image is the pushed one, byte for byte"
        )

        # Present now: validate in it without pulling again.
        proc = run_invoke(
            "validate",
            "--image",
            ref,
            "--quick",
            "--json",
            "report.json",
            cwd=tmp_path,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "pulling" not in proc.stdout
        assert json.loads((tmp_path / "report.json").read_text())
    finally:
        if engine.image_info(ref) is not None:
            repository, tag = pushed_tag.rsplit(":", 1)
            engine.client.images.get(ref).tag(repository, tag)  # its own tag, back
            dockercases.untag(
                engine, ref
            )  # and no reference to this session's registry left behind


def test_push_to_a_registry_that_is_down_is_one_line_and_removes_nothing(
    team_image, locks_dir, tmp_path
):
    before = local_tags(team_image.id)
    host = f"127.0.0.1:{free_port()}"  # nothing listens there
    home, docker_config = tmp_path / "home", tmp_path / "docker-config"
    home.mkdir()
    docker_config.mkdir()
    env = {
        "GPUENV_LOCKS_DIR": str(locks_dir),
        "HOME": str(home),
        "DOCKER_CONFIG": str(docker_config),
        # gpuenv's own cache (parsed data files, gpuenv/datacache.py) outside HOME: HOME stays
        # the place where only credentials or config could appear
        "GPUENV_CACHE_DIR": str(tmp_path / "cache"),
    }
    proc = run_invoke("push", *CPU_STACK_ARGS, "--registry", host, env=env, timeout=300)
    assert list(home.iterdir()) == [] and list(docker_config.iterdir()) == [], (
        "gpuenv writes no credentials or config"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert f"the registry {host} does not answer" in proc.stderr
    assert "nothing local was removed" in proc.stderr
    assert local_tags(team_image.id) == before


def test_push_refused_by_the_registry_is_one_line_and_removes_nothing(
    team_image, readonly_registry, locks_dir
):
    before = local_tags(team_image.id)
    proc = run_invoke(
        "push",
        *CPU_STACK_ARGS,
        "--registry",
        readonly_registry.host,
        env={"GPUENV_LOCKS_DIR": str(locks_dir)},
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert f"push {readonly_registry.host}/gpuenv/" in proc.stderr
    assert local_tags(team_image.id) == before


def test_push_without_an_image_for_the_lock_names_the_build(locks_dir, registry, tmp_path):
    empty = tmp_path / "locks"
    empty.mkdir()
    proc = run_invoke(
        "push", *CPU_STACK_ARGS, "--registry", registry.host, env={"GPUENV_LOCKS_DIR": str(empty)}
    )
    assert proc.returncode != 0
    assert "invoke lock" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "--image", "Not A Ref"], ["--image 'Not A Ref' is not an image reference"]),
        (["run", "--image", "r.example.com/gpuenv/x@sha256:abc"], ["64 hex"]),
        (["run", "--image", "r.example.com/gpuenv/x:1", "--cuda", "cpu"], ["--cuda cannot choose"]),
        (
            ["validate", "--image", "r.example.com/gpuenv/x:1", "--python", "3.11"],
            ["--python cannot choose"],
        ),
        (["push", "--registry", "https://r.example.com"], ["has a scheme"]),
        (["push", *CPU_STACK_ARGS], ["no registry given", "gpuenv.registry"]),
    ],
)
def test_bad_options_are_one_line_before_any_engine_call(args, words, tmp_path):
    proc = run_invoke(*args, env={"HOME": str(tmp_path)}, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0
    for word in words:
        assert word in proc.stderr


def test_a_refused_push_keeps_local_tags_it_did_not_create(
    team_image, readonly_registry, locks_dir, base_image, cpu_stack
):
    """Issue 21 item 5: the registry names of the push already exist locally, one on another image
    (a `latest` pulled earlier), one on this image. The refused push must leave both where they
    were: it removes only the tags it created."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    repo = f"{readonly_registry.host}/gpuenv/{cpu_stack.stack_id}"
    hash_tag = team_image.tag.rsplit(":", 1)[1]
    other = engine.image_info(base_image)
    client = engine.client
    client.images.get(other.id).tag(
        repo, "latest"
    )  # an older image's tag, as a pull would leave it
    client.images.get(team_image.id).tag(repo, hash_tag)
    try:
        before = {
            ref: engine.image_info(ref).id for ref in (f"{repo}:latest", f"{repo}:{hash_tag}")
        }
        proc = run_invoke(
            "push",
            *CPU_STACK_ARGS,
            "--registry",
            readonly_registry.host,
            env={"GPUENV_LOCKS_DIR": str(locks_dir)},
            timeout=600,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
        after = {
            ref: (engine.image_info(ref).id if engine.image_info(ref) else None) for ref in before
        }
        assert after == before, "a local tag the push did not create was removed or moved"
        assert team_image.tag in local_tags(team_image.id)
    finally:
        for ref in (f"{repo}:latest", f"{repo}:{hash_tag}"):
            dockercases.untag(engine, ref)
