"""Time to plan a build and write its context from a wheelhouse of many wheels the lock omits.

    .venv/bin/python benchmarks/build_context.py [--others 5000 50000]

A team wheelhouse grows with every release; only the locked wheels may go into the build context,
and picking them must not grow with the wheelhouse's size. For each count, writes a wheelhouse of
that many unrelated wheels beside the two locked ones (tiny fake files: the time measured is
gpuenv's, not the disk's), then plans the CPU stack's build and writes its context into memory.
Prints the count, the seconds taken and the wheels sent. Needs no Docker engine.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuenv.envs import lockdir  # noqa: E402
from gpuenv.images import plan as images  # noqa: E402
from gpuenv.stack import Stack  # noqa: E402

CPU = Stack(
    cuda="cpu",
    cuda_version=None,
    min_driver=None,
    base_image="ubuntu:22.04",
    python="3.11",
    framework="torch",
    framework_version="2.13.0",
    wheel_variant="cpu",
    index_url="https://download.pytorch.org/whl/cpu",
    pip_requirement="torch==2.13.0+cpu",
)


def lock_dir(d: Path, six: bytes, torch: bytes) -> Path:
    """A uv lock of six and torch (the hashes of the fake wheels), as `invoke lock` leaves it."""
    d.mkdir(parents=True)
    (d / "requirements.lock.txt").write_text(
        f"six==1.17.0 \\\n    --hash=sha256:{hashlib.sha256(six).hexdigest()}\n"
        f"torch==2.13.0+cpu \\\n    --hash=sha256:{hashlib.sha256(torch).hexdigest()}\n"
    )
    lockdir.write_metadata(
        d,
        lockdir.LockMetadata(
            stack=CPU,
            backend="uv",
            input_hash="b" * 64,
            lock_sha256=lockdir.file_sha256(d / "requirements.lock.txt"),
            platforms=("linux-64",),
            source="benchmarks/build_context.py",
        ),
    )
    return d


def measure(others: int, work: Path) -> tuple[float, int]:
    """(seconds to plan and write the context, wheels in it) for a wheelhouse of `others` extra
    wheels."""
    wheels = work / f"wheels-{others}"
    wheels.mkdir()
    six, torch = b"PK\x03\x04six", b"PK\x03\x04torch"
    (wheels / "six-1.17.0-py2.py3-none-any.whl").write_bytes(six)
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(torch)
    for n in range(others):
        (wheels / f"other{n}-1.0-py3-none-any.whl").write_bytes(b"PK")
    lock = lock_dir(work / f"lock-{others}", six, torch)
    started = time.perf_counter()
    plan = images.plan_build(CPU, lock, wheelhouse=wheels, arch="x86_64")
    buf = io.BytesIO()
    images.write_context(plan, buf)
    took = time.perf_counter() - started
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        sent = sum(m.name.endswith(".whl") for m in tar.getmembers())
    return took, sent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--others",
        type=int,
        nargs="+",
        default=[5000, 50000],
        help="unrelated wheels in the wheelhouse",
    )
    args = parser.parse_args()
    if any(n < 0 for n in args.others):
        parser.error("--others: counts are 0 or more")
    print(f"{'other wheels':>12}  {'seconds':>8}  {'wheels sent':>11}")
    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-context-") as tmp:
        for n in args.others:
            took, sent = measure(n, Path(tmp))
            print(f"{n:>12}  {took:>8.2f}  {sent:>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
