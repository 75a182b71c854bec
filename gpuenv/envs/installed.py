"""The parts of the `invoke verify` judge that only gpuenv needs (validate/intact.py is the judge,
shared with the suite): an environment read from a tar stream, as the Docker engine hands an
image's folder out without running it, and the records gpuenv writes so that a prefix it
installed can be judged (its own files, the RECORD rows of scripts it retargeted)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import posixpath
import tarfile
from collections.abc import Callable, Iterable, Mapping
from typing import IO

from validate.intact import (
    BLOCK,
    DIR,
    FILE,
    LINK,
    MAX_METADATA_BYTES,
    Entry,
    FolderTree,
    TreeError,
    is_metadata,
)


class TarTree:
    """A tar stream of an environment read once, front to back: each file hashed as it passes,
    the metadata files kept. `strip` is the folder the members sit in (`env/` when the engine
    archived /opt/gpuenv/env)."""

    def __init__(
        self, stream: IO[bytes], *, strip: str = "", progress: Callable[[int], None] | None = None
    ) -> None:
        self._entries: dict[str, Entry] = {}
        self._digests: dict[str, str] = {}
        self._kept: dict[str, bytes] = {}
        strip = strip.strip("/")
        try:
            with tarfile.open(fileobj=stream, mode="r|*") as tar:
                for member in tar:
                    name = posixpath.normpath(member.name.lstrip("./") or ".")
                    if strip:
                        if name == strip:
                            continue
                        if not name.startswith(strip + "/"):
                            continue
                        name = name[len(strip) + 1 :]
                    self._add(tar, member, name, strip, progress)
        except (tarfile.TarError, OSError, EOFError) as err:
            raise TreeError(f"the archive could not be read: {err}") from None

    def _add(
        self,
        tar: tarfile.TarFile,
        member: tarfile.TarInfo,
        name: str,
        strip: str,
        progress: Callable[[int], None] | None,
    ) -> None:
        if member.isdir():
            self._entries[name] = Entry(DIR)
        elif member.issym():
            self._entries[name] = Entry(LINK, 0, member.linkname)
        elif member.islnk():  # a hard link: the bytes of a member already seen
            source = posixpath.normpath(member.linkname.lstrip("./"))
            source = (
                source[len(strip) + 1 :] if strip and source.startswith(strip + "/") else source
            )
            self._entries[name] = self._entries.get(source, Entry(FILE))
            if source in self._digests:
                self._digests[name] = self._digests[source]
            if source in self._kept:
                self._kept[name] = self._kept[source]
        elif member.isreg():
            handle = tar.extractfile(member)
            digest = hashlib.sha256()
            keep = is_metadata(name) and member.size <= MAX_METADATA_BYTES
            kept = bytearray()
            while handle is not None and (block := handle.read(BLOCK)):
                digest.update(block)
                if keep:
                    kept += block
                if progress:
                    progress(len(block))
            self._entries[name] = Entry(FILE, member.size)
            self._digests[name] = digest.hexdigest()
            if keep:
                self._kept[name] = bytes(kept)
        else:
            self._entries[name] = Entry("special")

    def entries(self) -> Mapping[str, Entry]:
        return self._entries

    def read(self, path: str, limit: int) -> bytes:
        if path not in self._kept:
            raise TreeError(f"{path} was not kept from the archive")
        return self._kept[path][: limit + 1]

    def sha256(self, path: str) -> str:
        return self._digests[path]


def own_files(root: str | os.PathLike[str], paths: Iterable[str]) -> dict[str, str]:
    """`{path: sha256}` of files an installer put into `root` beside the packages (gpuenv's suite
    and stack record), for the `files` map of gpuenv-prefix.json."""
    tree = FolderTree(root)
    return {path: tree.sha256(path) for path in sorted(paths)}


def update_record(site_packages: str | os.PathLike[str], changed: Iterable[str]) -> list[str]:
    """Rewrite the RECORD rows of files changed after their install (scripts whose interpreter
    line was pointed at the final prefix) with their new sha256 and size, as pip does for the
    scripts it writes itself. `changed`: absolute paths. Returns the RECORDs rewritten."""
    site = os.fspath(site_packages)
    wanted = {os.path.normpath(p) for p in changed}
    rewritten = []

    def now(path: str) -> bytes | None:
        if path not in wanted:
            return None
        with open(path, "rb") as handle:
            return handle.read()

    for name in sorted(os.listdir(site)):
        record = os.path.join(site, name, "RECORD")
        if not name.endswith(".dist-info") or not os.path.isfile(record):
            continue
        with open(record, encoding="utf-8", newline="") as handle:
            text = handle.read()
        updated = record_with(text, site, now)
        if updated is not None:
            with open(record + ".tmp", "w", encoding="utf-8", newline="") as handle:
                handle.write(updated)
            os.replace(record + ".tmp", record)
            rewritten.append(record)
    return rewritten


def record_with(text: str, site: str, now: Callable[[str], bytes | None]) -> str | None:
    """A RECORD's `text` with each row whose file (its path joined to `site`, normalised) `now`
    gives bytes for naming those bytes' sha256 and size; None when no row changed. The rows are
    written back as pip writes them."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    touched = False
    for row in rows:
        data = now(os.path.normpath(os.path.join(site, row[0]))) if row else None
        if data is not None:
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            row[1:] = [f"sha256={digest}", str(len(data))]
            touched = True
    if not touched:
        return None
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
