"""Image size, cold build time and cached rebuild time of the CPU integration image.

    .venv/bin/python benchmarks/images_build.py [--base-image gpuenv-test-base:bookworm]
                                                [--wheelhouse /opt/wheels] [--ca-cert FILE] [--keep]

Locks the CPU stack (PyTorch CPU + TensorFlow CPU, tests/images/fixtures/environment.yml) with
the uv backend into a temporary locks folder, builds it once with no cache (cold: every layer
after the base image), then changes one file of a copy of validate/ and builds again (cached: the
environment must come from the cache). Needs a running Docker engine and the local base image
(scripts/install-docker.sh, scripts/make-test-base-image.sh). Removes the images it built unless
--keep is given; the build cache stays.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ENV_FILE = ROOT / "tests" / "images" / "fixtures" / "environment.yml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-image", default="gpuenv-test-base:bookworm")
    parser.add_argument("--wheelhouse", type=Path, default=Path("/opt/wheels"))
    parser.add_argument("--ca-cert", type=Path, default=Path("/etc/ssl/certs/ca-certificates.crt"))
    parser.add_argument("--keep", action="store_true", help="keep the built images")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-") as tmp:
        os.environ["GPUENV_LOCKS_DIR"] = str(Path(tmp) / "locks")
        from gpuenv.compat.resolve import Request, resolve_stack
        from gpuenv.engine import Engine
        from gpuenv.envs.locking import ensure_lock
        from gpuenv.images import plan as images

        engine = Engine.local()
        if engine.image_info(args.base_image) is None:
            print(f"base image {args.base_image} missing: run scripts/make-test-base-image.sh", file=sys.stderr)
            return 1
        stack = resolve_stack(Request(cuda="cpu", framework="torch", torch="2.13.0", python="3.11"))
        started = time.monotonic()
        lock = ensure_lock(stack, backend="uv", env_file=ENV_FILE, wheelhouse=args.wheelhouse)
        lock_s = time.monotonic() - started
        ca = args.ca_cert if args.ca_cert.is_file() else None
        common = dict(base_image=args.base_image, ca_cert=ca, wheelhouse=args.wheelhouse)

        cold_plan = dataclasses.replace(images.plan_build(stack, lock.directory, nocache=True, **common), tags=["gpuenv-bench/cold:1"])
        started = time.monotonic()
        cold = images.build_stack_image(cold_plan, progress=lambda _t: None)
        cold_s = time.monotonic() - started

        suite = Path(tmp) / "validate"
        shutil.copytree(ROOT / "validate", suite, ignore=shutil.ignore_patterns("__pycache__"))
        (suite / "BENCHMARK_TOUCH").write_text(str(time.time()))
        warm_plan = dataclasses.replace(images.plan_build(stack, lock.directory, validate_dir=suite, **common), tags=["gpuenv-bench/cached:1"])
        started = time.monotonic()
        warm = images.build_stack_image(warm_plan, progress=lambda _t: None)
        warm_s = time.monotonic() - started
        reused = any("Using cache" in line for line in warm.log[_index(warm.log, "install-env.sh") + 1:][:1])

        history = engine.image_history(cold.image.id)
        env_layer = max((h.get("Size", 0) for h in history), default=0)
        print(f"stack                      {stack.stack_id}")
        print(f"lock (uv, {'reused' if lock.skipped else 'made'})          {lock_s:7.1f} s")
        print(f"image size                 {images.format_size(cold.image.size)} ({cold.image.size} bytes)")
        print(f"largest layer (the env)    {images.format_size(env_layer)}")
        print(f"cold build (--no-cache)    {cold_s:7.1f} s")
        print(f"cached rebuild (validate/) {warm_s:7.1f} s  (install layer from cache: {'yes' if reused else 'NO'})")
        if not args.keep:
            for built in (warm, cold):
                engine.remove_image(built.image.id)
            engine.remove_image(images.build_cache_tag(stack, cold_plan.lock.sha256))  # the install stage the build kept
    return 0


def _index(lines: list[str], needle: str) -> int:
    return next((i for i, line in enumerate(lines) if needle in line), len(lines))


if __name__ == "__main__":
    raise SystemExit(main())
