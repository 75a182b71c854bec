"""Times of the conda path against the local test channel: channel build, lock, install, image build.

    .venv/bin/python benchmarks/conda_path.py [--image] [--base-image gpuenv-test-base:bookworm-bare]

Builds the test channel (tests/condachannel) into a fresh cache folder (cold), then again (warm:
found by its recipes' hash). Locks the CPU stack (conda part from the channel, read as a mirror of
conda-forge; pip part by uv with a STAND-IN torch wheel, the rest from PyPI) with empty rattler
and uv caches (cold), then again with --force (warm: caches filled). Installs the lock into a
fresh prefix twice (cold caches, then warm). With --image, builds the conda image on the bare
base from an empty staging cache (cold) and again (warm: staged environment and build cache
reused). Every number is wall-clock seconds on this machine, printed as it is measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _channel_module():
    spec = importlib.util.spec_from_file_location("condachannel", ROOT / "tests" / "condachannel" / "build.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def timed(label: str, action):
    started = time.monotonic()
    result = action()
    print(f"{label:<44} {time.monotonic() - started:7.1f} s", flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", action="store_true", help="also build the conda image (needs the Docker engine)")
    parser.add_argument("--base-image", default="gpuenv-test-base:bookworm-bare")
    args = parser.parse_args()

    from gpuenv.compat.resolve import Request, resolve_stack
    from gpuenv.envs import install as installer
    from gpuenv.envs.locking import ensure_lock

    channels = _channel_module()
    stack = resolve_stack(Request(cuda="cpu", framework="torch", torch="2.13.0", python="3.11"))
    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-conda-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ.update({"GPUENV_LOCKS_DIR": str(tmp / "locks"), "XDG_CACHE_HOME": str(tmp / "xdg"),
                           "UV_CACHE_DIR": str(tmp / "uv"), "GPUENV_CACHE_DIR": str(tmp / "gpuenv-cache")})
        channel = timed("channel build (cold)", lambda: channels.build_channel(tmp / "channels"))
        timed("channel build (warm, by recipe hash)", lambda: channels.build_channel(tmp / "channels"))
        wheels = tmp / "wheels"
        channels.standin_wheel(wheels, "torch", "2.13.0+cpu")
        team = tmp / "team.yml"
        team.write_text("conda: [gpuenv-probe, gpuenv-hello]\npip: []\n")
        mirrors = {"conda-forge": channel.as_uri()}
        lock = timed("lock (cold rattler and uv caches)",
                     lambda: ensure_lock(stack, backend="conda-lock", wheelhouse=wheels, team_file=team, mirrors=mirrors))
        timed("lock (warm, --force)",
              lambda: ensure_lock(stack, backend="conda-lock", wheelhouse=wheels, team_file=team, mirrors=mirrors, force=True))
        timed("lock (unchanged: skipped)",
              lambda: ensure_lock(stack, backend="conda-lock", wheelhouse=wheels, team_file=team, mirrors=mirrors))
        for run, label in (("a", "install into a prefix (cold uv cache)"), ("b", "install into a prefix (warm uv cache)")):
            plan = installer.plan_install(stack, lock.directory, tmp / "envs" / run, wheelhouse=wheels, mirrors=mirrors)
            timed(label, lambda: installer.install(plan, say=lambda _m: None, output=lambda _m: None))
        if args.image:
            import dockercases
            from gpuenv.engine import Engine
            from gpuenv.images import plan as images

            engine = Engine.local()
            built = []
            for label in ("image build (cold: staging and build)", "image build (warm: staged, cached)"):
                plan = images.plan_build(stack, lock.directory, base_image=args.base_image, wheelhouse=wheels, mirrors=mirrors)
                plan = dataclasses.replace(plan, tags=["gpuenv-bench/conda:1"])
                built.append(timed(label, lambda: images.build_stack_image(plan, progress=lambda _t: None)).image.id)
            for image_id in dict.fromkeys(built):
                dockercases.remove_image(engine, image_id)
            dockercases.remove_image(engine, images.build_cache_tag(stack, images.read_lock(lock.directory, stack).sha256))  # the kept install stage
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
