"""The build context of an image: which files go to the engine, under which names, as one tar
stream.

Two folders, one per stage, so each stage takes its inputs in one COPY (one layer each):
  install/   what the install stage needs: install-env.sh, ca-env.sh, tools/, ca/, wheels/, lock/
  image/     what the final image carries beside the environment: bin/gpuenv-entrypoint,
             stack.json and validate/
and docker/Dockerfile; for a conda lock also env/environment.tar, the environment the host
installed, as a tar whose every header is fixed (EnvArchive): the final stage ADDs it, which
gives the same layer from every build. Pure but for reading the files: the engine is never
asked here.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator, Protocol

from gpuenv.errors import DataError
from gpuenv.stack import Stack, stack_json

if TYPE_CHECKING:
    from gpuenv.envs.fromhost import Member, PrefixForImage

#: Files and folders never sent to the engine (bytecode, editor litter).
_SKIP_NAMES = {"__pycache__", ".pytest_cache", ".mypy_cache", ".DS_Store"}
#: The suite's folder in the context (gpuenv/images/identity.py hashes it for the io.gpuenv.suite
#: label).
SUITE_PREFIX = "image/validate/"


@dataclass(frozen=True)
class Tree:
    """A folder copied into the context as it is, its inner symbolic links kept as links."""

    root: Path


@dataclass(frozen=True)
class EnvArchive:
    """A folder sent as one tar file that the Dockerfile ADDs (the engine unpacks it), its members
    under `under` ("opt/gpuenv/env") with every header fixed: names in sorted order, owner 0:0, the
    time `epoch`, modes readable by all. A COPY cannot give that: on the engine measured (20.10,
    both builders) the folder that receives a COPY takes the build's time, which the layer
    records; an unpacked archive's folders take the archive's times, so the layer depends only on
    the files. `root`: a folder, or a prefix read for the image (gpuenv.envs.fromhost), whose files
    are sent from where they are."""

    root: Path | PrefixForImage
    under: str
    epoch: int


Source = Path | bytes | Tree | EnvArchive
#: Where a conda lock's environment travels in the context (docker/Dockerfile: ENV_FROM_HOST).
ENV_ARCHIVE = "env/environment.tar"
#: The Dockerfile's instruction that puts the environment built in the install stage into the
#: image; for an environment the host installed, it becomes ENV_FROM_HOST.
ENV_FROM_INSTALL = "COPY --from=install /opt/gpuenv-layer/ /"
ENV_FROM_HOST = f"ADD {ENV_ARCHIVE} /"


class BuildPlan(Protocol):
    """What the context is made from: the parts of gpuenv.images.plan.BuildPlan read here (a
    protocol, so this module never imports the planner that imports it)."""

    stack: Stack
    lock: Any  # plan.LockFile: .path
    labels: dict[str, str]
    docker_dir: Path
    validate_dir: Path
    ca_cert: Path | None
    no_index: bool
    tools: Any  # gpuenv.envs.buildtools.BuildTools | None
    locked_wheels: tuple[Path, ...]
    epoch: int  # the time of every file of an EnvArchive (plan.BuildPlan.epoch)


def label_instruction(labels: dict[str, str]) -> str:
    """One LABEL instruction holding every label: the classic builder makes one step of each
    label given through the API, but one step of this. Keys and values are double-quoted with
    `\\`, `"` and `$` escaped, so the Dockerfile parser gives back exactly the text (no variable
    is expanded); a label with a line break is refused (no label of gpuenv has one)."""

    def quoted(text: str) -> str:
        if "\n" in text or "\r" in text:
            raise DataError(
                f"a label holds a line break: {text[:60]!r}",
                fix="report this: gpuenv's labels are one line each",
            )
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'

    pairs = [f"{quoted(key)}={quoted(value)}" for key, value in sorted(labels.items())]
    return "LABEL " + " \\\n      ".join(pairs) + "\n"


def render_dockerfile(
    template: bytes, labels: dict[str, str], *, env_from_host: bool = False
) -> bytes:
    """docker/Dockerfile with the image's labels appended as its last instruction (final stage),
    and, for an environment the host installed (`env_from_host`), its one ENV_FROM_INSTALL line
    made ENV_FROM_HOST."""
    if env_from_host:
        lines = template.decode().split("\n")
        if lines.count(ENV_FROM_INSTALL) != 1:
            raise DataError(
                f"docker/Dockerfile must hold the line {ENV_FROM_INSTALL!r} once",
                fix="restore docker/Dockerfile from the repository",
            )
        template = "\n".join(ENV_FROM_HOST if x == ENV_FROM_INSTALL else x for x in lines).encode()
    note = "\n# The image's labels, given once by gpuenv (gpuenv/images/plan.py), in one step.\n"
    return (
        template.rstrip(b"\n") + b"\n" + (note + label_instruction(labels)).encode()
        if labels
        else template
    )


def context_entries(plan: BuildPlan, *, labelled: bool = True) -> list[tuple[str, Source]]:
    """The build context as (path in context, source file or bytes), in a stable order.

    The CA bundle and the wheelhouse are always present (empty when not asked for) so the
    install stage's one COPY keeps its shape and its cache depends on content only. The
    Dockerfile carries the plan's labels unless `labelled` is False (the image's identity is
    computed before its own hash is a label).
    """
    template = plan.docker_dir / "Dockerfile"
    env = plan.tools.conda_env if plan.tools is not None else None
    dockerfile: Source = (
        render_dockerfile(
            template.read_bytes(), plan.labels if labelled else {}, env_from_host=env is not None
        )
        if (labelled and plan.labels) or env is not None
        else template
    )
    entries: list[tuple[str, Source]] = [
        ("docker/Dockerfile", dockerfile),
        ("install/install-env.sh", plan.docker_dir / "install-env.sh"),
        ("install/ca-env.sh", plan.docker_dir / "ca-env.sh"),
        ("install/ca/ca-bundle.crt", plan.ca_cert if plan.ca_cert else b""),
        ("install/wheels/.keep", b""),
        *([("install/wheels/.no-index", b"")] if plan.no_index else []),
        ("install/tools/.keep", b""),
    ]
    if env is not None:
        # A conda lock's environment, installed on the host for /opt/gpuenv/env: no installer
        # goes in (uv alone is 38 MB), and the install stage has nothing to do.
        entries.append((ENV_ARCHIVE, EnvArchive(env, "opt/gpuenv/env", plan.epoch)))
    elif plan.tools is not None:
        entries.append(("install/tools/uv", plan.tools.uv))
        if plan.tools.python is not None:
            entries.append(("install/tools/python", Tree(plan.tools.python)))
    # Only the wheels the lock allows: a wheelhouse of 200,000 files sends the few the install uses.
    entries += [(f"install/wheels/{w.name}", w) for w in plan.locked_wheels]
    # Only the lock file: the install layer's cache then depends on exactly the bytes whose hash
    # names the lock (stack.json of the lock directory holds paths and tool versions).
    entries.append((f"install/lock/{plan.lock.path.name}", plan.lock.path))
    entries.append(("image/bin/gpuenv-entrypoint", plan.docker_dir / "entrypoint.sh"))
    entries.append(("image/stack.json", (stack_json(plan.stack) + "\n").encode()))
    entries += suite_entries(plan.validate_dir)
    return entries


def suite_entries(validate_dir: Path) -> list[tuple[str, Source]]:
    """The suite's entries, named as in the context (for identity.suite_hash)."""
    return [
        (f"{SUITE_PREFIX}{p.relative_to(validate_dir).as_posix()}", p)
        for p in _files_under(validate_dir)
    ]


