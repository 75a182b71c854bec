"""The conda engine: py-rattler solves environments and installs conda packages. Nothing else in
gpuenv imports rattler.

Replaces the conda-lock program (which downloads a conda installer binary at run time) and the
installer binary images used to download: py-rattler is the solver and installer under pixi, on
PyPI, with no binary download.

- `solve`: the conda part of a spec for one platform, against the channels (through their
  mirrors), with the stack's virtual packages (`__cuda`, `__glibc`, `__linux`, `__unix`), so a
  CUDA build the stack cannot run is never chosen.
- `fetch_verified`: each locked package downloaded (file://, http(s)://) and checked against the
  lock's sha256 before anything is linked.
- `link`: the verified packages linked into a prefix folder, their hard-coded prefix written as
  the final path (rattler's alternative target prefix), so a prefix can be built beside its
  place, or on the host for an image.

Mirrors: a lock names the canonical channel URLs (https://conda.anaconda.org/conda-forge/...);
`mirrors` maps such a channel URL to another (a file:// folder or an http server of the same
layout), used for reading repodata and downloading packages. The lock stays the same.

py-rattler 0.26 to 0.28 can crash at interpreter exit after its work is done (PyGILState_Release,
exit 139 or 134, in some runs). So the rattler calls run in a child Python process that writes its
answer to a file and leaves with os._exit (no interpreter teardown); the answer file, not the exit
code, says whether the work was done. Users never see that crash, and it cannot turn a good lock
or install into a failure. That child imports this module for every solve and link: what only the
parent needs (gpuenv.envs.lockdir, urllib.request: a third of a child's start) is imported where
it is used (tests/envs/test_rattler_child.py).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from gpuenv.errors import BadInput, DataError, ToolError
from gpuenv.progress import Say
from validate.reading import InputRefused, file_kind, input_blocks
from validate.text import safe_url

DEFAULT_CHANNEL_ALIAS = "https://conda.anaconda.org"
#: A link that takes longer than this is cut off (the child is killed): the watchdog.
CHILD_TIMEOUT_S = 1800
#: A solve that takes longer than this is cut off (the child is killed): the watchdog behind
#: REQUEST_TIMEOUT_S, for what rattler's client does not time (a file:// channel's reads).
SOLVE_TIMEOUT_S = 900
#: Any one request rattler makes for repodata, from connecting to its last byte (rattler's
#: client `timeout`): a server that accepts and never answers, or trickles, is cut off by it.
REQUEST_TIMEOUT_S = 120
#: The solve child's memory (RLIMIT_DATA) and the largest file it may write (RLIMIT_FSIZE, a
#: cached repodata.json): an endless repodata.json ends there, not in a full disk or memory.
SOLVE_MEMORY_BYTES = 8 << 30
MAX_REPODATA_BYTES = 4 << 30
#: A package download that receives less than STALL_BYTES in DOWNLOAD_STALL_S seconds has
#: stalled (a server that never answers, or one that trickles a byte every few seconds).
DOWNLOAD_STALL_S = 60
STALL_BYTES = 64 * 1024
#: The largest package downloaded (conda-forge's largest CUDA packages are under 2 GiB): an
#: endless answer, or a locked URL naming /dev/zero, stops here, before the disk fills.
MAX_PACKAGE_BYTES = 4 << 30


@dataclass(frozen=True)
class CondaPackage:
    """One solved conda package, as the lock records it."""

    name: str
    version: str
    build: str
    build_number: int
    subdir: str
    url: str
    sha256: str
    md5: str
    depends: tuple[str, ...]
    channel: str

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


# ---------------------------------------------------------------- channels and mirrors (pure)


def channel_url(channel: str, alias: str = DEFAULT_CHANNEL_ALIAS) -> str:
    """A channel name (conda-forge) or URL as its base URL, without a trailing slash."""
    channel = channel.strip()
    if "://" in channel:
        return channel.rstrip("/")
    return f"{alias.rstrip('/')}/{channel.strip('/')}"


def check_mirrors(mirrors: Mapping[str, str], option: str = "conda_mirrors") -> dict[str, str]:
    """Canonical channel URL -> mirror URL; a value that is not a URL is BadInput naming it."""
    checked: dict[str, str] = {}
    for channel, mirror in mirrors.items():
        if not isinstance(mirror, str) or not mirror.startswith(("file://", "http://", "https://")):
            raise BadInput(
                f"{option}: the mirror {mirror!r} of {channel} is not a URL",
                fix="give a file:///path or http(s):// URL of a folder laid out as the channel "
                "(noarch/, linux-64/)",
            )
        checked[channel_url(channel)] = mirror.rstrip("/")
    return checked


def mirrored(url: str, mirrors: Mapping[str, str]) -> str:
    """`url` with its channel part replaced by the channel's mirror, when one is set."""
    for channel, mirror in mirrors.items():
        if url == channel or url.startswith(channel + "/"):
            return mirror + url[len(channel) :]
    return url


