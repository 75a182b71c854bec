"""Cold build time, cached rebuild time, image size, steps and layers of the CPU integration image.

    .venv/bin/python benchmarks/images_build.py [--builder auto|buildkit|classic]
                                                [--base-image gpuenv-test-base:bookworm]
                                                [--wheelhouse /opt/wheels] [--ca-cert FILE] [--keep]

Locks the CPU stack (PyTorch CPU + TensorFlow CPU, tests/images/fixtures/environment.yml) with
the uv backend into a temporary locks folder, builds it once with no cache (cold: every step
after the base image), then changes one file of a copy of validate/ and builds again (cached: the
environment must come from the cache). Prints the builder used, both times, the image size, the
Dockerfile steps each build ran and the layers above the base. Needs a running Docker engine and
the local base image (scripts/install-docker.sh, scripts/make-test-base-image.sh). Removes the
images it built (and the install stage a classic build kept) unless --keep is given; BuildKit's
own cache stays.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # dockercases: image history and clean-up, test helpers

ENV_FILE = ROOT / "tests" / "images" / "fixtures" / "environment.yml"
#: A step of the classic builder's log, and of BuildKit's (as gpuenv prints it).
_CLASSIC_STEP = re.compile(r"^Step \d+/(\d+) : ")
_BUILDKIT_STEP = re.compile(r"^#\d+ (\[[^\]]*\d+/\d+\] .*)$")


def steps(log: list[str]) -> tuple[int, int]:
    """(Dockerfile steps, of which from the cache) as the build's log shows them."""
    classic = [m for line in log if (m := _CLASSIC_STEP.match(line))]
    if classic:
        return int(classic[-1].group(1)), sum(line.strip() == "---> Using cache" for line in log)
    names = {m.group(1) for line in log if (m := _BUILDKIT_STEP.match(line))}
    cached = {line.split(" ", 1)[0] for line in log if line.endswith(" CACHED")}
    numbered = {line.split(" ", 1)[0] for line in log if _BUILDKIT_STEP.match(line)}
    return len(names), len(cached & numbered)


def install_cached(log: list[str]) -> bool:
    """Whether the install step (install-env.sh) came from the cache."""
    for i, line in enumerate(log):
        if "install-env.sh" in line and (line.startswith("Step ") or _BUILDKIT_STEP.match(line)):
            if line.startswith("Step "):
                return i + 1 < len(log) and log[i + 1].strip() == "---> Using cache"
            number = line.split(" ", 1)[0]
            return f"{number} CACHED" in log
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builder", default="auto", choices=("auto", "buildkit", "classic"))
    parser.add_argument("--base-image", default="gpuenv-test-base:bookworm")
    parser.add_argument("--wheelhouse", type=Path, default=Path("/opt/wheels"))
    parser.add_argument("--ca-cert", type=Path, default=Path("/etc/ssl/certs/ca-certificates.crt"))
    parser.add_argument("--keep", action="store_true", help="keep the built images")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-") as tmp:
        os.environ["GPUENV_LOCKS_DIR"] = str(Path(tmp) / "locks")
        from dataclasses import replace

        import dockercases

        from gpuenv.compat.resolve import resolve_stack
        from gpuenv.compat.rules.request import Request
        from gpuenv.engine import Engine
        from gpuenv.envs.locking import ensure_lock
        from gpuenv.images import plan as images
        from gpuenv.progress import format_size

        local = Engine.local(
            timeout=900
        )  # removing a 2.5 GB image can take minutes on a busy engine
        base = local.image_info(args.base_image)
        if base is None:
            print(
                f"base image {args.base_image} missing: run scripts/make-test-base-image.sh",
                file=sys.stderr,
            )
            return 1
        stack = resolve_stack(Request(cuda="cpu", framework="torch", torch="2.13.0", python="3.11"))
        started = time.monotonic()
        lock = ensure_lock(stack, backend="uv", env_file=ENV_FILE, wheelhouse=args.wheelhouse)
        lock_s = time.monotonic() - started
        ca = args.ca_cert if args.ca_cert.is_file() else None
        common = dict(base_image=args.base_image, ca_cert=ca, wheelhouse=args.wheelhouse)

        cold_plan = replace(
            images.plan_build(stack, lock.directory, nocache=True, **common),
            tags=["gpuenv-bench/cold:1"],
        )
        started = time.monotonic()
        cold = images.build_stack_image(
            Engine.local(), cold_plan, progress=lambda _t: None, builder=args.builder
        )
        cold_s = time.monotonic() - started

        suite = Path(tmp) / "validate"
        shutil.copytree(ROOT / "validate", suite, ignore=shutil.ignore_patterns("__pycache__"))
        (suite / "BENCHMARK_TOUCH").write_text(str(time.time()))
        warm_plan = replace(
            images.plan_build(stack, lock.directory, validate_dir=suite, **common),
            tags=["gpuenv-bench/cached:1"],
        )
        started = time.monotonic()
        warm = images.build_stack_image(
            Engine.local(), warm_plan, progress=lambda _t: None, builder=args.builder
        )
        warm_s = time.monotonic() - started

        above = dockercases.image_history(local, cold.image.id)[
            : -len(dockercases.image_history(local, base.id)) or None
        ]
        cold_steps, _ = steps(cold.log)
        warm_steps, warm_cached = steps(warm.log)
        print(f"stack                      {stack.stack_id}")
        print(f"builder                    {cold.builder}")
        print(f"lock (uv, {'reused' if lock.skipped else 'made'})          {lock_s:7.1f} s")
        print(
            f"image size                 {format_size(cold.image.size)} ({cold.image.size} bytes)"
        )
        print(
            "largest layer (the env)    "
            f"{format_size(max((h.get('Size', 0) for h in above), default=0))}"
        )
        print(
            f"above the base             {len(above)} history entries, "
            f"{sum(1 for h in above if h.get('Size', 0) > 0)} layers with files"
        )
        print(f"cold build (--no-cache)    {cold_s:7.1f} s  ({cold_steps} steps)")
        print(
            f"cached rebuild (validate/) {warm_s:7.1f} s  ({warm_steps} steps, {warm_cached} "
            "from cache; install layer from cache: "
            f"{'yes' if install_cached(warm.log) else 'NO'})"
        )
        if not args.keep:
            for built in (warm, cold):
                dockercases.remove_image(local, built.image.id)
                install = built.image.labels.get(images.INSTALL_HASH_LABEL)
                if install:  # the install stage a classic build kept
                    dockercases.remove_image(local, images.build_cache_tag(stack, install))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
