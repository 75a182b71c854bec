"""The lock directory envs/locks/<stack>/: its file names, its typed metadata, reading it back.

The one owner of that folder: `locking` writes through it, `export` and `images` read through it.
A lock is trusted only after `verify` checked it against its metadata and the stack that asks for
it: the stack id, the backend's lock file (a stray file of the other backend is ignored), the
sha256 of the lock file's bytes recorded when it was made, and its content (the framework build
and, for conda-lock, Python). A lock that fails any of these is a `DataError`, never "unchanged",
never "pinned", never built.

The swap of a new lock into place holds an `fcntl` lock on the locks folder, so two writers that
finish together take turns; temporary folders of processes that are gone are removed at the next
lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from gpuenv.errors import DataError
from gpuenv.stack import Stack
from validate.reading import InputRefused, load_json_input, read_text_input, refusal_line
from validate.writing import replace_dir

#: A lock file's text: conda-lock.yml for a full CUDA stack is a few MiB; far more is no lock.
MAX_LOCK_TEXT_BYTES = 64 * 1024 * 1024

METADATA_FILE = "stack.json"
SPEC_FILE = "environment.yml"
#: The file each backend writes; only the one the metadata names is ever read.
CONDA_LOCK_FILE = "conda-lock.yml"
UV_LOCK_FILE = "requirements.lock.txt"
LOCK_FILES = {"conda-lock": CONDA_LOCK_FILE, "uv": UV_LOCK_FILE}
#: Bump when the lock directory layout or the hashed inputs change: old locks are then relocked.
#: 2: metadata records the lock file's sha256 and the team file's.
LOCK_FORMAT = 2
RELOCK = "relock with `invoke lock --force` (same stack options)"
_TEMP = re.compile(r"^\.(?P<stack>.+)\.(?P<pid>\d+)\.[^.]+\.tmp$")
_OLD = re.compile(r"^\.(?P<stack>.+)\.old-(?P<pid>\d+)$")


class OlderLockFormat(DataError):
    """The lock was made by a gpuenv whose lock format differs: `invoke lock` simply relocks it."""


@dataclass(frozen=True)
class LockedPackage:
    """One entry of a lock, whichever tool wrote it."""

    name: str
    version: str
    manager: str  # "conda" or "pip"
    platform: str
    build: str = ""
    #: The sha256 hashes a uv lock allows for this pin (every file of the release), for the
    #: wheelhouse check.
    hashes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LockMetadata:
    """stack.json: what a lock was made for and from, and the hash of the lock file it vouches
    for."""

    stack: Stack
    backend: str
    input_hash: str
    lock_sha256: str
    platforms: tuple[str, ...]
    source: str
    lock_format: int = LOCK_FORMAT
    tool_versions: dict[str, str] = field(default_factory=dict)
    extra_index_urls: tuple[str, ...] = ()
    wheelhouse: str | None = None
    #: The team file merged into the spec (None: none, or a received --file was locked) and its
    #: sha256.
    team_file: str | None = None
    team_file_sha256: str | None = None
    #: The received environment.yml locked instead of the rendered spec (`invoke lock --file`).
    env_file: str | None = None
    #: When it was locked (epoch seconds): an image built from the lock takes its date from here
    #: (SOURCE_DATE_EPOCH, org.opencontainers.image.created), never from the build. None: older
    #: locks.
    locked_at: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.stack.to_dict(),
            "backend": self.backend,
            "input_hash": self.input_hash,
            "lock_sha256": self.lock_sha256,
            "platforms": list(self.platforms),
            "source": self.source,
            "lock_format": self.lock_format,
            "tool_versions": dict(self.tool_versions),
            "extra_index_urls": list(self.extra_index_urls),
            "wheelhouse": self.wheelhouse,
            "team_file": self.team_file,
            "team_file_sha256": self.team_file_sha256,
            "env_file": self.env_file,
            "locked_at": self.locked_at,
        }

    @classmethod
    def from_dict(cls, data: Any, where: Path) -> "LockMetadata":
        """Parse stack.json; any wrong shape is one DataError line naming the file and the key."""
        if not isinstance(data, dict):
            raise DataError(f"{where}: not a JSON object", fix=RELOCK)
        if not isinstance(data.get("lock_format"), int) or isinstance(
            data.get("lock_format"), bool
        ):
            raise DataError(f"{where}: no lock_format: not a gpuenv lock's metadata", fix=RELOCK)
        if data.get("lock_format") != LOCK_FORMAT:
            raise OlderLockFormat(
                f"{where}: made by another gpuenv (lock format {data.get('lock_format')!r}, this "
                f"one reads {LOCK_FORMAT})",
                fix=RELOCK,
            )
        for key in ("backend", "input_hash", "lock_sha256", "source", "stack_id"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise DataError(f"{where}: {key!r} is missing or not a string", fix=RELOCK)
        if data["backend"] not in LOCK_FILES:
            raise DataError(f"{where}: unknown backend {data['backend']!r}", fix=RELOCK)
        platforms = data.get("platforms")
        if (
            not isinstance(platforms, list)
            or not platforms
            or not all(isinstance(p, str) for p in platforms)
        ):
            raise DataError(f"{where}: 'platforms' is not a list of platforms", fix=RELOCK)
        try:
            stack = Stack.from_dict(data)
        except TypeError as err:
            raise DataError(
                f"{where}: the stack record is incomplete ({err})", fix=RELOCK
            ) from None
        if stack.stack_id != data["stack_id"]:
            raise DataError(
                f"{where}: stack_id {data['stack_id']!r} does not match its own fields "
                f"({stack.stack_id})",
                fix=RELOCK,
            )
        return cls(
            stack=stack,
            backend=data["backend"],
            input_hash=data["input_hash"],
            lock_sha256=data["lock_sha256"],
            platforms=tuple(platforms),
            source=data["source"],
            lock_format=data["lock_format"],
            tool_versions=dict(data.get("tool_versions") or {}),
            extra_index_urls=tuple(data.get("extra_index_urls") or ()),
            wheelhouse=data.get("wheelhouse"),
            team_file=data.get("team_file"),
            team_file_sha256=data.get("team_file_sha256"),
            env_file=data.get("env_file"),
            locked_at=data["locked_at"]
            if isinstance(data.get("locked_at"), int)
            and not isinstance(data.get("locked_at"), bool)
            and data["locked_at"] >= 0
            else None,
        )


@dataclass(frozen=True)
class Lock:
    """A verified lock: the file the image installs, its identity, and what vouches for it."""

    directory: Path
    path: Path
    backend: str
    sha256: str
    metadata: LockMetadata
    packages: tuple[LockedPackage, ...]


def lock_file_name(backend: str) -> str:
    return LOCK_FILES[backend]


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB pieces (a locked conda package can be gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_metadata(directory: Path) -> LockMetadata | None:
    """The metadata of the lock in `directory`, or None when no lock was ever written there."""
    path = Path(directory) / METADATA_FILE
    if not path.exists() and not path.is_symlink():
        return None
    # a lock comes from the team's repository: read bounded, like every input someone else wrote
    try:
        data = load_json_input(read_text_input(path, MAX_LOCK_TEXT_BYTES), max_depth=16)
    except InputRefused as err:
        raise DataError(refusal_line(path, err), fix=RELOCK) from None
    return LockMetadata.from_dict(data, path)


def write_metadata(directory: Path, metadata: LockMetadata) -> None:
    (Path(directory) / METADATA_FILE).write_text(
        json.dumps(metadata.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


def has_lock(directory: Path) -> bool:
    """Whether anything that claims to be a lock is in `directory` (verify tells whether it is
    sound)."""
    return (Path(directory) / METADATA_FILE).exists() or any(
        (Path(directory) / n).exists() for n in LOCK_FILES.values()
    )


def verify(directory: Path, stack: Stack | None = None) -> Lock:
    """The lock in `directory`, checked against its metadata and (when given) the stack using it.

    Raises DataError naming the first mismatch: no lock, metadata of another stack, the lock
    file missing, changed since it was locked (sha256), or holding another framework build.
    """
    directory = Path(directory)
    meta = read_metadata(directory)
    if meta is None:
        found = [n for n in LOCK_FILES.values() if (directory / n).exists()]
        if found:
            raise DataError(
                f"{directory / found[0]} has no {METADATA_FILE} beside it, so nothing vouches "
                "for it",
                fix=RELOCK,
            )
        raise DataError(
            f"no lock in {directory}",
            fix="run invoke lock for this stack (or invoke build, which locks when the lock is "
            "missing)",
        )
    where = directory / METADATA_FILE
    if stack is not None and meta.stack.stack_id != stack.stack_id:
        raise DataError(
            f"{where} is the lock of {meta.stack.stack_id}, not of {stack.stack_id}", fix=RELOCK
        )
    path = directory / lock_file_name(meta.backend)
    if not path.is_file():
        raise DataError(
            f"{path} is missing (the metadata names the {meta.backend} lock)", fix=RELOCK
        )
    sha = file_sha256(path)
    if sha != meta.lock_sha256:
        raise DataError(
            f"{path} changed since it was locked (sha256 {sha[:12]}, the metadata says "
            f"{meta.lock_sha256[:12]})",
            fix=RELOCK,
        )
    packages = tuple(read_lock_file(path, meta.backend, meta.platforms))
    problem = content_problem(stack or meta.stack, packages, meta.platforms, meta.backend)
    if problem:
        raise DataError(
            f"{path} does not hold the stack {(stack or meta.stack).stack_id}: {problem}",
            fix=RELOCK,
        )
    return Lock(
        directory=directory,
        path=path,
        backend=meta.backend,
        sha256=sha,
        metadata=meta,
        packages=packages,
    )


def read_lock_file(path: Path, backend: str, platforms: Iterable[str]) -> list[LockedPackage]:
    if backend == "uv":
        platforms = list(platforms)
        packages = read_requirements_lock(path, platforms[0])
        for platform in platforms[1:]:
            extra = path.with_name(f"requirements.{platform}.lock.txt")
            if not extra.is_file():
                raise DataError(f"{extra} is missing (the metadata lists {platform})", fix=RELOCK)
            packages += read_requirements_lock(extra, platform)
        return packages
    return read_conda_lock(path)


def content_problem(
    stack: Stack, packages: Iterable[LockedPackage], platforms: Iterable[str], backend: str
) -> str | None:
    """Why a lock's entries are not the stack's (framework build, Python), or None when they are."""
    packages = list(packages)
    req = Requirement(stack.pip_requirement)
    framework = canonicalize_name(req.name)
    for platform in platforms:
        here = [p for p in packages if p.platform == platform]
        build = next((p for p in here if canonicalize_name(p.name) == framework), None)
        if build is None:
            return f"{framework} is not in it for {platform}"
        try:
            ok = req.specifier.contains(Version(build.version), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            return (
                f"it has {framework} {build.version}, the stack wants {req.specifier} ({platform})"
            )
        if backend == "conda-lock":
            python = next((p for p in here if p.name == "python" and p.manager == "conda"), None)
            if python is None:
                return f"python is not in it for {platform}"
            if ".".join(python.version.split(".")[:2]) != stack.python:
                return (
                    f"it has Python {python.version}, the stack wants {stack.python} ({platform})"
                )
    return None


def read_requirements_lock(path: Path, platform: str = "linux-64") -> list[LockedPackage]:
    """The pins of a uv lock; a pin without a hash is an error (the build installs with
    --require-hashes)."""
    packages: list[LockedPackage] = []
    entry: list[str] = []

    def flush() -> None:
        if not entry:
            return
        text = " ".join(entry)
        head = text.split()[0]
        if "--hash=sha256:" not in text:
            raise DataError(f"{path}: {head} has no hash", fix=RELOCK)
        name, _, version = head.partition("==")
        hashes = tuple(re.findall(r"--hash=sha256:([0-9a-f]{64})", text))
        packages.append(
            LockedPackage(
                name=canonicalize_name(name),
                version=version,
                manager="pip",
                platform=platform,
                hashes=hashes,
            )
        )
        entry.clear()

    for raw in _text(path).splitlines():
        line = (
            raw.split("#", 1)[0].rstrip() if not raw.lstrip().startswith("--hash") else raw.rstrip()
        )
        if not line.strip() or line.lstrip().startswith(
            ("--index-url", "--extra-index-url", "--find-links")
        ):
            continue
        if not raw.startswith((" ", "\t")):
            flush()
        entry.append(line.rstrip("\\").strip())
    flush()
    return packages


#: A lock's YAML: nesting (conda-lock writes 4 levels) and values, aliases followed (a lock of a
#: thousand packages has some 50,000): past them it is refused before anything is built.
MAX_LOCK_DEPTH = 32
MAX_LOCK_VALUES = 1_000_000

_YamlLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_shape_problem(
    text: str, *, max_depth: int = MAX_LOCK_DEPTH, max_values: int = MAX_LOCK_VALUES
) -> str | None:
    """What makes YAML text unsafe to load, in a few words, or None: nesting past `max_depth`
    (the composer recurses: 50,000 levels is a RecursionError or a crash), or more than
    `max_values` values once every alias is expanded (a 400-byte alias bomb is billions).
    Read from the event stream, which builds nothing and does not recurse; a syntax error is
    left to the loader, which names its line."""
    sizes: dict[str, int] = {}  # anchor -> the values it expands to
    # per open collection: (its anchor, the values counted before it)
    opened: list[tuple[str | None, int]] = []
    total = 0
    try:
        for event in yaml.parse(text, Loader=_YamlLoader):
            if isinstance(event, yaml.AliasEvent):
                total += sizes.get(event.anchor, 1)
            elif isinstance(event, yaml.ScalarEvent):
                total += 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                total += 1
                opened.append((event.anchor, total))
                if len(opened) > max_depth:
                    return f"nested more than {max_depth} levels deep"
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                anchor, before = opened.pop()
                if anchor:
                    sizes[anchor] = total - before + 1
            if total > max_values:
                return f"expands to more than {max_values:,} values (YAML aliases followed)"
    except yaml.YAMLError as err:
        # libyaml's own bound (PyYAML >= 6.0.3)
        if "nesting depth" in str(getattr(err, "problem", "") or ""):
            return f"nested more than {max_depth} levels deep"
        return None
    return None


def load_lock_yaml(path: Path, text: str | None = None) -> Any:
    """A lock file's YAML, bounded: read through the bounded reader, its shape checked
    (yaml_shape_problem) before it is loaded; anything else is one DataError naming the file."""
    text = _text(path) if text is None else text
    problem = yaml_shape_problem(text)
    if problem:
        raise DataError(f"{path}: {problem}", fix=RELOCK)
    try:
        return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise DataError(
            f"{path}:{mark.line + 1 if mark else 1}: not valid YAML", fix=RELOCK
        ) from None
    except RecursionError:
        raise DataError(f"{path}: nested too deeply", fix=RELOCK) from None


def read_conda_lock(path: Path, text: str | None = None) -> list[LockedPackage]:
    """The entries of conda-lock's unified lockfile (`text`: the file's, already read); an entry
    without a hash, or one package listed twice for a platform, is an error."""
    try:
        data = load_lock_yaml(path, text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise DataError(
            f"{path}:{mark.line + 1 if mark else 1}: not valid YAML", fix=RELOCK
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("package", []), list):
        raise DataError(f"{path}: not a conda-lock lockfile (no 'package' list)", fix=RELOCK)
    packages = []
    seen: set[tuple[str, str, str]] = set()
    for item in data.get("package", []):
        if not isinstance(item, dict) or not all(
            k in item for k in ("name", "version", "manager", "platform")
        ):
            raise DataError(
                f"{path}: an entry lacks name, version, manager or platform", fix=RELOCK
            )
        hashes = item.get("hash") or {}
        if not (hashes.get("sha256") or hashes.get("md5")):
            raise DataError(f"{path}: {item.get('name')} has no hash", fix=RELOCK)
        key = (str(item["manager"]), str(item["platform"]), canonicalize_name(str(item["name"])))
        if key in seen:  # a bad merge: which of the two would be installed is anyone's guess
            what = f"{item['manager']} package {item['name']}"
            raise DataError(
                f"{path}: {what} is listed twice for {item['platform']}",
                fix="keep one entry per package (resolve the merge), or relock",
            )
        seen.add(key)
        packages.append(
            LockedPackage(
                name=str(item["name"]),
                version=str(item["version"]),
                manager=str(item["manager"]),
                platform=str(item["platform"]),
                build=str(item.get("build") or ""),
            )
        )
    return packages


def lock_text(path: Path) -> str:
    """A lock file's text through the bounded reader; DataError naming the file otherwise."""
    return _text(path)