def unmirrored(url: str, mirrors: Mapping[str, str]) -> str:
    """The canonical URL of a package URL read through a mirror (what the lock records)."""
    for channel, mirror in mirrors.items():
        if url == mirror or url.startswith(mirror + "/"):
            return channel + url[len(mirror) :]
    return url


def virtual_packages(*, cuda: str | None, glibc: str, arch: str) -> tuple[str, ...]:
    """The virtual packages of the machines a stack runs on, as name=version[=build] specs.

    `cuda` None for a CPU stack: no `__cuda`, so a package that needs a GPU is not chosen.
    """
    found = ["__unix=0=0", "__linux=5.10=0", f"__glibc={glibc}=0", f"__archspec=1={arch}"]
    if cuda:
        found.append(f"__cuda={cuda}=0")
    return tuple(found)


# ---------------------------------------------------------------- solving


def solve(
    *,
    channels: Sequence[str],
    specs: Sequence[str],
    platform: str,
    virtual: Sequence[str],
    mirrors: Mapping[str, str] | None = None,
    cache_dir: Path | None = None,
) -> list[CondaPackage]:
    """The packages that satisfy `specs` on `platform` from `channels` (the solver prefers the
    highest versions and build numbers), sorted by name.

    An unknown package, a conflict or an unreachable channel is a ToolError naming it and the
    channels asked.
    """
    mirrors = dict(mirrors or {})
    urls = [channel_url(c) for c in channels]
    request = {
        "channels": [mirrored(u, mirrors) for u in urls],
        "specs": list(specs),
        "platform": platform,
        "virtual": list(virtual),
        "cache_dir": str(cache_dir) if cache_dir else None,
        "timeout_s": REQUEST_TIMEOUT_S,
        "limits": {"data": SOLVE_MEMORY_BYTES, "fsize": MAX_REPODATA_BYTES},
    }
    through = ", ".join(sorted(set(map(safe_url, mirrors.values()))))
    where = ", ".join(map(safe_url, urls)) + (f" (through mirrors {through})" if mirrors else "")
    for url in request["channels"]:
        problem = local_repodata_problem(url, platform)
        if problem:
            raise ToolError(
                f"cannot read the conda channel {where}: {problem}",
                fix="make the channel folder hold regular repodata files",
            )
    answer = _run_child("solve", request, timeout_s=SOLVE_TIMEOUT_S)
    if "error" in answer:
        kind, text = answer["error"]
        if kind == "fetch":
            fix = (
                "check the mirrors (invoke.yaml gpuenv.conda_mirrors): are they reachable from "
                "here and laid out as the channels?"
                if mirrors
                else "check the channel URL and the network, or set a mirror of it (invoke.yaml "
                "gpuenv.conda_mirrors)"
            )
            raise ToolError(f"cannot read the conda channel {where}: {text}", fix=fix)
        if kind == "spec":
            raise BadInput(
                f"a conda spec of the environment cannot be read: {text}",
                fix="write conda specs as name, name=1.2 or name>=1.2",
            )
        raise ToolError(
            f"the conda solve for {platform} failed against {where}: {text}",
            fix="check the package names and pins of the environment's conda part (each must "
            "exist in those channels)",
        )
    return [
        CondaPackage(
            name=p["name"],
            version=p["version"],
            build=p["build"],
            build_number=p["build_number"],
            subdir=p["subdir"],
            url=unmirrored(p["url"], mirrors),
            sha256=p["sha256"],
            md5=p["md5"],
            depends=tuple(p["depends"]),
            channel=unmirrored(p["channel"], mirrors),
        )
        for p in answer["packages"]
    ]


