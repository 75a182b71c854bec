"""Which inputs make an image, as hashes: the hash in an image's tag and the name of its install
stage's build cache.

Two images that differ in anything they carry must never share a name: the tag's hash covers the
lock, the suite, the Dockerfile and scripts, the installers put into the image, the build
arguments and labels, and the base image's id (its config digest, so a re-pulled `ubuntu:22.04`
that changed is another base). The install stage's cache name covers every input of that stage
(the base, the scripts, the installers, the CA bundle, the wheels, the lock), so two builds that
differ in any of them never take each other's cache. Pure: the caller gives the context entries
and the base image's id; nothing here asks the engine.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from gpuenv import VALIDATE_DIR
from gpuenv.envs.lockdir import file_sha256
from gpuenv.images.context import EnvArchive, Source, Tree, suite_entries

if TYPE_CHECKING:
    from gpuenv.envs.fromhost import PrefixForImage

#: Context entries the install stage copies or is defined by (the Dockerfile is under docker/).
INSTALL_STAGE = ("docker/", "install/")
#: Placeholder for the hash in tags printed before the inputs are known (`invoke --dry build`).
PENDING = "<inputs-hash>"


def _tree_digest(root: Path | PrefixForImage) -> str:
    """A folder kept as it is in the context (links as links): its paths, link targets, modes and
    bytes. A prefix read for the image (gpuenv.envs.fromhost) gives the digest its folder would:
    from the sha256 each file had when it was judged, without reading it again."""
    digest = hashlib.sha256()
    for rel, target, executable, sha256 in _tree_entries(root):
        line = f"L {rel} {target}" if target is not None else f"F {rel} {executable} {sha256}"
        digest.update(f"{line}\n".encode())
    return digest.hexdigest()


def _tree_entries(root: Path | PrefixForImage) -> Iterator[tuple[str, str | None, bool, str]]:
    """(path, link target or None, executable, sha256) of each link and file, in the order of
    Path's (by the parts of the path); folders give none."""
    if not isinstance(root, Path):
        for member in root.members:
            if member.kind == "link":
                yield member.path, member.target, False, ""
            elif member.kind == "file":
                yield member.path, None, member.executable, member.sha256
        return
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            yield rel, os.readlink(path), False, ""
        elif path.is_file():
            yield rel, None, os.access(path, os.X_OK), file_sha256(path)


def entry_digest(name: str, source: Source) -> str:
    """The identity of one context entry.

    A wheel is named by its file name and size: the context holds only wheels whose sha256 the
    lock allows (gpuenv/envs/wheelhouse.py checked them), so their bytes add nothing, and hashing
    a 900 MB wheelhouse on every build would cost seconds.
    """
    if isinstance(source, bytes):
        return hashlib.sha256(source).hexdigest()
    if isinstance(source, Tree):
        return _tree_digest(source.root)
    if isinstance(source, EnvArchive):  # its headers are fixed but for these two
        return f"{_tree_digest(source.root)} {source.under} {source.epoch}"
    if name.startswith("install/wheels/") and name.endswith(".whl"):
        return f"wheel {source.stat().st_size}"
    # The context follows links (context.write_context), so the identity does too.
    return file_sha256(source.resolve(strict=True))


def inputs_hash(
    entries: Iterable[tuple[str, Source]],
    *,
    buildargs: dict[str, str],
    base_id: str,
    labels: dict[str, str] | None = None,
    only: tuple[str, ...] = (),
) -> str:
    """sha256 over the context entries (`only` those under these prefixes, when given), the build
    arguments, the labels and the base image's id, in a stable order."""
    digest = hashlib.sha256()
    for name, source in sorted(entries, key=lambda entry: entry[0]):
        if only and not name.startswith(only):
            continue
        digest.update(f"entry {name} {entry_digest(name, source)}\n".encode())
    for key, value in sorted(buildargs.items()):
        digest.update(f"arg {key}={value}\n".encode())
    for key, value in sorted((labels or {}).items()):
        digest.update(f"label {key}={value}\n".encode())
    digest.update(f"base {base_id}\n".encode())
    return digest.hexdigest()


def image_hash(
    entries: list[tuple[str, Source]],
    *,
    buildargs: dict[str, str],
    labels: dict[str, str],
    base_id: str,
) -> str:
    """The identity of the final image: every input of the build. Even the CA bundle and the wheels,
    which reach no layer, name the install stage the image records (its io.gpuenv.install_hash
    label)."""
    return inputs_hash(entries, buildargs=buildargs, labels=labels, base_id=base_id)


def install_hash(
    entries: list[tuple[str, Source]], *, buildargs: dict[str, str], base_id: str
) -> str:
    """The identity of the install stage: what it copies, the Dockerfile, the build arguments and
    the base.

    The labels are left out: the engine sets them on the final stage only."""
    return inputs_hash(entries, buildargs=buildargs, base_id=base_id, only=INSTALL_STAGE)


def suite_hash(entries: Iterable[tuple[str, Source]]) -> str:
    """The identity of the validation suite in an image (validate/ of the context), for the
    io.gpuenv.suite label: `validate` can then prefer the image that carries this checkout's
    suite."""
    return inputs_hash(entries, buildargs={}, base_id="", only=("image/validate/",))


def checkout_suite() -> str | None:
    """The hash of this checkout's validation suite, as images carry it (io.gpuenv.suite); None
    without one."""
    return suite_hash(suite_entries(VALIDATE_DIR)) if VALIDATE_DIR.is_dir() else None
