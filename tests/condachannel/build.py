"""A real local conda channel for the tests, built from recipes/ with py-rattler-build and indexed
with py-rattler.

Built once per recipe hash into a cache folder (GPUENV_TEST_CACHE, else ~/.cache/gpuenv-tests), so
a second run reuses it and a fresh CI clone rebuilds it in seconds. Run as a script to build it
and print its path: `python tests/condachannel/build.py`.

Channel layout: CHANNEL/{linux-64,linux-aarch64,noarch}/*.conda with repodata.json. Contents (see
each recipe): python (a stand-in: this machine's CPython repackaged), pip, gpuenv-hello (compiled
C), gpuenv-probe (noarch python with an entry point), gpuenv-accel (cpu, cuda118, cuda124 builds);
in linux-aarch64 only a metadata-only python stand-in (recipes/python-aarch64), so that the noarch
packages solve for an aarch64 lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

RECIPES = Path(__file__).parent / "recipes"
ACCEL_VARIANTS = ("cpu", "cuda118", "cuda124")
#: Seconds one build of the channel may take (a child process, killed at the limit).
BUILD_TIMEOUT_S = 600
#: Bump to rebuild every cached channel (a change of the build itself, not of a recipe).
BUILDER_VERSION = "1"


def cache_root() -> Path:
    base = os.environ.get("GPUENV_TEST_CACHE") or str(Path.home() / ".cache" / "gpuenv-tests")
    return Path(base)


def python_home() -> tuple[Path, str]:
    """(the installation root of this interpreter, its full version): the stand-in Python's
    source."""
    home = Path(sysconfig.get_config_var("prefix") or sys.base_prefix)
    return home, ".".join(map(str, sys.version_info[:3]))


def pip_wheel() -> Path:
    """pip's wheel as this Python carries it: ensurepip's bundled one, or Debian's
    python3-pip-whl."""
    home, _ = python_home()
    bundled = (
        home
        / "lib"
        / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        / "ensurepip"
        / "_bundled"
    )
    found = sorted(bundled.glob("pip-*.whl")) or sorted(
        Path("/usr/share/python-wheels").glob("pip-*.whl")
    )
    if not found:
        raise FileNotFoundError(
            f"no pip wheel on this machine (not in {bundled}, nor /usr/share/python-wheels: "
            "Debian package python3-pip-whl)"
        )
    return found[-1]


def standin_problem() -> str | None:
    """Why this machine cannot build the test channel (an outside cause), or None."""
    if shutil.which("cc") is None:
        return (
            "no C compiler (cc) on this machine: the test channel's compiled package needs one "
            "(Debian package gcc)"
        )
    try:
        pip_wheel()
    except FileNotFoundError as err:
        return str(err)
    return None


#: What scripts/setup.sh (step testtools) writes into the environment it made, having installed
#: the compiler and pip wheel: in that environment their absence is a broken set-up, not a skip.
SETUP_MARKER = "gpuenv-test-tools"


def tools_problem(prefix: Path | None = None) -> tuple[bool, str] | None:
    """(whether the set-up promised the tools, why the channel cannot be built), or None when it
    can. `prefix` is the environment the tests run in (sys.prefix), where setup.sh made .venv."""
    why = standin_problem()
    if why is None:
        return None
    marker = Path(prefix or sys.prefix) / SETUP_MARKER
    if marker.is_file():
        return True, (
            f"{why}; scripts/setup.sh installed it for this environment ({marker}): "
            "rerun GPUENV_SETUP_STEPS=testtools bash scripts/setup.sh"
        )
    return False, f"{why} (scripts/setup.sh, step testtools, installs it)"


def recipes_hash() -> str:
    """What decides the channel's content: the recipes, the stand-in Python and the builder."""
    digest = hashlib.sha256(BUILDER_VERSION.encode())
    for path in sorted(RECIPES.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(RECIPES)).encode() + b"\0" + path.read_bytes())
    home, version = python_home()
    digest.update(f"{home} {version} {pip_wheel().name}".encode())
    return digest.hexdigest()[:16]


def build_channel(root: Path | None = None) -> Path:
    """The channel folder for the current recipes, built (in a temporary sibling, then renamed)
    when it is not in the cache yet."""
    root = root or cache_root()
    channel = root / f"channel-{recipes_hash()}"
    if (channel / "noarch" / "repodata.json").is_file():
        return channel
    root.mkdir(parents=True, exist_ok=True)
    # One builder at a time: the test command's two workers (or two sessions) that both miss the
    # cache would each spend minutes building the same channel; the second waits, then finds it.
    with open(root / ".build.lock", "w") as lock:
        deadline = time.monotonic() + BUILD_TIMEOUT_S + 60
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:  # a build runs BUILD_TIMEOUT_S at most
                    raise RuntimeError(
                        f"another build of the test channel still holds {lock.name}"
                    ) from None
                time.sleep(1)
        if (channel / "noarch" / "repodata.json").is_file():
            return channel
        _build_channel(root, channel)
    return channel