#: The repodata files rattler may read from a channel's subdir.
REPODATA_FILES = (
    "repodata.json",
    "repodata.json.zst",
    "repodata.json.bz2",
    "repodata_shards.msgpack.zst",
)


def local_repodata_problem(url: str, platform: str) -> str | None:
    """What makes a file:// channel unreadable in bounded time and space, in a few words naming
    the file: a repodata file that is a FIFO (rattler's read would wait forever), a device
    (/dev/zero never ends) or larger than MAX_REPODATA_BYTES. None for other URLs: rattler's
    client timeout and the child's limits bound those."""
    if not url.startswith("file://"):
        return None
    from urllib.request import url2pathname

    root = Path(url2pathname(urllib.parse.urlparse(url).path))
    for subdir in (platform, "noarch"):
        for name in REPODATA_FILES:
            path = root / subdir / name
            try:
                info = path.stat()
            except OSError:
                continue  # absent: rattler tries the next form, or says the channel has none
            if not stat.S_ISREG(info.st_mode):
                return f"{path} is {file_kind(info.st_mode)}, not a regular file"
            if info.st_size > MAX_REPODATA_BYTES:
                limit = MAX_REPODATA_BYTES >> 30
                return f"{path} is {info.st_size:,} bytes, over the {limit} GiB limit"
    return None