def _files_under(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not (set(p.relative_to(root).parts) & _SKIP_NAMES)
    )


def write_context(plan: BuildPlan, out: IO[bytes]) -> None:
    """Write the build context as a tar stream to `out`.

    Owners and times are normalised so the builder's COPY cache depends on file content and
    mode only: rebuilding after a `touch` (or a fresh checkout) reuses the install layer.
    """
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, source in context_entries(plan):
            if isinstance(source, bytes):
                info = tarfile.TarInfo(name)
                info.size = len(source)
                info.mode = 0o644
                tar.addfile(_normalised(info), io.BytesIO(source))
            elif isinstance(source, EnvArchive):
                members = env_archive_members(source)
                heads = [_header_bytes(member) for member, _path in members]  # made once
                info = tarfile.TarInfo(name)
                info.size = env_archive_size(members, heads)
                info.mode = 0o644
                tar.addfile(_normalised(info), ChunkReader(env_archive_chunks(members, heads)))
            elif isinstance(source, Tree):
                # A standalone Python: relocatable, with relative links (python3 -> python3.11).
                tar.add(str(source.root), arcname=name, recursive=True, filter=_normalised)
            else:
                # Links are followed: a symlinked CA bundle (/etc/ssl/certs/ca-bundle.crt on RHEL)
                # or wheel must reach the build as its content, not as a link that dangles there.
                real = Path(source).resolve(strict=True)
                info = tar.gettarinfo(str(real), arcname=name)
                with open(real, "rb") as fh:
                    tar.addfile(_normalised(info), fh)


def write_env_archive(archive: EnvArchive, out: IO[bytes]) -> None:
    """`archive.root` as a tar stream (EnvArchive says what is fixed in it)."""
    for chunk in env_archive_chunks(env_archive_members(archive)):
        out.write(chunk)


