"""Times of the conda path on the local test channel: channel build, lock, install, image build.

    .venv/bin/python benchmarks/conda_path.py [--image]
        [--base-image gpuenv-test-base:bookworm-bare]

Builds the test channel (tests/condachannel) into a fresh cache folder (cold), then again (warm:
found by its recipes' hash). Locks the CPU stack (conda part from the channel, read as a mirror of
conda-forge; pip part by uv with a STAND-IN torch wheel, the rest from PyPI) with empty rattler
and uv caches (cold), then again with --force (warm: caches filled). Installs the lock into a
fresh prefix twice (cold caches, then warm). With --image, builds the conda image on the bare
base from an empty staging cache (cold) and again (warm: staged environment and build cache
reused). Every number is wall-clock seconds on this machine, printed as it is measured.

With --big-repodata N (e.g. 200000), also a conda-forge-sized channel made here: conda-forge has
"over 150,000+ packages" (CEP 16, https://github.com/conda/ceps/blob/main/cep-0016.md), so N
synthetic records (`synth-*`, 10 versions per name, each depending on up to two lower names, some
on python and __glibc) are written into linux-64/repodata.json beside the records of the real test
channel, whose package files are linked in. The solve asks for the top synthetic name (its
dependencies reach a few dozen names) and the real packages; it is timed alone (gpuenv.envs.conda
.solve) and as a whole lock, with the channel read as a file:// mirror and served over http on
127.0.0.1, each from an empty rattler cache (cold) and again (warm).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuenv.stack import Stack

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _channel_module():
    spec = importlib.util.spec_from_file_location(
        "condachannel", ROOT / "tests" / "condachannel" / "build.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def timed(label: str, action):
    started = time.monotonic()
    result = action()
    print(f"{label:<44} {time.monotonic() - started:7.1f} s", flush=True)
    return result


#: Versions of each synthetic name: conda-forge keeps many builds of every package.
SYNTH_VERSIONS = 10


def synth_name(index: int) -> str:
    return f"synth-{index:06d}"


def write_big_channel(real: Path, into: Path, records: int) -> tuple[Path, str]:
    """A channel folder with `records` synthetic linux-64 records plus the real test channel's
    records and files; returns it and the synthetic name to ask for (the top of the graph)."""
    names = max(records // SYNTH_VERSIONS, 1)
    for subdir in ("linux-64", "noarch", "linux-aarch64"):
        (into / subdir).mkdir(parents=True, exist_ok=True)
        for package in (real / subdir).glob("*.conda"):
            shutil.copy2(package, into / subdir / package.name)  # a few kB each
        if subdir != "linux-64":
            shutil.copy2(real / subdir / "repodata.json", into / subdir / "repodata.json")
    real_linux = json.loads((real / "linux-64" / "repodata.json").read_text(encoding="utf-8"))
    with open(into / "linux-64" / "repodata.json", "w", encoding="utf-8") as out:
        out.write(
            '{"info": {"subdir": "linux-64"}, "packages": {}, "repodata_version": 1, '
            '"packages.conda": {'
        )
        first = True
        for file_name, record in real_linux["packages.conda"].items():
            out.write(("" if first else ",") + json.dumps(file_name) + ":" + json.dumps(record))
            first = False
        for index in range(names):
            depends = [
                f"{synth_name(j)} >=1.{SYNTH_VERSIONS // 2}"
                for j in {index // 2, index // 3}
                if j != index
            ]
            if index % 5 == 0:
                depends.append("python >=3.8")
            if index % 7 == 0:
                depends.append("__glibc >=2.17")
            for version in range(SYNTH_VERSIONS):
                digest = hashlib.sha256(f"{index} {version}".encode()).hexdigest()
                build = f"h{digest[:7]}_0"
                record = {
                    "build": build,
                    "build_number": 0,
                    "depends": depends,
                    "license": "BSD-3-Clause",
                    "md5": digest[:32],
                    "name": synth_name(index),
                    "sha256": digest,
                    "size": 12345,
                    "subdir": "linux-64",
                    "timestamp": 1700000000000 + index,
                    "version": f"1.{version}",
                }
                out.write(
                    ","
                    + json.dumps(f"{synth_name(index)}-1.{version}-{build}.conda")
                    + ":"
                    + json.dumps(record)
                )
        out.write("}}")
    # conda-forge serves repodata.json.zst too, and rattler fetches it first (zstandard: a
    # dependency of conda-package-streaming)
    try:
        import zstandard
    except ImportError:
        print("  (no zstandard module: the http channel serves repodata.json only)", flush=True)
    else:
        with (
            open(into / "linux-64" / "repodata.json", "rb") as raw,
            open(into / "linux-64" / "repodata.json.zst", "wb") as packed,
        ):
            zstandard.ZstdCompressor(level=3).copy_stream(raw, packed)
    return into, synth_name(names - 1)


def big_repodata(
    channels: ModuleType, channel: Path, tmp: Path, records: int, stack: Stack, wheels: Path
) -> None:
    """Solve and lock against a conda-forge-sized channel, cold and warm, file:// and http. A lock
    is the solve plus uv's pip part (its cache warm by now); rattler caches what it read over http
    (the decompressed repodata), but reads a file:// channel in place, with no cache to warm."""
    from gpuenv.envs import conda, spec
    from gpuenv.envs.locking import ensure_lock

    big, top = timed(
        f"write a channel of {records} synthetic records",
        lambda: write_big_channel(channel, tmp / "big", records),
    )
    for name in ("repodata.json", "repodata.json.zst"):
        if (big / "linux-64" / name).is_file():
            print(
                f"{'  linux-64/' + name:<44} "
                f"{(big / 'linux-64' / name).stat().st_size / 1e6:7.1f} MB",
                flush=True,
            )
    os.environ["GPUENV_LOCKS_DIR"] = str(
        tmp / "locks-big"
    )  # the small channel's lock stays as it was
    team = tmp / "team-big.yml"
    team.write_text(f"conda: [{top}, gpuenv-probe, gpuenv-hello]\npip: []\n")
    virtual = conda.virtual_packages(cuda=None, glibc=spec.glibc_for(stack), arch="x86_64")
    specs = ["python=3.11", "pip", top, "gpuenv-probe", "gpuenv-hello"]
    with channels.served(big) as http_url:
        for how, url in (("file://", big.as_uri()), ("http", http_url)):
            mirrors = {"conda-forge": url}
            cache = tmp / f"rattler-{how.strip(':/')}"
            for state in ("cold", "warm"):
                found = timed(
                    f"solve, {how} mirror ({state} rattler cache)",
                    lambda: conda.solve(
                        channels=["conda-forge"],
                        specs=specs,
                        platform="linux-64",
                        virtual=virtual,
                        mirrors=conda.check_mirrors(mirrors),
                        cache_dir=cache,
                    ),
                )
            print(f"{'  packages in the solution':<44} {len(found):7d}", flush=True)
            os.environ["XDG_CACHE_HOME"] = str(
                tmp / f"xdg-big-{how.strip(':/')}"
            )  # the lock's own rattler cache
            for state in ("cold", "warm"):
                timed(
                    f"lock, {how} mirror ({state}, --force)",
                    lambda: ensure_lock(
                        stack,
                        backend="conda-lock",
                        wheelhouse=wheels,
                        team_file=team,
                        mirrors=mirrors,
                        force=True,
                    ),
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--image", action="store_true", help="also build the conda image (needs the Docker engine)"
    )
    parser.add_argument("--base-image", default="gpuenv-test-base:bookworm-bare")
    parser.add_argument(
        "--big-repodata",
        type=int,
        default=0,
        metavar="N",
        help="also solve and lock against a channel of N synthetic records (conda-forge: over "
        "150,000)",
    )
    args = parser.parse_args()

    from gpuenv.compat.resolve import resolve_stack
    from gpuenv.compat.rules.request import Request
    from gpuenv.envs import install as installer
    from gpuenv.envs.locking import ensure_lock

    channels = _channel_module()
    stack = resolve_stack(Request(cuda="cpu", framework="torch", torch="2.13.0", python="3.11"))
    with tempfile.TemporaryDirectory(prefix="gpuenv-bench-conda-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ.update(
            {
                "GPUENV_LOCKS_DIR": str(tmp / "locks"),
                "XDG_CACHE_HOME": str(tmp / "xdg"),
                "UV_CACHE_DIR": str(tmp / "uv"),
                "GPUENV_CACHE_DIR": str(tmp / "gpuenv-cache"),
            }
        )
        channel = timed("channel build (cold)", lambda: channels.build_channel(tmp / "channels"))
        timed(
            "channel build (warm, by recipe hash)", lambda: channels.build_channel(tmp / "channels")
        )
        wheels = tmp / "wheels"
        channels.standin_wheel(wheels, "torch", "2.13.0+cpu")
        team = tmp / "team.yml"
        team.write_text("conda: [gpuenv-probe, gpuenv-hello]\npip: []\n")
        mirrors = {"conda-forge": channel.as_uri()}
        lock = timed(
            "lock (cold rattler and uv caches)",
            lambda: ensure_lock(
                stack, backend="conda-lock", wheelhouse=wheels, team_file=team, mirrors=mirrors
            ),
        )
        timed(
            "lock (warm, --force)",
            lambda: ensure_lock(
                stack,
                backend="conda-lock",
                wheelhouse=wheels,
                team_file=team,
                mirrors=mirrors,
                force=True,
            ),
        )
        timed(
            "lock (unchanged: skipped)",
            lambda: ensure_lock(
                stack, backend="conda-lock", wheelhouse=wheels, team_file=team, mirrors=mirrors
            ),
        )
        for run, label in (
            ("a", "install into a prefix (cold uv cache)"),
            ("b", "install into a prefix (warm uv cache)"),
        ):
            plan = installer.plan_install(
                stack, lock.directory, tmp / "envs" / run, wheelhouse=wheels, mirrors=mirrors
            )
            timed(
                label, lambda: installer.install(plan, say=lambda _m: None, output=lambda _m: None)
            )
        if args.big_repodata:
            big_repodata(channels, channel, tmp, args.big_repodata, stack, wheels)
        if args.image:
            import dockercases

            from gpuenv.engine import Engine
            from gpuenv.images import plan as images

            engine = Engine.local()
            built = []
            for label in (
                "image build (cold: staging and build)",
                "image build (warm: staged, cached)",
            ):
                plan = images.plan_build(
                    stack,
                    lock.directory,
                    base_image=args.base_image,
                    wheelhouse=wheels,
                    mirrors=mirrors,
                )
                plan = dataclasses.replace(plan, tags=["gpuenv-bench/conda:1"])
                built.append(
                    timed(
                        label,
                        lambda: images.build_stack_image(engine, plan, progress=lambda _t: None),
                    ).image.id
                )
            for image_id in dict.fromkeys(built):
                dockercases.remove_image(engine, image_id)
            dockercases.remove_image(
                engine,
                images.build_cache_tag(stack, images.read_lock(lock.directory, stack).sha256),
            )  # the kept install stage
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