def _set_limits(limits: Mapping[str, int]) -> None:
    """Bound this (child) process: memory (RLIMIT_DATA) and the size of any file it writes
    (RLIMIT_FSIZE; SIGXFSZ ignored, so the write fails with EFBIG and rattler reports it)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    for name, which in (("data", resource.RLIMIT_DATA), ("fsize", resource.RLIMIT_FSIZE)):
        if name in limits:
            _soft, hard = resource.getrlimit(which)
            value = limits[name] if hard == resource.RLIM_INFINITY else min(limits[name], hard)
            resource.setrlimit(which, (value, hard))


def _child_solve(request: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    import rattler
    from rattler import exceptions as rx
    from rattler.networking.client import Client

    _set_limits(request.get("limits") or {})

    try:
        virtual = [_generic_virtual(text) for text in request["virtual"]]
        specs = [rattler.MatchSpec(s) for s in request["specs"]]
    except (rx.InvalidMatchSpecError, rx.InvalidVersionError, rx.InvalidPackageNameError) as err:
        return {"error": ["spec", _one_line(err)]}
    client = Client.default_client(timeout=int(request["timeout_s"]))  # each request, whole
    cache = {"cache_dir": request["cache_dir"]} if request["cache_dir"] else {}
    gateway = rattler.Gateway(client=client, **cache)
    try:
        records = asyncio.run(
            rattler.solve(
                sources=[rattler.Channel(url) for url in request["channels"]],
                specs=specs,
                gateway=gateway,
                platforms=[request["platform"], "noarch"],
                virtual_packages=virtual,
            )
        )
    except (rx.FetchRepoDataError, rx.GatewayError) as err:
        return {"error": ["fetch", _one_line(err)]}
    except rx.SolverError as err:
        return {"error": ["solve", _one_line(err)]}
    except MemoryError:
        limit = SOLVE_MEMORY_BYTES >> 30
        return {"error": ["fetch", f"the repodata needs more than {limit} GiB of memory"]}
    packages = []
    for record in records:
        packages.append(
            {
                "name": record.name.normalized,
                "version": str(record.version),
                "build": str(record.build),
                "build_number": record.build_number,
                "subdir": str(record.subdir),
                "url": str(record.url),
                "sha256": record.sha256.hex() if record.sha256 else "",
                "md5": record.md5.hex() if record.md5 else "",
                "depends": list(record.depends),
                "channel": str(record.channel or "").rstrip("/"),
            }
        )
    packages.sort(key=lambda p: p["name"])
    return {"packages": packages}


def _generic_virtual(text: str) -> Any:
    import rattler

    name, version, build = (text.split("=") + ["0", "0"])[:3]
    return rattler.GenericVirtualPackage(
        rattler.PackageName(name), rattler.Version(version), rattler.BuildString(build)
    )


# ---------------------------------------------------------------- installing


def fetch_verified(
    packages: Iterable[CondaPackage],
    into: Path,
    *,
    mirrors: Mapping[str, str] | None = None,
    say: Say | None = None,
) -> list[Path]:
    """Each package downloaded into `into` (through its mirror) and checked against its sha256.

    A package whose bytes differ from the lock is refused in one line naming it and where it came
    from; nothing is linked before every package has passed.
    """
    from gpuenv.envs import lockdir

    mirrors = dict(mirrors or {})
    into.mkdir(parents=True, exist_ok=True)
    paths = []
    for package in packages:
        url = mirrored(package.url, mirrors)
        path = into / package.file_name
        if say:
            say(f"fetching {package.name} {package.version} ({package.build}) from {safe_url(url)}")
        _download(url, path, package.name, mirror=url != package.url)
        got = lockdir.file_sha256(path)
        if got != package.sha256:
            path.unlink(missing_ok=True)
            raise DataError(
                f"{package.name} {package.version} from {safe_url(url)} has sha256 {got}, the "
                f"lock says {package.sha256}",
                fix="the package on the channel or mirror is not the one locked: check the "
                "mirror, or relock (invoke lock --force)",
            )
        paths.append(path)
    return paths


def link(
    archives: Sequence[Path],
    prefix: Path,
    *,
    final_prefix: Path,
    platform: str,
    say: Say | None = None,
) -> None:
    """Link verified package archives into `prefix`, writing `final_prefix` into their files.

    Entry points get `final_prefix/bin/python` as interpreter; compiled-in prefixes are
    rewritten to `final_prefix`. Link scripts are not run (they may not work off-target).
    """
    if say:
        say(f"linking {len(archives)} conda packages into {prefix} (for {final_prefix})")
    answer = _run_child(
        "link",
        {
            "archives": [str(a) for a in archives],
            "prefix": str(prefix),
            "final_prefix": str(final_prefix),
            "platform": platform,
            "cache_dir": str(Path(archives[0]).parent / ".rattler-cache") if archives else None,
        },
    )
    if "error" in answer:
        raise ToolError(
            f"the conda packages could not be linked into {prefix}: {answer['error'][1]}",
            fix="check the free space and permissions there; the previous prefix is unchanged",
        )


def _child_link(request: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    import rattler

    async def read_records() -> list[Any]:
        return [
            await rattler.RepoDataRecord.from_package_archive(archive)
            for archive in request["archives"]
        ]

    try:
        records = asyncio.run(read_records())
        asyncio.run(
            rattler.install(
                records,
                target_prefix=request["prefix"],
                cache_dir=request["cache_dir"],
                platform=rattler.Platform(request["platform"]),
                execute_link_scripts=False,
                show_progress=False,
                alternative_target_prefix=request["final_prefix"],
            )
        )
    except Exception as err:  # rattler's InstallerError, LinkError, IoError, TransactionError
        return {"error": [type(err).__name__, _one_line(err)]}
    return {"linked": len(records)}


def _download(url: str, path: Path, name: str, *, mirror: bool = False) -> None:
    """`url` into `path`, bounded in size (MAX_PACKAGE_BYTES) and time (a stall: less than
    STALL_BYTES in DOWNLOAD_STALL_S). A file:// URL must name a regular file: a FIFO would
    hang the read, /dev/zero never ends. Failures are one ToolError naming the server, with the
    advice that fits it (download_fix)."""
    from urllib.error import URLError

    tmp = path.with_name(path.name + ".part")
    shown = safe_url(url)
    try:
        with open(tmp, "wb") as out:
            for chunk in _bounded_blocks(url):
                out.write(chunk)
        os.replace(tmp, path)
    except (URLError, OSError, ValueError, InputRefused) as err:
        tmp.unlink(missing_ok=True)
        reason = getattr(err, "reason", None) or getattr(err, "strerror", None) or err
        raise ToolError(
            f"cannot download {name} from {shown} ({reason})", fix=download_fix(url, mirror)
        ) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _bounded_blocks(url: str) -> Iterator[bytes]:
    """The body of `url` in blocks, never more than MAX_PACKAGE_BYTES, never stalled."""
    from urllib.request import url2pathname, urlopen

    if url.lower().startswith("file:"):  # urllib would open a FIFO or a device as a file
        path = url2pathname(urllib.parse.urlparse(url).path)
        yield from input_blocks(path, MAX_PACKAGE_BYTES)
        return
    host = urllib.parse.urlparse(url).hostname or url
    with urlopen(url, timeout=DOWNLOAD_STALL_S) as response:  # each socket wait
        total, mark, since = 0, 0, time.monotonic()
        while True:
            # read1: what one receive brought (read(n) would wait for n bytes of a trickle)
            chunk = (
                response.read1(1 << 20) if hasattr(response, "read1") else response.read(1 << 16)
            )
            if not chunk:
                return
            total += len(chunk)
            if total > MAX_PACKAGE_BYTES:
                limit = MAX_PACKAGE_BYTES >> 30
                raise ValueError(f"{host} sent more than {limit} GiB, the most a package may be")
            now = time.monotonic()
            if total - mark >= STALL_BYTES:
                mark, since = total, now
            elif now - since > DOWNLOAD_STALL_S:
                least = STALL_BYTES >> 10
                raise TimeoutError(f"{host} stalled: less than {least} KiB in {DOWNLOAD_STALL_S} s")
            yield chunk


def download_fix(url: str, mirror: bool) -> str:
    """The advice for a download that failed: a mirror is the team's own copy (setting one is no
    fix when it is the one failing), a file:// folder is no network, a channel is the network."""
    if mirror:
        return (
            "check the mirror (invoke.yaml gpuenv.conda_mirrors): is it reachable from here and "
            "laid out as the channel (noarch/, linux-64/)?"
        )
    if url.startswith("file://"):
        return (
            "check that the channel folder exists and holds the package (a file:// channel "
            "needs no network)"
        )
    return "check the network, or set a mirror of the channel (invoke.yaml gpuenv.conda_mirrors)"


