"""Cold lock + install + image of the conda path, gpuenv against the bare engine tools doing the
same work on the same channel, side by side in one run; prints each step, the ratio and the goal.

    .venv/bin/python benchmarks/conda_path_vs_tools.py [--rounds 2] [--base-image IMAGE]

The channel is the test channel (tests/condachannel, read as a file:// mirror of conda-forge),
the stack the CPU one (torch 2.13.0+cpu, a STAND-IN wheel from a local wheelhouse; numpy, pytest
and nvidia-ml-py from PyPI, as the stack asks), the base image the bare Debian one.

gpuenv (every cache empty: rattler's, uv's, gpuenv's staging; the image with --no-cache):
  lock     gpuenv.envs.locking.ensure_lock (py-rattler solve in a child, uv pip compile)
  install  gpuenv.envs.install into a prefix (fetch and check each package, link, uv, bytecode)
  image    gpuenv.images.plan.build_stack_image (the environment for /opt/gpuenv/env read from
           the prefix the install step made, checked against the lock, and sent from there; the
           build, the label build)
the engine tools (their caches empty too):
  lock     rattler.solve of the same specs and virtual packages; uv pip compile of the same pip
           lines with hashes, for the same platform
  install  rattler.install into a prefix; uv pip install --require-hashes --compile-bytecode
  image    one build of `FROM base` + `COPY env/ /opt/env/` from a context of that prefix,
           through the same engine and builder, with --no-cache
With --rounds 2 the second round runs the tools first, so neither side always pays for a cold
page cache. Each step prints its wall time, the CPU time (user + sys) of this process and its
children, and the CPU time of the engine's daemons meanwhile (shared with any other user of the
engine); the totals give the ratio of each. Goal (issue 36): gpuenv within 1.5x of the tools.
It also counts the conda packages gpuenv fetches from the channel in each step: the image's
environment is read from the prefix the install made, so the image step fetches none.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
GOAL = 1.5


def _channel_module():
    spec = importlib.util.spec_from_file_location(
        "condachannel", ROOT / "tests" / "condachannel" / "build.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


#: Conda packages fetched from the channel by gpuenv, per step: (count, bytes). A local file://
#: channel makes a fetch cheap; a real mirror makes each one a download of the package.
FETCHED: dict[str, list[int]] = {}


def count_fetches(step: str) -> None:
    """Count what gpuenv.envs.conda.fetch_verified fetches from now on under `step` (benchmark
    code: the product is not changed)."""
    from gpuenv.envs import conda

    real = getattr(conda.fetch_verified, "__wrapped__", conda.fetch_verified)

    def counting(packages, into, **kwargs):
        paths = real(packages, into, **kwargs)
        seen = FETCHED.setdefault(step, [0, 0])
        seen[0] += len(paths)
        seen[1] += sum(Path(p).stat().st_size for p in paths)
        return paths

    counting.__wrapped__ = real
    conda.fetch_verified = counting


#: CPU seconds (user + sys) by side: this process and its children, and the engine's daemons
#: (dockerd, containerd and what they waited for). On a shared machine wall time is noise; this
#: process's CPU time is not (the engine's is shared with whatever else uses it meanwhile).
CPU: dict[str, dict[str, float]] = {}


def own_cpu() -> float:
    import resource

    self_, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return self_.ru_utime + self_.ru_stime + children.ru_utime + children.ru_stime


def engine_cpu() -> float:
    """dockerd's and containerd's CPU seconds, with their reaped children (0 when not readable)."""
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_file.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        if name in ("dockerd", "containerd"):
            fields = text[text.rfind(")") + 2 :].split()
            total += sum(int(f) for f in fields[11:15]) / ticks
    return total


def timed(times: dict[str, float], side: str, step: str, action):
    started, cpu, engine = time.monotonic(), own_cpu(), engine_cpu()
    result = action()
    times[step] = time.monotonic() - started
    used = {"own": own_cpu() - cpu, "engine": engine_cpu() - engine}
    for kind, seconds in used.items():
        CPU.setdefault(side, {}).setdefault(kind, 0.0)
        CPU[side][kind] += seconds
    print(
        f"  {side:<7} {step:<8} {times[step]:7.1f} s   cpu {used['own']:6.1f} s"
        f"   engine cpu {used['engine']:6.1f} s",
        flush=True,
    )
    return result


def fresh_caches(tmp: Path) -> None:
    """Every cache of both sides in a new folder: each run is cold."""
    tmp.mkdir(parents=True)
    os.environ.update(
        {
            "GPUENV_LOCKS_DIR": str(tmp / "locks"),
            "XDG_CACHE_HOME": str(tmp / "xdg"),
            "UV_CACHE_DIR": str(tmp / "uv"),
            "GPUENV_CACHE_DIR": str(tmp / "gpuenv-cache"),
        }
    )


def gpuenv_side(tmp, stack, channel, wheels, base, made) -> tuple[dict[str, float], Path]:
    from gpuenv.engine import Engine
    from gpuenv.envs import install as installer
    from gpuenv.envs.locking import ensure_lock
    from gpuenv.images import plan as images

    fresh_caches(tmp)
    team = tmp / "team.yml"
    team.write_text("conda: [gpuenv-probe, gpuenv-hello]\npip: []\n")
    mirrors = {"conda-forge": channel.as_uri()}
    times: dict[str, float] = {}
    lock = timed(
        times,
        "gpuenv",
        "lock",
        lambda: ensure_lock(
            stack, backend="conda-lock", wheelhouse=wheels, team_file=team, mirrors=mirrors
        ),
    )
    plan = installer.plan_install(
        stack, lock.directory, tmp / "prefix", wheelhouse=wheels, mirrors=mirrors
    )
    count_fetches("install")
    timed(
        times,
        "gpuenv",
        "install",
        lambda: installer.install(plan, say=lambda _m: None, output=lambda _m: None),
    )
    count_fetches("image")

    def image() -> str:
        build = images.plan_build(
            stack, lock.directory, base_image=base, wheelhouse=wheels, mirrors=mirrors, nocache=True
        )
        build = dataclasses.replace(build, tags=[f"gpuenv-bench/vs-tools-{os.getpid()}:gpuenv"])
        return images.build_stack_image(Engine.local(), build, progress=lambda _t: None).image.id

    made.append(timed(times, "gpuenv", "image", image))
    return times, lock.directory


def tools_side(tmp, stack, channel, wheels, base, lock_dir, made) -> dict[str, float]:
    """The same work with rattler, uv and one plain build (benchmark code: not the product)."""
    import rattler
    import yaml

    from gpuenv.engine import Engine
    from gpuenv.envs import conda, spec, uv

    fresh_caches(tmp)
    rendered = yaml.safe_load((lock_dir / "environment.yml").read_text(encoding="utf-8"))
    conda_specs = [d for d in rendered["dependencies"] if isinstance(d, str)]
    pip_lines = next(d["pip"] for d in rendered["dependencies"] if isinstance(d, dict))
    glibc = spec.glibc_for(stack)
    virtual = conda.virtual_packages(cuda=None, glibc=glibc, arch="x86_64")
    uv_bin = uv.uv_binary()
    prefix = tmp / "prefix"
    times: dict[str, float] = {}

    def lock() -> list:
        records = asyncio.run(
            rattler.solve(
                sources=[rattler.Channel(channel.as_uri())],
                specs=[rattler.MatchSpec(s) for s in conda_specs],
                gateway=rattler.Gateway(cache_dir=tmp / "rattler"),
                platforms=["linux-64", "noarch"],
                virtual_packages=[
                    rattler.GenericVirtualPackage(
                        rattler.PackageName(v.split("=")[0]),
                        rattler.Version((v.split("=") + ["0"])[1]),
                        rattler.BuildString((v.split("=") + ["0", "0"])[2]),
                    )
                    for v in virtual
                ],
            )
        )
        (tmp / "requirements.in").write_text("".join(f"{line}\n" for line in pip_lines))
        subprocess.run(
            [uv_bin, "pip", "compile", str(tmp / "requirements.in"), "-o", str(tmp / "req.txt")]
            + ["--python-version", stack.python, "--generate-hashes", "--quiet", "--no-config"]
            + ["--python-platform", uv.uv_python_platform("linux-64", glibc)]
            + ["--find-links", str(wheels)],
            check=True,
        )
        return records

    def install(records: list) -> None:
        asyncio.run(
            rattler.install(
                records,
                target_prefix=prefix,
                cache_dir=tmp / "rattler-pkgs",
                execute_link_scripts=False,
                show_progress=False,
            )
        )
        subprocess.run(
            [uv_bin, "pip", "install", "--python", str(prefix / "bin" / "python"), "--quiet"]
            + ["--require-hashes", "--no-deps", "--no-config", "--compile-bytecode"]
            + ["--link-mode", "copy", "--find-links", str(wheels), "-r", str(tmp / "req.txt")],
            check=True,
        )

    def image() -> str:
        context = tempfile.TemporaryFile()
        with tarfile.open(fileobj=context, mode="w") as tar:
            dockerfile = f"FROM {base}\nCOPY env/ /opt/env/\n".encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(dockerfile)
            tar.addfile(info, io.BytesIO(dockerfile))
            tar.add(str(prefix), arcname="env")
        context.seek(0)
        with context:
            return (
                Engine.local()
                .build_image(
                    context,
                    dockerfile="Dockerfile",
                    tags=[f"gpuenv-bench/vs-tools-{os.getpid()}:tools"],
                    buildargs={},
                    nocache=True,
                    progress=lambda _t: None,
                )
                .image.id
            )

    records = timed(times, "tools", "lock", lock)
    timed(times, "tools", "install", lambda: install(records))
    made.append(timed(times, "tools", "image", image))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds (the second: tools first)")
    parser.add_argument("--base-image", default="gpuenv-test-base:bookworm-bare")
    args = parser.parse_args()

    import dockercases

    from gpuenv.compat.resolve import Request, resolve_stack
    from gpuenv.engine import Engine

    stack = resolve_stack(Request(cuda="cpu", framework="torch", torch="2.13.0", python="3.11"))
    channels = _channel_module()
    channel = channels.build_channel()  # cached by its recipes' hash: not timed
    made: list[str] = []
    totals = {"gpuenv": 0.0, "tools": 0.0}
    try:
        with tempfile.TemporaryDirectory(prefix="gpuenv-bench-vs-tools-") as name:
            tmp = Path(name)
            wheels = tmp / "wheels"
            channels.standin_wheel(wheels, "torch", "2.13.0+cpu")
            lock_dir = None
            for round_ in range(args.rounds):
                print(f"round {round_ + 1}", flush=True)
                order = (
                    ("gpuenv", "tools")
                    if round_ % 2 == 0 or lock_dir is None
                    else ("tools", "gpuenv")
                )
                for side in order:
                    where = tmp / f"{side}-{round_}"
                    if side == "gpuenv":
                        times, lock_dir = gpuenv_side(
                            where, stack, channel, wheels, args.base_image, made
                        )
                    else:
                        times = tools_side(
                            where, stack, channel, wheels, args.base_image, lock_dir, made
                        )
                    totals[side] += sum(times.values())
    finally:
        engine = Engine.local()
        for image_id in dict.fromkeys(made):
            labels = engine.image_info(image_id).labels if engine.image_info(image_id) else {}
            dockercases.remove_image(engine, image_id)
            dockercases.remove_build_cache(labels)
    fetched = ", ".join(
        f"{step} {count} ({size / 1e6:.1f} MB)" for step, (count, size) in FETCHED.items()
    )
    print(
        f"conda packages gpuenv fetched from the channel, {args.rounds} round(s): {fetched}"
        " (the tools fetch each once, in their install)",
        flush=True,
    )
    ratio = totals["gpuenv"] / totals["tools"]
    print(
        f"cold lock + install + image, {args.rounds} round(s): gpuenv {totals['gpuenv']:.1f} s, "
        f"the tools {totals['tools']:.1f} s: ratio {ratio:.2f}x (goal: at most {GOAL}x)",
        flush=True,
    )
    own = {side: CPU.get(side, {}).get("own", 0.0) for side in ("gpuenv", "tools")}
    both = {side: own[side] + CPU.get(side, {}).get("engine", 0.0) for side in own}
    print(
        f"cpu (user + sys): gpuenv {own['gpuenv']:.1f} s, the tools {own['tools']:.1f} s: ratio "
        f"{own['gpuenv'] / max(own['tools'], 1e-9):.2f}x; with the engine's daemons: gpuenv "
        f"{both['gpuenv']:.1f} s, the tools {both['tools']:.1f} s: ratio "
        f"{both['gpuenv'] / max(both['tools'], 1e-9):.2f}x",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
