"""`invoke verify --image`: a fresh image of the conda path (bare base, no Python) and of the uv
path (the Debian base's Python) is intact, read through the engine from a container that is
created and never started; each of issue 36's five changes, committed into a copy of the image,
fails it naming the file. Both images come from the local test channel and the STAND-IN torch
wheel (a complete wheelhouse, so the builds need no network): the session's own
(tests/images/conftest.py: standin_conda_image, standin_uv_image), built once for these tests and
the conda and uv image tests."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time

import dockercases
import pytest
from verifycases import CONDA_TAMPERS, TAMPERS, Tamper, extra_package_files, named

pytestmark = [pytest.mark.docker, pytest.mark.network]

ENV = "/opt/gpuenv/env"


@pytest.fixture
def conda_image(standin_conda_image):
    """The conda path's image: the session's (tests/images/conftest.py), which the conda test's
    first cold build is too."""
    return "conda-lock", standin_conda_image.id, standin_conda_image.lock_dir


@pytest.fixture
def uv_image(standin_uv_image):
    """The uv path's image: the session's, which the uv test's first cold build is too."""
    return "uv", standin_uv_image.id, standin_uv_image.lock_dir


@pytest.fixture(params=["conda-lock", "uv"])
def built(request):
    """Each path's image, each built once per session."""
    return request.getfixturevalue("conda_image" if request.param == "conda-lock" else "uv_image")


def _verify(image: str, lock_dir):
    from gpuenv.engine import Engine
    from gpuenv.images.verify import verify_image

    return verify_image(Engine.local(), image, say=lambda _l: None, lock_dir=lock_dir)


def _tampered(image: str, tamper: Tamper) -> str:
    """A copy of `image` with `tamper` made by a root shell in a container (the test's doing,
    not verify's), committed; the container is removed."""
    client = dockercases._client()
    path = f"{ENV}/{tamper.path}"
    script = {
        "edited file": f"printf '\\n# edited\\n' >> {path}",
        "changed entry point": f"printf '\\n# changed\\n' >> {path}",
        "removed file": f"rm {path}",
        "added module": f"printf 'x = 1\\n' > {path}",
        "extra pip package": "true",
    }[tamper.name]
    container = client.containers.create(
        image, ["-c", script], entrypoint=["/bin/sh"], user="0:0", network_disabled=True
    )
    try:
        if tamper.name == "extra pip package":
            data = io.BytesIO()
            with tarfile.open(fileobj=data, mode="w") as tar:
                for name, content in extra_package_files().items():
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime = len(content), int(time.time())
                    tar.addfile(info, io.BytesIO(content))
            container.put_archive(ENV, data.getvalue())
        container.start()
        assert container.wait(timeout=120)["StatusCode"] == 0, container.logs()
        return container.commit().id
    finally:
        container.remove(force=True)


def test_a_fresh_image_is_intact_without_running_it(built):
    backend, image, lock_dir = built
    since = time.time()
    verdict = _verify(image, lock_dir)
    assert verdict.ok, [p.line() for p in verdict.problems]
    assert verdict.files_hashed > 100 and "sha256" in verdict.compared, verdict.compared
    assert "as its io.gpuenv.env_layer label records" in verdict.layer, verdict.layer
    # the container it read from was created, never started, and is gone
    assert dockercases.containers_labelled("io.gpuenv.verify") == []
    assert dockercases.containers_created_since(since, ancestor=image) == []


#: Each change on each image it applies to: a uv image holds no conda package.
CHANGES = [("conda_image", t) for t in TAMPERS + CONDA_TAMPERS] + [("uv_image", t) for t in TAMPERS]


@pytest.mark.parametrize(
    "which, tamper", CHANGES, ids=[f"{w} {t.name} {t.path.rsplit('/', 1)[-1]}" for w, t in CHANGES]
)
def test_each_change_fails_the_image_naming_the_file(request, which, tamper):
    from gpuenv.engine import Engine

    _backend, image, lock_dir = request.getfixturevalue(which)
    copy = _tampered(image, tamper)
    try:
        verdict = _verify(copy, lock_dir)
        assert not verdict.ok and named(verdict, tamper), [p.line() for p in verdict.problems]
    finally:
        dockercases.remove_image(Engine.local(), copy)


def test_an_environment_layer_label_the_image_does_not_have_fails_it(conda_image):
    """A copy of the conda image whose io.gpuenv.env_layer names a layer it lacks: every file is
    intact, and still the image fails, naming the label (read from the engine's record)."""
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images
    from gpuenv.images.context import label_instruction

    _backend, image, lock_dir = conda_image
    engine = Engine.local()
    wrong = "sha256:" + "0" * 64
    copy = engine.label_image(
        next(t for t in engine.image_info(image).tags if t.startswith("gpuenv-test/")),
        label_instruction({images.ENV_LAYER_LABEL: wrong}),
        tags=[f"gpuenv-test/verify-wrong-layer-{os.getpid()}:1"],
        progress=lambda _l: None,
    ).image.id
    try:
        verdict = _verify(copy, lock_dir)
        assert [p.kind for p in verdict.problems] == ["layer"], [p.line() for p in verdict.problems]
        line = verdict.problems[0].line()
        assert images.ENV_LAYER_LABEL in line and wrong[:19] in line and "do not include" in line
    finally:
        dockercases.remove_image(engine, copy)


def test_the_task_checks_an_image_by_reference_exits_1_and_writes_the_json(conda_image, tmp_path):
    """On the conda image: the task's side is the same for both paths."""
    from pathlib import Path

    from gpuenv.engine import Engine

    _backend, image, lock_dir = conda_image
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "GPUENV_LOCKS_DIR": str(lock_dir.parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "invoke", "verify", "--image", image],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (
        proc.returncode == 0
        and "intact:" in proc.stdout
        and "packages compared with" in proc.stdout
        and "as its io.gpuenv.env_layer label records" in proc.stdout
    ), proc.stdout + proc.stderr
    copy = _tampered(image, TAMPERS[2])
    try:
        report = tmp_path / "verdict.json"
        proc = subprocess.run(
            [sys.executable, "-m", "invoke", "verify", "--image", copy, "--json", str(report)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 1 and f"unowned: {TAMPERS[2].path}" in proc.stdout, (
            proc.stdout + proc.stderr
        )
        assert [p["path"] for p in json.loads(report.read_text())["problems"]] == [TAMPERS[2].path]
    finally:
        dockercases.remove_image(Engine.local(), copy)
