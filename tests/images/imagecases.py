"""Shared helpers of the image tests: where things are, and running the tasks as a user would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import dockercases

from gpuenv.stack import Stack

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BASE_IMAGE = os.environ.get("GPUENV_TEST_BASE_IMAGE", "gpuenv-test-base:bookworm")
WHEELHOUSE = Path(os.environ.get("GPUENV_TEST_WHEELHOUSE", "/opt/wheels"))
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
#: Written into the test CA bundle (outside any PEM block, so TLS ignores it); the final image
#: must not contain it anywhere. Fixed, so a second local run reuses the build cache.
CA_MARKER = "gpuenv-test-ca-marker-3f9c1e"
#: The CPU stack of the integration image, as the options of every task that names it.
CPU_STACK_ARGS = ("--cuda", "cpu", "--framework", "torch", "--torch", "2.13.0", "--python", "3.11")


def _tasks_wired() -> bool:
    tasks = ROOT / "tasks.py"
    return tasks.is_file() and re.search(r"\bimages\b", tasks.read_text()) is not None


def run_task(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess:
    """Run a task of gpuenv/cli/images.py as a user would: `invoke ARGS` in a subprocess.

    Through tasks.py once the lead has wired the module in; until then through an Invoke
    Program over the module itself (same parser, same `--` remainder, same exit codes).
    """
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        task_argv(*args), cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


#: `invoke` over gpuenv/cli/images.py alone (used by run_task and the interrupt test).
PROGRAM = (
    "import sys; from invoke import Collection, Program; import gpuenv.cli.images as m; "
    "Program(namespace=Collection.from_module(m), binary='invoke').run(['invoke', *sys.argv[1:]])"
)


def task_argv(*args: str) -> list[str]:
    """The argv `run_task` would use, for tests that need a Popen (to send Ctrl-C)."""
    if _tasks_wired():
        return [sys.executable, "-m", "invoke", "--search-root", str(ROOT), *args]
    return [sys.executable, "-c", PROGRAM, *args]


def build_args(base_image: str, ca_bundle: Path) -> list[str]:
    return [
        "build",
        *CPU_STACK_ARGS,
        "--base-image",
        base_image,
        "--ca-cert",
        str(ca_bundle),
        "--wheelhouse",
        str(WHEELHOUSE),
    ]


def write_uv_lock(d: Path, stack: Stack, text: str) -> Path:
    """A uv lock directory as `invoke lock` leaves it: the lock file, metadata vouching for it."""
    from gpuenv.envs import lockdir

    d.mkdir(parents=True, exist_ok=True)
    (d / "requirements.lock.txt").write_text(text)
    meta = lockdir.LockMetadata(
        stack=stack,
        backend="uv",
        input_hash="i" * 64,
        lock_sha256=lockdir.file_sha256(d / "requirements.lock.txt"),
        platforms=("linux-64",),
        source="rendered from the stack",
    )
    lockdir.write_metadata(d, meta)
    return d


#: A small uv lock of the CPU stack with made-up hashes: for tests that read a lock, not install it.
CPU_LOCK_TEXT = (
    "six==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
    "torch==2.13.0+cpu \\\n    --hash=sha256:" + "b" * 64 + "\n"
)


def download_locked_wheels(lock_file: Path, find_links: Path, dest: Path) -> Path:
    """Every wheel of the uv lock `lock_file` into `dest` (from `find_links`, else PyPI), each
    checked against the lock's hashes: a complete wheelhouse, so the build asks no index."""
    proc = subprocess.run(
        [
            "python3.11",
            "-m",
            "pip",
            "--isolated",
            "download",
            "-q",
            "--no-deps",
            "--require-hashes",
            "--dest",
            str(dest),
            "--find-links",
            str(find_links),
            "-r",
            str(lock_file),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dest


@contextmanager
def rebuilt_cold_then_cached(
    engine: Any, first: str, build: Callable[[str], str]
) -> Iterator[list[str]]:
    """The image ids [first, second, cached]: `first` is a cold build already made (the session's
    stand-in image), `build(run)` builds the same lock again, cold for run "second" and through
    the build cache for "cached". Yields them once a cold rebuild gave the same environment layer
    and the cached one the same image; removes the two it built (with their kept install stages)
    at the end, whatever happened, and leaves `first` to its fixture."""
    from gpuenv.images.plan import ENV_LAYER_LABEL

    def check_label(image_id: str) -> None:  # the label names the image's environment layer
        labels = engine.image_info(image_id).labels
        assert labels[ENV_LAYER_LABEL] == engine.layer_ids(image_id)[-2]

    check_label(first)
    built = [first]
    try:
        for run in ("second", "cached"):
            built.append(build(run))
            check_label(built[-1])
        layers = [engine.image_info(i).labels[ENV_LAYER_LABEL] for i in built]
        assert layers[0] == layers[1] == layers[2], "a cold build gave another environment layer"
        assert built[2] == built[1], "a rebuild through the cache gave another image"
        yield built
    finally:
        for image_id in dict.fromkeys(built[1:]):
            info = engine.image_info(image_id)
            dockercases.remove_image(engine, image_id)
            dockercases.remove_build_cache(info.labels if info else {})