def env_archive_members(
    archive: EnvArchive,
) -> list[tuple[tarfile.TarInfo, Path | Member | None]]:
    """The members of the archive, each with the file its bytes come from: the parent folders of
    `archive.under` first, then every entry of `archive.root` by path; owner 0:0 with no names,
    every time `archive.epoch`, modes 0755 (folders, executables) or 0644, a hard link as a file."""

    def header(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.size, info.mtime = kind, mode, size, archive.epoch
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    under = archive.under.strip("/")
    parts = under.split("/")
    members: list[tuple[tarfile.TarInfo, Path | Member | None]] = [
        (header("/".join(parts[:depth]), tarfile.DIRTYPE, 0o755), None)
        for depth in range(1, len(parts) + 1)
    ]
    if not isinstance(archive.root, Path):  # its members listed, each file with its sha256
        for member in archive.root.members:
            name = f"{under}/{member.path}"
            if member.kind == "link":
                link = header(name, tarfile.SYMTYPE, 0o777)
                link.linkname = member.target
                members.append((link, None))
            elif member.kind == "dir":
                members.append((header(name, tarfile.DIRTYPE, 0o755), None))
            else:
                mode = 0o755 if member.executable else 0o644
                members.append((header(name, tarfile.REGTYPE, mode, member.size), member))
        return members
    top = str(archive.root)
    for rel in _entries_sorted(archive.root):
        name, path = f"{under}/{rel}", os.path.join(top, rel)
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            link = header(name, tarfile.SYMTYPE, 0o777)
            link.linkname = os.readlink(path)
            members.append((link, None))
        elif stat.S_ISDIR(info.st_mode):
            members.append((header(name, tarfile.DIRTYPE, 0o755), None))
        elif stat.S_ISREG(info.st_mode):
            mode = 0o755 if info.st_mode & 0o111 else 0o644
            members.append((header(name, tarfile.REGTYPE, mode, info.st_size), Path(path)))
        else:
            raise DataError(
                f"{path} is neither a file, a folder nor a link",
                fix="remove it from the staged environment (or its cache folder)",
            )
    return members


def env_archive_size(
    members: list[tuple[tarfile.TarInfo, Path | Member | None]], heads: list[bytes] | None = None
) -> int:
    """The archive's size in bytes before it is written (the context's tar header needs it).
    `heads`: the members' header bytes, when the caller made them already."""
    heads = heads if heads is not None else [_header_bytes(info) for info, _path in members]
    size = sum(len(head) + _padded(info.size) for head, (info, _path) in zip(heads, members))
    return _padded(size + 2 * tarfile.BLOCKSIZE, tarfile.RECORDSIZE)


def env_archive_chunks(
    members: list[tuple[tarfile.TarInfo, Path | Member | None]], heads: list[bytes] | None = None
) -> Iterator[bytes]:
    """The archive's bytes, as tarfile would write them in PAX format, read from the files as
    they are sent: no copy of the environment is written on the way. A prefix's file is checked
    against its sha256 as it goes (fromhost.Member.chunks)."""
    written = 0
    for index, (info, path) in enumerate(members):
        head = heads[index] if heads is not None else _header_bytes(info)
        written += len(head)
        yield head
        if path is None:
            continue
        if not isinstance(path, Path):
            yield from path.chunks()
        else:
            yield from _file_chunks(path, info.size)
        padding = _padded(info.size) - info.size
        written += info.size + padding
        yield b"\0" * padding
    end = _padded(written + 2 * tarfile.BLOCKSIZE, tarfile.RECORDSIZE) - written
    yield b"\0" * end


def _file_chunks(path: Path, size: int) -> Iterator[bytes]:
    left = size
    with open(path, "rb") as fh:
        while left:
            block = fh.read(min(left, 1 << 20))
            if not block:
                raise DataError(
                    f"{path} shrank while it was sent",
                    fix="build again; keep the cache as it is",
                )
            left -= len(block)
            yield block


def _header_bytes(info: tarfile.TarInfo) -> bytes:
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _padded(size: int, unit: int = tarfile.BLOCKSIZE) -> int:
    return -(-size // unit) * unit


class ChunkReader(io.RawIOBase):
    """A file object over an iterator of bytes: each read gives all it asks for until the end
    (tarfile takes a short read for the end of the data)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._chunk = b""
        self._at = 0  # how much of the current chunk was given

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        parts: list[bytes] = []
        want = size
        while want:
            if self._at == len(self._chunk):
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                self._chunk, self._at = chunk, 0
                continue
            take = (
                len(self._chunk) - self._at if want < 0 else min(want, len(self._chunk) - self._at)
            )
            parts.append(self._chunk[self._at : self._at + take])
            self._at += take
            want = want - take if want > 0 else want
        return b"".join(parts)


def _entries_sorted(root: Path) -> list[str]:
    """Every entry under `root` as its path relative to it ("a/b"), links not followed, in an
    order that does not depend on the file system: by path, folders before what they hold.
    Strings, not Paths: an environment holds tens of thousands of entries."""
    found: list[str] = []
    top = str(root)
    for folder, dirs, files in os.walk(top):
        rel = os.path.relpath(folder, top)
        found += [name if rel == "." else f"{rel}/{name}" for name in dirs + files]
    return sorted(found, key=lambda rel: rel.split("/"))


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info
