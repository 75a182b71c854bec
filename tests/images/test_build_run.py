"""`invoke build`, `invoke run`, `invoke images` against a real Docker engine and a real CPU image.

One cold build per session (fixture `cpu_image`: PyTorch CPU + TensorFlow CPU on a debootstrapped
Debian); the other builds here are a cached rebuild and the failure paths, which stop early.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import dockercases
import pytest
from badlocks import with_wrong_hashes
from imagecases import CA_MARKER, CPU_STACK_ARGS, ROOT, WHEELHOUSE, build_args, run_task, task_argv

pytestmark = [pytest.mark.docker, pytest.mark.network]


def _run_in_image(
    cwd: Path, *command: str, gpus: str = "none", env: dict | None = None
) -> subprocess.CompletedProcess:
    return run_task(
        "run", *CPU_STACK_ARGS, "--gpus", gpus, "--", *command, cwd=cwd, env=env, timeout=600
    )


def test_build_tags_after_success_and_prints_image_size_labels(cpu_image, cpu_stack, cpu_lock):
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images

    engine = Engine.local()

    assert images.image_for_stack(engine, cpu_stack) == cpu_image.id
    assert engine.client.images.get(cpu_image.id).attrs["Config"]["User"] == "1000:1000"
    expected = images.image_labels(cpu_stack, cpu_lock.sha256, "uv")
    stack_json = images.LABEL_PREFIX + "stack_json"
    # the stack record: the same stack (its reasons may say more: --wheelhouse was given)
    assert images.stack_from_labels(cpu_image.labels) == cpu_stack
    assert {k: cpu_image.labels.get(k) for k in expected if k != stack_json} == {
        k: v for k, v in expected.items() if k != stack_json
    }
    for key in ("title", "created", "version", "source", "base.name"):
        assert cpu_image.labels.get(f"org.opencontainers.image.{key}"), key
    assert cpu_image.labels["org.opencontainers.image.base.name"] == "gpuenv-test-base:bookworm"
    out = cpu_image.output
    assert f"tags: {', '.join(cpu_image.tags)}" in out
    assert "size: " in out and " GB" in out
    assert f"io.gpuenv.lock_hash={cpu_lock.sha256}" in out


def test_run_gives_user_env_frameworks_mount_and_shm(cpu_image, cpu_stack, tmp_path):
    # A project folder as users have them (pytest's tmp_path is private to root: 0700).
    tmp_path.chmod(0o755)
    (tmp_path / "from-host.txt").write_text("hello from the host\n")
    (tmp_path / "from-host.txt").chmod(0o644)
    probe = (
        "import json, os, torch, tensorflow as tf\n"
        "st = os.statvfs('/dev/shm')\n"
        "print('PROBE ' + json.dumps({'uid': os.getuid(), 'cwd': os.getcwd(),"
        " 'host_file': open('from-host.txt').read(),"
        " 'require_cuda': os.environ.get('NVIDIA_REQUIRE_CUDA'),"
        " 'growth': os.environ.get('TF_FORCE_GPU_ALLOW_GROWTH'),"
        " 'stack': json.load(open(os.environ['GPUENV_STACK_FILE']))['stack_id'],"
        " 'torch': torch.__version__, 'tf': tf.__version__,"
        " 'matmul': float(torch.ones(2, 2).matmul(torch.ones(2, 2)).sum()),"
        " 'shm': st.f_blocks * st.f_frsize}))\n"
    )
    proc = _run_in_image(tmp_path, "python", "-c", probe)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("PROBE "))
    seen = json.loads(line[len("PROBE ") :])
    assert seen["uid"] == os.getuid(), "the container must run as the caller"
    assert seen["cwd"] == "/workspace" and seen["host_file"] == "hello from the host\n"
    assert seen["require_cuda"] == "" and seen["growth"] == "true"
    assert seen["stack"] == cpu_stack.stack_id
    assert seen["torch"] == "2.13.0+cpu" and seen["tf"].count(".") == 2
    assert seen["matmul"] == 8.0
    assert seen["shm"] >= 8 * 1024**3


def test_validation_suite_runs_in_the_image(cpu_image, tmp_path):
    proc = _run_in_image(tmp_path, "python", "-m", "validate", "--help")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    proc = _run_in_image(
        tmp_path,
        "python",
        "-c",
        "import pytest, pynvml, validate.host.nvml; print('suite deps ok')",
    )
    assert proc.returncode == 0 and "suite deps ok" in proc.stdout, proc.stdout[-2000:]


def test_invoke_validate_in_the_image_reports_and_exits_by_verdict(cpu_image, cpu_stack, tmp_path):
    """The main job's second half: `invoke validate --cuda cpu` inside the built image."""
    # No chmod: pytest's tmp_path is root's and private (0700); the container runs as the caller.
    proc = run_task(
        "validate",
        *CPU_STACK_ARGS,
        "--quick",
        "--json",
        "report.json",
        "--junit",
        "report.xml",
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"validating in {cpu_stack.stack_id}" in proc.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert "host" in report
    checks = json.dumps(report)
    assert f"torch build vs {cpu_stack.stack_id}" in checks, (
        "inside the image the suite compares builds with the image's claims"
    )
    assert "<testsuite" in (tmp_path / "report.xml").read_text()
    # no GPU here: asking for one makes the same run fail, saying what it saw
    proc = run_task(
        "validate", *CPU_STACK_ARGS, "--quick", "--expect-gpus", "1", cwd=tmp_path, timeout=600
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert (
        "NVML sees 0 GPU(s), expected exactly 1 GPU(s) (--expect-gpus 1)"
        in proc.stdout + proc.stderr
    )


def test_run_returns_the_exit_code_and_removes_the_container(cpu_image, tmp_path):
    since = time.time()
    proc = _run_in_image(tmp_path, "python", "-c", "import sys; print('bye'); sys.exit(5)")
    assert proc.returncode == 5, proc.stderr
    assert "bye" in proc.stdout
    assert (
        dockercases.containers_created_since(since, ancestor=cpu_image.id) == []
    )  # this image's only: the engine is shared


def test_run_asks_for_gpus_and_says_why_the_engine_cannot(cpu_image, tmp_path):
    from gpuenv.engine import Engine

    engine = Engine.local()

    if "nvidia" in engine.runtimes():
        pytest.skip("this engine has the NVIDIA runtime: --gpus all would be granted")
    since = time.time()
    proc = _run_in_image(tmp_path, "true", gpus="all")
    assert proc.returncode == 1
    assert "NVIDIA Container Toolkit" in proc.stderr and "--gpus none" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        dockercases.containers_created_since(since, ancestor=cpu_image.id) == []
    )  # this image's only: the engine is shared


def test_run_without_an_image_says_how_to_build_it(docker_engine, tmp_path):
    proc = run_task(
        "run",
        "--cuda",
        "cpu",
        "--framework",
        "tensorflow",
        "--gpus",
        "none",
        "--",
        "true",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert "no gpuenv image for stack tensorflow" in proc.stderr
    assert "run invoke build --cuda cpu --framework tensorflow" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_images_lists_the_stack_and_size(cpu_image, cpu_stack):
    proc = run_task("images")
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if cpu_image.tags[0] in line)
    assert cpu_stack.stack_id in row and " GB" in row


def test_ca_bundle_is_in_no_layer_and_no_history_of_the_image(cpu_image):
    from gpuenv.engine import Engine

    for entry in dockercases.image_history(Engine.local(), cpu_image.id):
        assert CA_MARKER not in (entry.get("CreatedBy") or "")
        assert "ca-bundle" not in (entry.get("CreatedBy") or "")
    marker = CA_MARKER.encode()
    tail = b""
    scanned = 0
    for chunk in dockercases.save_image(cpu_image.id):
        assert marker not in tail + chunk, (
            "the CA bundle given with --ca-cert leaked into the image"
        )
        tail = chunk[-len(marker) :]
        scanned += len(chunk)
    assert scanned > 100_000_000  # every layer was read (the environment alone is GBs)


def test_cached_rebuild_after_a_suite_change_keeps_the_environment(
    cpu_image, cpu_stack, cpu_lock, ca_bundle, base_image, tmp_path
):
    from gpuenv.engine import Engine
    from gpuenv.images import plan as images

    engine = Engine.local()

    suite = tmp_path / "validate"
    shutil.copytree(ROOT / "validate", suite, ignore=shutil.ignore_patterns("__pycache__"))
    # A change no earlier build made: the engine's build cache outlives this run (CI reuses it)
    (suite / "CHANGED_BY_TEST").write_text(f"a change to the validation suite: {uuid.uuid4()}\n")
    # The stack exactly as the image was built for it (the reasons, which the wheelhouse adds to,
    # included)
    built_for = images.stack_from_labels(cpu_image.labels)
    assert built_for == cpu_stack
    plan = images.plan_build(
        built_for,
        cpu_lock.directory,
        base_image=base_image,
        ca_cert=ca_bundle,
        wheelhouse=WHEELHOUSE,
        validate_dir=suite,
    )
    plan = dataclasses.replace(plan, tags=["gpuenv-test/rebuild:suite-change"])
    result = images.build_stack_image(engine, plan, progress=lambda _text: None)
    try:
        log = result.log
        assert _cached(log, "RUN /opt/gpuenv-build/install-env.sh"), (
            "the environment was reinstalled"
        )
        assert _cached(log, "COPY --from=install")
        assert not _cached(log, "COPY image/"), "the changed suite was not copied"
        old = engine.client.images.get(cpu_image.id).attrs["RootFS"]["Layers"]
        new = engine.client.images.get(result.image.id).attrs["RootFS"]["Layers"]
        assert len(old) == len(new) and old[:-1] == new[:-1] and old[-1] != new[-1], (
            "only the suite layer may differ"
        )
    finally:
        dockercases.remove_image(engine, result.image.id)


def _cached(log: list[str], step: str) -> bool:
    """Whether the build's log says `step` came from the cache: the classic builder's
    "---> Using cache" after the step, or BuildKit's "#N CACHED" for it."""
    at = next(
        i
        for i, line in enumerate(log)
        if step in line and (line.startswith("Step ") or line.startswith("#"))
    )
    if log[at].startswith("Step "):
        return at + 1 < len(log) and log[at + 1].strip() == "---> Using cache"
    return f"{log[at].split(' ', 1)[0]} CACHED" in log


def _broken_locks_root(tmp_path: Path, cpu_lock, lock_text: str) -> Path:
    """A copy of the lock with `lock_text`, its metadata vouching for it (build verifies the
    hash)."""
    from gpuenv.envs import lockdir

    root = tmp_path / "locks"
    directory = root / cpu_lock.directory.name
    shutil.copytree(cpu_lock.directory, directory)
    (directory / "requirements.lock.txt").write_text(lock_text)
    meta = lockdir.read_metadata(directory)
    lockdir.write_metadata(
        directory,
        dataclasses.replace(
            meta, lock_sha256=lockdir.file_sha256(directory / "requirements.lock.txt")
        ),
    )
    return root


def _stack_tags_unchanged(cpu_image, bad_lock_text: str) -> None:
    import hashlib

    from gpuenv.engine import Engine
    from gpuenv.images import plan as images

    engine = Engine.local()

    bad_hash = hashlib.sha256(bad_lock_text.encode()).hexdigest()
    assert engine.find_images({images.LOCK_HASH_LABEL: bad_hash}) == [], (
        "an image of the failed lock was made"
    )
    latest = engine.image_info(cpu_image.tags[1])
    assert latest is not None and latest.id == cpu_image.id, (
        ":latest moved away from the last good build"
    )


def test_failed_build_tags_nothing_and_leaves_no_container(
    cpu_image, cpu_lock, ca_bundle, base_image, tmp_path
):
    # A hash that no file on PyPI has: uv refuses it inside the install RUN step.
    bad = with_wrong_hashes(cpu_lock.directory.joinpath("requirements.lock.txt").read_text())
    root = _broken_locks_root(tmp_path, cpu_lock, bad)
    since = time.time()
    proc = run_task(
        *build_args(base_image, ca_bundle), env={"GPUENV_LOCKS_DIR": str(root)}, timeout=600
    )
    assert proc.returncode == 1, proc.stdout[-2000:]
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and message[0].startswith(
        ("gpuenv: docker build failed at Step ", "gpuenv: docker build failed at [install ")
    ), proc.stderr
    assert (
        "returned a non-zero code" in message[0] or "exit code: " in message[0]
    ) and "Traceback" not in proc.stderr
    assert "Hash mismatch for `" in proc.stdout
    _stack_tags_unchanged(cpu_image, bad)
    assert dockercases.build_step_containers_since(since) == []
    dockercases.remove_untagged_since(since)  # the cached layers of the steps before the failure


def test_interrupted_build_tags_nothing_and_leaves_no_container(
    cpu_image, cpu_lock, ca_bundle, base_image, tmp_path
):
    # A lock that differs from the cached one, so the install step really starts, then Ctrl-C.
    changed = cpu_lock.directory.joinpath("requirements.lock.txt").read_text() + "# interrupted\n"
    root = _broken_locks_root(tmp_path, cpu_lock, changed)
    since = time.time()
    proc = subprocess.Popen(
        task_argv(*build_args(base_image, ca_bundle)),
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GPUENV_LOCKS_DIR": str(root)},
    )
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "gpuenv-install:" in line:  # the install RUN step is running inside its container
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen[-20:]) + out[-2000:] + err
    assert err.strip().splitlines()[-1] == "gpuenv: interrupted"
    _stack_tags_unchanged(cpu_image, changed)
    deadline = time.monotonic() + 60
    while dockercases.build_step_containers_since(since) and time.monotonic() < deadline:
        time.sleep(1)  # the engine cancels the step and removes its container (forcerm)
    assert dockercases.build_step_containers_since(since) == [], (
        "the interrupted step's container was left behind"
    )
    dockercases.remove_untagged_since(since)