def _text(path: Path) -> str:
    """A lock file's text through the bounded reader (a regular file, a known encoding, a size)."""
    try:
        return read_text_input(path, MAX_LOCK_TEXT_BYTES)
    except InputRefused as err:
        raise DataError(refusal_line(path, err), fix=RELOCK) from None
    except OSError as err:
        raise DataError(
            f"{path}: cannot be read ({err.strerror or type(err).__name__})", fix=RELOCK
        ) from None


# ---------------------------------------------------------------- writing: temp folders and the
# swap


def new_work_dir(root: Path, stack_id: str) -> Path:
    """A private folder beside the lock directory; its name carries this process's id for
    cleanup."""
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{stack_id}.{os.getpid()}.", suffix=".tmp", dir=root))
    work.chmod(0o755)  # mkdtemp makes it private; a lock directory is shared with the team
    return work


def clean_stale(root: Path) -> list[Path]:
    """Remove temp and old folders left by lock processes that are gone (killed, SIGKILL, power
    loss).

    A folder is stale when the process named in it no longer runs, or runs but started after the
    folder was last changed (its id was reused).
    """
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        match = _TEMP.match(entry.name) or _OLD.match(entry.name)
        if not match or not entry.is_dir() or entry.is_symlink():
            continue
        pid = int(match.group("pid"))
        if pid == os.getpid() or _alive_since_before(pid, entry.stat().st_mtime):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _alive_since_before(pid: int, when: float) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    started = _process_start(pid)
    return started is None or started <= when + 1


def _process_start(pid: int) -> float | None:
    """When `pid` started (epoch seconds), from /proc; None where /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def replace_directory(new: Path, target: Path) -> None:
    """Put `new` in place of `target`: the old lock stays whole until the new one is complete.

    Two writers that finish together take turns (validate.writing.replace_dir): neither renames
    the other's half-swapped folder away, and the loser's lock simply becomes the newer one.
    """
    replace_dir(new, target)