def _build_channel(root: Path, channel: Path) -> None:
    """Build into a temporary sibling of `channel`, then rename it into place."""
    work = Path(tempfile.mkdtemp(prefix=".channel-", dir=root))
    try:
        # In a child process: py-rattler-build and py-rattler may crash at interpreter exit
        # (see gpuenv/envs/conda.py); the channel is judged by its files, not the exit code.
        subprocess.run(
            [sys.executable, __file__, "--into", str(work)], check=False, timeout=BUILD_TIMEOUT_S
        )
        built = all(
            list(work.glob(pattern))
            for pattern in (
                "noarch/repodata.json",
                "linux-64/gpuenv-accel-*.conda",
                "linux-aarch64/python-*.conda",
            )
        )
        if not built:
            raise RuntimeError(
                f"the test channel was not built in {work}; run {__file__} --into DIR to see why"
            )
        try:
            work.rename(channel)
        except OSError:
            if not (channel / "noarch" / "repodata.json").is_file():  # another session won the race
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def standin_wheel(folder: Path, name: str, version: str, arch: str = "x86_64") -> Path:
    """A STAND-IN wheel: a pure-Python package of `name` and `version` with nothing in it but a
    module that says so. Stands for the framework wheel (torch) where installing the real one
    (hundreds of MB) would only test uv's unzip speed. Tagged for `arch` (x86_64 or aarch64), so
    that a lock for that platform picks it and a lock for the other one does not."""
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    tag = f"py3-none-manylinux_2_17_{arch}"
    path = folder / f"{name}-{version}-{tag}.whl"
    files = {
        f"{name}/__init__.py": f"__version__ = {version!r}\nSTANDIN = True\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpuenv-tests\nRoot-Is-Purelib: true\n"
        f"Tag: {tag}\n",
    }
    # Every file with its sha256 and size, as the wheel format requires (installers copy these
    # rows into the installed RECORD, which `invoke verify` checks).
    record = (
        "".join(
            f"{n},sha256={_record_digest(t.encode())},{len(t.encode())}\n" for n, t in files.items()
        )
        + f"{dist}/RECORD,,\n"
    )
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in {**files, f"{dist}/RECORD": record}.items():
            archive.writestr(zipfile.ZipInfo(member, (1980, 1, 1, 0, 0, 0)), text)
    return path


def _record_digest(data: bytes) -> str:
    import base64
    import hashlib

    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """`folder` (a channel) over http on 127.0.0.1 as a channel's server or a mirror would serve it;
    yields its URL and stops the server afterwards."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(
            self, *_args: object
        ) -> None:  # one line per request would bury the test's output
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _build_into(out: Path) -> None:
    import rattler_build

    warnings.simplefilter(
        "ignore", DeprecationWarning
    )  # build_recipes: still the one-call API in 0.73
    from rattler.index import index_fs

    home, version = python_home()
    wheel = pip_wheel()
    os.environ.update(
        {
            "GPUENV_STANDIN_PYTHON": str(home),
            "GPUENV_STANDIN_PYTHON_VERSION": version,
            "GPUENV_STANDIN_PIP_WHEEL": str(wheel),
            "GPUENV_STANDIN_PIP_VERSION": wheel.name.split("-")[1],
        }
    )
    common = dict(
        output_dir=str(out),
        channel=[out.as_uri()],
        test="skip",
        no_include_recipe=True,
        package_format="conda:1",
    )
    for name in ("python", "gpuenv-hello"):
        started = time.monotonic()
        rattler_build.build_recipes([RECIPES / name / "recipe.yaml"], **common)
        print(f"built {name} in {time.monotonic() - started:.1f} s", flush=True)
    rattler_build.build_recipes(
        [RECIPES / "python-aarch64" / "recipe.yaml"], **common, target_platform="linux-aarch64"
    )
    for variant in ACCEL_VARIANTS:
        os.environ["GPUENV_ACCEL_VARIANT"] = variant
        rattler_build.build_recipes([RECIPES / "gpuenv-accel" / "recipe.yaml"], **common)
    for name in ("pip", "gpuenv-probe"):  # noarch python: built against the stand-in python above
        rattler_build.build_recipes([RECIPES / name / "recipe.yaml"], **common)
    for leftover in ("bld", "src_cache", "build_cache"):
        shutil.rmtree(out / leftover, ignore_errors=True)
    import asyncio

    asyncio.run(index_fs(out, write_shards=False, write_zst=False, force=True))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--into":
        _build_into(Path(sys.argv[2]))
        sys.stdout.flush()
        os._exit(0)
    if sys.argv[1:] == ["--check"]:  # scripts/setup.sh (step testtools): can this machine build it?
        problem = standin_problem()
        sys.exit(f"test channel: {problem}" if problem else 0)
    print(build_channel())