def test_engine_down_is_one_clear_line(tmp_path):
    socket = tmp_path / "no-engine.sock"
    for args in (("images",), ("run", *CPU_STACK_ARGS, "--", "true")):
        proc = run_task(*args, env={"DOCKER_HOST": f"unix://{socket}"})
        assert proc.returncode == 1, proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            f"gpuenv: the Docker engine at unix://{socket} does not answer"
        ), proc.stderr
        assert "start the Docker engine" in lines[0]


def test_build_behind_a_tls_proxy_names_the_ca_cert_fix(
    cpu_image, cpu_lock, base_image, locks_root, tmp_path
):
    """Without --ca-cert, HTTPS inside the build fails here (a TLS-inspecting proxy): the message
    says so."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    probe = (
        "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/six/', timeout=20)"
    )
    since = time.time()
    code = engine.run_container(
        base_image,
        ["python3", "-c", probe],
        gpus="none",
        workdir_mount=tmp_path,
        stream=lambda _t: None,
    )
    if code == 0:
        pytest.skip(
            "HTTPS to PyPI works from a container on this network without an extra CA bundle"
        )
    args = [a for a in build_args(base_image, Path("unused")) if a not in ("--ca-cert", "unused")]
    proc = run_task(*args, env={"GPUENV_LOCKS_DIR": str(locks_root)}, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:]
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and "pass --ca-cert" in message[0], proc.stderr
    latest = engine.image_info(cpu_image.tags[1])
    assert latest is not None and latest.id == cpu_image.id
    assert dockercases.build_step_containers_since(since) == []
    dockercases.remove_untagged_since(since)


def test_cpu_image_hands_out_no_gpus_by_itself_and_gates_on_the_driver(cpu_image):
    """No NVIDIA_VISIBLE_DEVICES in a CPU image: on a host whose default runtime is nvidia it
    would give every container of the image every GPU, even without --gpus."""
    from gpuenv.engine import Engine

    engine = Engine.local()

    config = engine.client.images.get(cpu_image.id).attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["GPUENV_MIN_DRIVER"] == "" and env["NVIDIA_REQUIRE_CUDA"] == ""
    assert config["Entrypoint"] == ["/opt/gpuenv/bin/gpuenv-entrypoint"]
