"""A wheel folder for air-gapped servers: the one place that lists it (the resolver reads names
only) and the one place that says whether it holds every wheel of a lock.

A wheelhouse that holds every locked wheel (same name, version, a hash the lock allows, and tags
this Python and architecture can install) lets `install` and `build` ask no index at all
(`--no-index`, and a build without network). When `--offline` is asked and wheels are missing,
they are all named in one line before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from gpuenv.errors import BadInput
from validate.reading import InputRefused, file_kind, input_blocks
from validate.text import safe_text

#: The largest wheel a wheelhouse may hold: the biggest on PyPI (CUDA builds of torch and the
#: nvidia-* libraries) are under 4 GiB; a file past this is not a wheel (or is /dev/zero's kin).
MAX_WHEEL_BYTES = 8 << 30


def wheel_names(folder: str | Path) -> tuple[str, ...]:
    """The .whl file names in `folder`; a missing folder or a file given instead is bad input,
    and so is a .whl that is not a regular file (a folder named x.whl, a FIFO, a link to
    /dev/zero): hashing or copying it would fail or hang later, so it is named now."""
    path = Path(folder).expanduser()
    if not path.exists():
        raise BadInput(
            f"--wheelhouse {folder}: no such folder",
            fix="give the folder that holds the .whl files",
        )
    if not path.is_dir():
        raise BadInput(
            f"--wheelhouse {folder} is a file, not a folder",
            fix="give the folder that holds the .whl files",
        )
    names, odd = [], []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.endswith(".whl"):
                    (names if _is_regular(entry) else odd).append(entry.name)
    except OSError as err:
        raise BadInput(
            f"--wheelhouse {folder}: cannot list it ({err.strerror})", fix="check its permissions"
        ) from None
    if odd:
        kind = _kind(path / sorted(odd)[0])
        raise BadInput(
            f"--wheelhouse {folder}: {safe_text(sorted(odd)[0], limit=200)} is {kind}, not a "
            "wheel file" + (f" (and {len(odd) - 1} more such)" if len(odd) > 1 else ""),
            fix="remove it from the wheelhouse, or put the wheel itself there",
        )
    return tuple(sorted(names))


def _is_regular(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()  # follows links: a link to a wheel is a wheel
    except OSError:
        return False


def _kind(path: Path) -> str:
    try:
        return file_kind(os.stat(path).st_mode)
    except OSError as err:
        return f"unreadable ({err.strerror})"


@dataclass(frozen=True)
class Coverage:
    """How much of a lock a wheelhouse holds: the pins, and the ones it lacks (as name==version)."""

    folder: Path
    locked: int
    missing: tuple[str, ...]
    #: The wheels of the folder that the lock allows (name, version, a locked hash, installable
    #: tags):
    #: all a build needs from it, so only these go into the build context.
    wheels: tuple[Path, ...] = ()

    @property
    def complete(self) -> bool:
        return self.locked > 0 and not self.missing

    def describe(self) -> str:
        return (
            f"{len(self.missing)} of the lock's {self.locked} wheels are not in {self.folder}: "
            f"{', '.join(self.missing)}"
        )


def installable(tags: Iterable[object], python: str, arch: str) -> bool:
    """Whether a wheel with these packaging Tags installs on CPython `python` (X.Y) on Linux `arch`
    (glibc)."""
    major, minor = (int(part) for part in python.split(".")[:2])
    for tag in tags:
        interpreter, abi, platform = tag.interpreter, tag.abi, tag.platform  # type: ignore[attr-defined]
        python_ok = interpreter in (
            "py3",
            f"py{major}",
            f"py{major}{minor}",
            f"cp{major}{minor}",
        ) or (
            abi == "abi3"
            and interpreter.startswith(f"cp{major}")
            and interpreter[2:].isdigit()
            and int(interpreter[3:] or 0) <= minor
        )
        platform_ok = platform == "any" or (
            platform.startswith(("manylinux", "linux")) and platform.endswith(arch)
        )
        if python_ok and platform_ok:
            return True
    return False


def coverage(packages: Iterable[object], folder: str | Path, *, python: str, arch: str) -> Coverage:
    """Which pins of a uv lock (lockdir.LockedPackage, with hashes) `folder` holds a usable wheel
    for."""
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    root = Path(folder).expanduser()
    by_pin: dict[tuple[str, str], list[tuple[Path, frozenset]]] = {}
    for name in wheel_names(root):
        try:
            project, version, _build, tags = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        by_pin.setdefault((canonicalize_name(project), str(version)), []).append(
            (root / name, tags)
        )
    pins = [p for p in packages if getattr(p, "manager", "pip") == "pip"]
    missing = []
    usable: list[Path] = []
    for pin in pins:
        candidates = [
            path
            for path, tags in by_pin.get((canonicalize_name(pin.name), _normal(pin.version)), [])
            if installable(tags, python, arch)
        ]
        allowed = set(getattr(pin, "hashes", ()) or ())
        matched = [path for path in candidates if not allowed or _sha256(path) in allowed]
        usable += matched
        if not matched:
            missing.append(f"{pin.name}=={pin.version}")
    return Coverage(
        folder=root, locked=len(pins), missing=tuple(missing), wheels=tuple(sorted(set(usable)))
    )


def _normal(version: str) -> str:
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(version))
    except InvalidVersion:
        return version


def _sha256(path: Path) -> str:
    """The wheel's sha256, read through the one bounded reader (never past MAX_WHEEL_BYTES)."""
    digest = hashlib.sha256()
    try:
        for block in input_blocks(path, MAX_WHEEL_BYTES):
            digest.update(block)
    except InputRefused as err:
        raise BadInput(
            f"--wheelhouse: {safe_text(path)}: {err}",
            fix="remove it from the wheelhouse, or put the wheel itself there",
        ) from None
    return digest.hexdigest()


def lock_coverage(
    lock_path: Path, folder: str | Path, *, python: str, arch: str, backend: str = "uv"
) -> Coverage:
    """The coverage of the lock file at `lock_path` (uv's, or the pip entries of a conda-lock.yml)
    by `folder`."""
    from gpuenv.envs.lockdir import read_conda_lock, read_requirements_lock

    packages = (
        read_conda_lock(Path(lock_path))
        if backend == "conda-lock"
        else read_requirements_lock(Path(lock_path))
    )
    return coverage(packages, folder, python=python, arch=arch)


def require_complete(cover: Coverage, option: str = "--offline") -> None:
    """One line naming every missing wheel, before anything is installed or built."""
    if not cover.complete:
        raise BadInput(
            f"{option}: {cover.describe()}",
            fix="download them where an index answers (pip download --no-deps --require-hashes "
            "-r LOCK, see the README's air-gapped recipe), or drop --offline",
        )