# ---------------------------------------------------------------- the child process


def _run_child(
    action: str, request: dict[str, Any], timeout_s: float = CHILD_TIMEOUT_S
) -> dict[str, Any]:
    """Run one rattler action in a child Python; its answer file is the result (see the module doc).
    Past `timeout_s` the child is killed (the watchdog)."""
    with tempfile.TemporaryDirectory(prefix="gpuenv-rattler-") as tmp:
        inbox, outbox = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        inbox.write_text(json.dumps(request), encoding="utf-8")
        cmd = [sys.executable, "-m", "gpuenv.envs.conda", action, str(inbox), str(outbox)]
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise ToolError(
                f"the conda {action} did not finish within {timeout_s:g} s",
                fix="check the network and the channel, then run it again",
            ) from None
        if not outbox.is_file():
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            raise ToolError(
                f"the conda {action} stopped (exit {done.returncode}) before it finished: "
                f"{lines[-1] if lines else 'no output'}",
                fix="this is a bug in gpuenv or py-rattler; run again with --verbose and report it",
            )
        return json.loads(outbox.read_text(encoding="utf-8"))


def _one_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines)[:600] or type(err).__name__


def _child_main(argv: list[str]) -> None:
    action, inbox, outbox = argv
    request = json.loads(Path(inbox).read_text(encoding="utf-8"))
    answer = _child_solve(request) if action == "solve" else _child_link(request)
    tmp = Path(outbox + ".part")
    tmp.write_text(json.dumps(answer), encoding="utf-8")
    os.replace(tmp, outbox)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: where py-rattler 0.26-0.28 may crash


if __name__ == "__main__":
    _child_main(sys.argv[1:])
