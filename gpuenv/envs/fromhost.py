"""An image's conda environment taken from a prefix this host already installed from the same
lock, instead of fetching, linking and installing every package a second time (issue 36).

`invoke install` remembers where it put each conda lock (`remember`); staging that lock for an
image (condalock.stage_for_image) then reads such a prefix (`for_image`) and rewrites, for the
image's path, the files that name the prefix's own path. Those are exactly:
- conda's prefix placeholders (conda-meta's `paths_data`, text and binary): the package's file is
  rebuilt from the installed bytes and must match the package's sha256 in that record, then linked
  for the image's path by rattler's rules (text: every placeholder replaced; binary: each C string
  holding one rewritten in place and padded with NULs to its length);
- the Python entry points rattler wrote (`#!PREFIX/bin/python...` on their first line);
- the scripts uv wrote into bin/ (`#!PREFIX/bin/python`), with their RECORD rows.
gpuenv's own files (the suite, the stack record) are left out, as are the bytecode caches no
package declares; site-packages' bytecode is taken from the bytecode cache, as an install for the
image would take it. No copy is written: the result (`PrefixForImage`) lists each file with its
sha256, and the build context reads the prefix's files as it sends them (images/context.py), each
hashed again on the way; the few rewritten files travel from memory.

Nothing is taken on trust. Only a prefix no other user can write is taken (its records vouch for
its files, so another user could make both agree); it is judged as `invoke verify` judges a prefix
(validate/intact.py: every file against its record, the packages against the lock), and every
file is scanned for the prefix's path while it is read. A file that names it where no rule above
covers, a file that differs from its record, a `#!` line too long for the image's path, bytecode
missing from the cache: the prefix is not taken and the lock is installed for the image as before,
with the reason said. A file that changes after that check stops the build (`Changed`). Scripts
that rattler or uv wrote as a /bin/sh trampoline (a long path, a path with a blank) are read back
as the `#!` line a short path gets. The environment sent is byte for byte what installing the lock
for the image gives (tests/envs/test_staged_cache.py), so the image's environment layer does not
depend on which way it was made.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from gpuenv.datacache import cache_dir
from gpuenv.envs import installed, pyccache
from gpuenv.errors import DataError
from validate import intact
from validate.reading import InputRefused, load_json_input, read_text_input
from validate.writing import WriteFailed, write_text_atomic

T = TypeVar("T")

#: gpuenv's cache folder of where each conda lock was installed on this host.
REGISTRY = "installed-prefixes"
#: Prefixes remembered per lock, the latest first.
KEEP = 4
#: A remembered list or a prefix's record is a few lines: at most this many bytes are read.
MAX_RECORD_BYTES = 1024 * 1024
#: The longest `#!` line rattler and uv write as it is; for a longer one (or a path with a blank)
#: they write a /bin/sh trampoline (_TRAMPOLINE), which is read back here as the `#!` line.
MAX_SHEBANG = 127
#: What is read at a time (the scan for the prefix's path spans the pieces' seams).
CHUNK = 1 << 20


def registry_file(lock_sha256: str, platform: str) -> Path:
    return cache_dir() / REGISTRY / f"{lock_sha256[:16]}-{platform}.json"


def remember(prefix: Path, lock_sha256: str, platform: str) -> None:
    """Note that `prefix` holds the conda lock `lock_sha256` for `platform` (best effort: the note
    only saves a later image build its second install)."""
    path = registry_file(lock_sha256, platform)
    kept = [p for p in remembered(lock_sha256, platform) if p != prefix]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps([str(prefix), *map(str, kept)][:KEEP]) + "\n")
    except (OSError, WriteFailed):
        pass


def remembered(lock_sha256: str, platform: str) -> list[Path]:
    """The prefixes `remember` noted for that lock, the latest first; [] when none or unreadable."""
    try:
        listed = load_json_input(
            read_text_input(registry_file(lock_sha256, platform), MAX_RECORD_BYTES), max_depth=4
        )
    except InputRefused:
        return []
    if not isinstance(listed, list):
        return []
    return [Path(p) for p in listed if isinstance(p, str) and os.path.isabs(p)]


class NotCopied(Exception):
    """Why a prefix cannot give the image's environment (said, then the lock is installed)."""


@dataclass(frozen=True)
class Member:
    """One entry of the image's environment (`kind`: intact.DIR, FILE or LINK). A file's bytes
    are `data` (rewritten for the image) or the first `size` bytes of `source` (a file of the
    prefix, or an entry of the bytecode cache), whose sha256 was taken when it was judged."""

    path: str
    kind: str
    executable: bool = False
    size: int = 0
    sha256: str = ""
    source: str | None = None
    data: bytes | None = None
    target: str = ""

    def chunks(self) -> Iterator[bytes]:
        """The file's bytes as they are sent, checked again: a file changed since the prefix was
        judged stops the build (its image would not be the judged one)."""
        if self.data is not None:
            yield self.data
            return
        assert self.source is not None
        digest, left = hashlib.sha256(), self.size
        with os.fdopen(os.open(self.source, os.O_RDONLY | os.O_NOFOLLOW), "rb") as reader:
            while left:
                block = reader.read(min(left, CHUNK))
                if not block:
                    break
                digest.update(block)
                left -= len(block)
                yield block
        if left or digest.hexdigest() != self.sha256:
            raise Changed(
                f"{self.source} changed after it was checked against its lock: the image's "
                "environment is not what was checked",
                fix="build again, and leave the prefix as it is while gpuenv builds from it",
            )


class Changed(DataError):
    """A file of the prefix changed between its check and its use."""


@dataclass(frozen=True)
class PrefixForImage:
    """The image's environment: the files of a prefix `invoke install` made of the lock, those that
    name its path rewritten for the image's, sent to the build from where they are
    (images/context.py): no copy is written. `members` in the archive's order (by path, a folder
    before what it holds)."""

    prefix: Path
    members: tuple[Member, ...]

    def read_bytes(self, path: str) -> bytes:
        found = [m for m in self.members if m.path == path and m.kind == intact.FILE]
        if not found:
            raise FileNotFoundError(path)
        return b"".join(found[0].chunks())


def for_image(
    prefix: Path,
    *,
    final_prefix: Path,
    lock_sha256: str,
    expected: intact.Expected,
    expected_from: str,
    bytecode_cache: Path | None = None,
    not_compiled: Iterable[str] = (),
    progress: Callable[[int], None] | None = None,
) -> PrefixForImage:
    """The environment `prefix` holds (gpuenv installed it from the lock `lock_sha256`) as the
    image gets it at `final_prefix`, every file read once and judged. `bytecode_cache`: where
    site-packages' bytecode is taken from, as condalock.compile_bytecode makes it (None: a lock with
    no pip part, which an install does not compile), but for the top-level folders of
    `not_compiled`. Raises NotCopied, naming why."""
    record = _prefix_record(prefix)
    if record.get("lock_sha256") != lock_sha256 or record.get("lock_backend") != "conda-lock":
        raise NotCopied(f"{prefix} holds another lock now")
    old, new = os.fsencode(prefix), os.fsencode(final_prefix)
    if b"\n" in old or old in new or new in old:
        raise NotCopied(f"its path {prefix} cannot be told apart in its files")
    own = {intact.GPUENV_RECORD, *(record.get("files") or {})}
    members, naming = _read_prefix(prefix, old, leave_out=own, progress=progress)
    judged = _JudgedTree(prefix, members)
    verdict = intact.check(judged, str(prefix), expected=expected, expected_from=expected_from)
    if verdict.problems:
        first = verdict.problems[0]
        raise NotCopied(
            f"it is not what its lock installed ({len(verdict.problems)} problems; the first: "
            f"{first.path} {first.kind}{': ' + first.detail if first.detail else ''})"
        )
    view = _Retargeting(members)
    rewritten, conda_owned = _retarget_conda(view, old, new)
    rewritten |= _retarget_scripts(view, old, new, conda_owned)
    left = sorted(set(naming) - rewritten)
    if left:
        raise NotCopied(
            f"{left[0]} names the prefix's path where no package record or installer script "
            "says it does"
        )
    if HISTORY in members:
        view.replace(HISTORY, without_install_times(view.read(HISTORY).decode()).encode())
    if bytecode_cache is not None:
        _add_bytecode(view, prefix, bytecode_cache, set(not_compiled))
    ordered = sorted(members.values(), key=lambda m: m.path.split("/"))
    return PrefixForImage(prefix, tuple(ordered))


#: rattler's log of the prefix's transactions: its `==> time <==` lines differ between installs.
HISTORY = "conda-meta/history"


def without_install_times(history: str) -> str:
    """conda-meta/history without the times rattler writes into it ("==> 2026-11-25 23:41:02
    <=="), so the same lock gives the same image."""
    return "".join(line for line in history.splitlines(keepends=True) if not line.startswith("==>"))


def _prefix_record(prefix: Path) -> dict:
    try:
        record = load_json_input(
            read_text_input(prefix / intact.GPUENV_RECORD, MAX_RECORD_BYTES), max_depth=16
        )
    except InputRefused as err:
        raise NotCopied(f"its {intact.GPUENV_RECORD} cannot be read ({err})") from None
    if not isinstance(record, dict):
        raise NotCopied(f"its {intact.GPUENV_RECORD} is not gpuenv's record")
    return record


def _declared_caches(prefix: Path) -> set[str]:
    """Bytecode files a conda package ships (the others an installer or Python wrote)."""
    tree = intact.FolderTree(prefix)
    found = set()
    for meta in sorted((prefix / "conda-meta").glob("*.json")):
        try:
            _, claims = intact.conda_claims(tree, f"conda-meta/{meta.name}")
        except (ValueError, UnicodeDecodeError, intact.TreeError):
            continue  # judged when the prefix is checked
        found.update(c.path for c in claims if intact.is_cache(c.path))
    return found


def _read_prefix(
    source: Path, old: bytes, *, leave_out: set[str], progress: Callable[[int], None] | None
) -> tuple[dict[str, Member], list[str]]:
    """Every entry of `source` (links as links) but `leave_out` and the bytecode no package
    declares, each file hashed and scanned for `old`; folders left empty dropped, as an install
    of the lock alone would not have them. Returns the members by path, and the files whose
    bytes hold `old`."""
    declared = _declared_caches(source)
    members: dict[str, Member] = {}
    naming = []
    _only_yours(".", os.lstat(source))
    for folder, dirs, files in os.walk(source):
        rel = os.path.relpath(folder, source)
        dirs.sort()
        for name in sorted(dirs + files):
            path = name if rel == "." else f"{rel}/{name}"
            if path in leave_out or (intact.is_cache(path) and path not in declared):
                if name in dirs:
                    dirs.remove(name)
                continue
            src = os.path.join(folder, name)
            info = os.lstat(src)
            _only_yours(path, info)
            if stat.S_ISLNK(info.st_mode):
                members[path] = Member(path, intact.LINK, target=os.readlink(src))
                if name in dirs:
                    dirs.remove(name)
            elif stat.S_ISDIR(info.st_mode):
                members[path] = Member(path, intact.DIR)
            elif stat.S_ISREG(info.st_mode):
                found, size, digest = _scan_file(src, old, progress)
                if found:
                    naming.append(path)
                # the image keeps only whether a file runs (images/context.py)
                members[path] = Member(
                    path, intact.FILE, bool(info.st_mode & 0o111), size, digest, source=src
                )
            else:
                raise NotCopied(f"{path} is not a file, a folder or a link")
    holding = {
        parent
        for path, member in members.items()
        if member.kind != intact.DIR
        for parent in _parents(path)
    }
    return {p: m for p, m in members.items() if m.kind != intact.DIR or p in holding}, naming


def _parents(path: str) -> Iterator[str]:
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        yield path


def _only_yours(path: str, info: os.stat_result) -> None:
    """A prefix another user can change (a group-writable team prefix, another owner's files)
    would put that user's bytes into this user's image, its records rewritten to match: such a
    prefix is installed for the image instead."""
    others = stat.S_IWGRP | stat.S_IWOTH
    if info.st_uid != os.geteuid() or (not stat.S_ISLNK(info.st_mode) and info.st_mode & others):
        raise NotCopied(
            f"{path} can be changed by another user (owner uid {info.st_uid}, mode "
            f"{stat.filemode(info.st_mode)}): only a prefix no one else can write is taken"
        )


def _scan_file(
    src: str, old: bytes, progress: Callable[[int], None] | None
) -> tuple[bool, int, str]:
    """Read one file: whether `old` is in it, its size and its sha256."""
    found, tail, size, digest = False, b"", 0, hashlib.sha256()
    with open(src, "rb") as reader:
        while block := reader.read(CHUNK):
            digest.update(block)
            size += len(block)
            if progress:
                progress(len(block))
            if not found:
                found = old in tail + block
                tail = block[-(len(old) - 1) :] if len(old) > 1 else b""
    return found, size, digest.hexdigest()


class _JudgedTree(intact.FolderTree):
    """The prefix as the judge sees it: the members read, with the sha256 each had when read (no
    file is hashed twice); a file read again is checked against it."""

    def __init__(self, prefix: Path, members: dict[str, Member]) -> None:
        super().__init__(prefix)
        self._members = members

    def entries(self) -> Mapping[str, intact.Entry]:
        if self._entries is None:
            self._entries = {
                p: intact.Entry(m.kind, m.size, m.target) for p, m in self._members.items()
            }
        return self._entries

    def read(self, path: str, limit: int) -> bytes:
        member = self._members[path]
        if member.size > limit:
            raise intact.TreeError(f"{path} is larger than {limit} bytes")
        return _read(member)

    def sha256(self, path: str) -> str:
        return self._members[path].sha256


def _read(member: Member) -> bytes:
    """A member's bytes, checked against its sha256 (NotCopied when it changed since)."""
    try:
        return b"".join(member.chunks())
    except Changed as err:
        raise NotCopied(f"{member.path} changed while it was read ({err.message})") from None


class _Retargeting:
    """The members as the image gets them: those rewritten for its path replaced."""

    def __init__(self, members: dict[str, Member]) -> None:
        self.members = members

    def read(self, path: str) -> bytes:
        member = self.members.get(path)
        if member is None or member.kind != intact.FILE:
            raise NotCopied(f"{path} is not a file of the prefix")
        return _read(member)

    def head(self, path: str, size: int) -> bytes:
        """The first `size` bytes (to tell a script by its first line; checked when rewritten)."""
        member = self.members[path]
        if member.data is not None:
            return member.data[:size]
        assert member.source is not None
        with open(member.source, "rb") as reader:
            return reader.read(size)

    def replace(self, path: str, data: bytes) -> None:
        self.members[path] = replace(
            self.members[path],
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            source=None,
            data=data,
        )


# ---------------------------------------------------------------- conda's files


def _retarget_conda(view: _Retargeting, old: bytes, new: bytes) -> tuple[set[str], set[str]]:
    """Each conda record's placeholder files and entry points rewritten for `new`, and the record
    updated with their new sha256 (and size). Returns the paths rewritten, and every path the
    records own."""
    done: set[str] = set()
    owned: set[str] = set()
    for meta in sorted(p for p in view.members if _CONDA_META.fullmatch(p)):
        record = json.loads(view.read(meta))
        changed = False
        for item in (record.get("paths_data") or {}).get("paths") or []:
            path = item.get("_path")
            owned.add(path or "")
            placeholder = item.get("prefix_placeholder")
            if placeholder and item.get("file_mode") in ("text", "binary"):
                data = _relinked(
                    view.read(path),
                    path,
                    old,
                    new,
                    os.fsencode(placeholder),
                    item["file_mode"],
                    item.get("sha256"),
                )
                view.replace(path, data)
                item["sha256_in_prefix"] = hashlib.sha256(data).hexdigest()
                if "size_in_bytes" in item:  # rattler records the size as linked
                    item["size_in_bytes"] = len(data)
            elif item.get("path_type") == "unix_python_entry_point":
                data = _with_interpreter(view.read(path), path, old, new)
                view.replace(path, data)
                item["sha256"] = hashlib.sha256(data).hexdigest()
                item["size_in_bytes"] = len(data)
            else:
                continue
            changed = True
            done.add(path)
        if changed:
            view.replace(meta, record_text(record).encode("utf-8"))
    return done, owned


_CONDA_META = re.compile(r"conda-meta/[^/]+\.json")


def record_text(record: dict) -> str:
    """A conda-meta record as gpuenv writes it (condalock.settle_records), so that a record edited
    here reads the same as one written there."""
    return json.dumps(record, indent=2, ensure_ascii=False) + "\n"


#: What rattler and uv write instead of a `#!` line too long for the kernel: a /bin/sh script
#: that runs the interpreter on itself (uv: `'''exec' 'PY' "$0" "$@"` then `' '''`; rattler:
#: `'''exec' "PY" "$0" "$@" #'''`).
_TRAMPOLINE = re.compile(
    rb"#!/bin/sh\n'''exec' (?P<q>['\"])(?P<interpreter>[^'\"\n]+)(?P=q) \"\$0\" \"\$@\""
    rb"(?: #'''\n|\n' '''\n)"
)


def _as_shebang(data: bytes, old: bytes) -> bytes:
    """A script that starts with such a trampoline for an interpreter under `old`, as the plain
    `#!` line a shorter path gets; any other file as it is."""
    found = _TRAMPOLINE.match(data)
    if found is None or not found["interpreter"].startswith(old + b"/"):
        return data
    return b"#!" + found["interpreter"] + b"\n" + data[found.end() :]


def _relinked(
    data: bytes,
    path: str,
    old: bytes,
    new: bytes,
    placeholder: bytes,
    mode: str,
    sha256: str | None,
) -> bytes:
    """The file as linking its package for `new` writes it, from the file as linked for `old`:
    the package's own file rebuilt first, and checked by its sha256."""
    if mode == "text":
        data = _as_shebang(data, old)  # the package's file has a plain #! line
    original = (
        data.replace(old, placeholder) if mode == "text" else _cstrings(data, old, placeholder)
    )
    if original is None or hashlib.sha256(original).hexdigest() != sha256:
        raise NotCopied(f"{path}: its bytes do not rebuild its package's file")
    if mode == "binary":
        linked = _cstrings(original, placeholder, new)
        assert linked is not None  # a shorter path always fits where the placeholder was
        return linked
    linked = original.replace(placeholder, new)
    if linked.startswith(b"#!") and len(linked.split(b"\n", 1)[0]) > MAX_SHEBANG:
        raise NotCopied(f"{path}: its #! line is longer than {MAX_SHEBANG} bytes for {new!r}")
    return linked


def _cstrings(data: bytes, old: bytes, new: bytes) -> bytes | None:
    """Each NUL-ended string of `data` holding `old` with `old` replaced by `new`, the string kept
    at its length: NULs pad it when `new` is shorter, and the NULs after it (a shorter path's
    padding) are taken when it is longer. None when they are too few."""
    out, at = [], 0
    while (start := data.find(old, at)) >= 0:
        end = data.find(b"\0", start)
        end = len(data) if end < 0 else end
        string = data[start:end]
        changed = string.replace(old, new)
        grow = len(changed) - len(string)
        if grow > 0:
            if data[end : end + grow + 1] != b"\0" * (grow + 1):  # its own NUL stays
                return None
            out += [data[at:start], changed]
            at = end + grow
        else:
            out += [data[at:start], changed, b"\0" * -grow]
            at = end
    out.append(data[at:])
    return b"".join(out)


def _with_interpreter(data: bytes, path: str, old: bytes, new: bytes) -> bytes:
    """A script whose `#!` line (or trampoline) names `old`'s bin/ folder, naming `new`'s."""
    first, sep, rest = _as_shebang(data, old).partition(b"\n")
    if not first.startswith(b"#!" + old + b"/bin/"):
        raise NotCopied(f"{path}: its #! line does not name the prefix's bin/ (a long path?)")
    line = first.replace(b"#!" + old, b"#!" + new, 1)
    if len(line) > MAX_SHEBANG:
        raise NotCopied(f"{path}: its #! line is longer than {MAX_SHEBANG} bytes for {new!r}")
    return line + sep + rest


# ---------------------------------------------------------------- uv's scripts


def _retarget_scripts(
    view: _Retargeting, old: bytes, new: bytes, conda_owned: set[str]
) -> set[str]:
    """The scripts uv wrote into bin/ (the pip part's entry points: no conda record owns them),
    and their RECORD rows."""
    changed: dict[str, bytes] = {}
    for path, member in sorted(view.members.items()):
        if not _IN_BIN.fullmatch(path) or path in conda_owned or member.kind != intact.FILE:
            continue
        if not _as_shebang(view.head(path, len(old) + 64), old).startswith(b"#!" + old):
            continue
        changed[path] = _with_interpreter(view.read(path), path, old, new)
        view.replace(path, changed[path])
    for site in sorted(p for p, m in view.members.items() if _SITE.fullmatch(p)):
        records = [
            p
            for p in view.members
            if p.startswith(site + "/") and _RECORD_IN.fullmatch(p[len(site) :])
        ]
        for record in sorted(records):
            text = installed.record_with(view.read(record).decode("utf-8"), site, changed.get)
            if text is not None:
                view.replace(record, text.encode("utf-8"))
    return set(changed)


_IN_BIN = re.compile(r"bin/[^/]+")
_SITE = re.compile(r"lib/python3[^/]*/site-packages")
_RECORD_IN = re.compile(r"/[^/]+\.dist-info/RECORD")


# ---------------------------------------------------------------- site-packages' bytecode


def _add_bytecode(view: _Retargeting, prefix: Path, cache: Path, skipped: set[str]) -> None:
    """The .pyc of each source of site-packages (but the top-level folders of `skipped`), as
    condalock.compile_bytecode makes it (checked-hash, naming its source relative to the prefix),
    taken from the bytecode cache by the key the bytecode step files it under (pyccache). The
    install of this prefix compiled each of them into that cache; one missing (the cache was
    cleared) means the lock is installed for the image instead."""
    sites = sorted(
        p for p, m in view.members.items() if _SITE.fullmatch(p) and m.kind == intact.DIR
    )
    if not sites:
        raise NotCopied("it has no lib/python3.*/site-packages")
    site = sites[0]  # as compile_bytecode takes it
    magic, tag = _bytecode_tag(prefix)
    for path, member in sorted(view.members.items()):
        parts = path[len(site) + 1 :].split("/")
        if (
            not path.startswith(site + "/")
            or not path.endswith(".py")
            or "__pycache__" in parts
            or (len(parts) > 1 and parts[0] in skipped)
        ):
            continue
        if member.kind == intact.LINK:  # compiled when it leads to a file, as compileall does
            if not os.path.isfile(prefix / path):
                continue
            with open(prefix / path, "rb") as reader:
                source = reader.read()
        elif member.kind == intact.FILE:
            source = view.read(path)
        else:
            continue
        entry = pyccache.entry_path(str(cache), magic, path, source)
        code = pyccache.cached_code(entry, magic)
        if code is None:
            raise NotCopied(f"the bytecode of {path} is not in gpuenv's bytecode cache {cache}")
        folder, _, file_name = path.rpartition("/")
        if f"{folder}/__pycache__" not in view.members:
            view.members[f"{folder}/__pycache__"] = Member(f"{folder}/__pycache__", intact.DIR)
        pyc = f"{folder}/__pycache__/{file_name.rpartition('.')[0]}.{tag}.pyc"
        view.members[pyc] = Member(
            pyc, intact.FILE, False, len(code), hashlib.sha256(code).hexdigest(), entry
        )


#: How long the prefix's Python may take to say which bytecode it reads.
PYTHON_ASKED_S = 30


def _bytecode_tag(prefix: Path) -> tuple[bytes, str]:
    """The magic number and cache tag (`cpython-311`) of the prefix's Python: what its .pyc start
    with and are named by. The prefix's own interpreter is asked, as compile_bytecode runs it."""
    script = (
        "import importlib.util as u, sys; print(u.MAGIC_NUMBER.hex(), sys.implementation.cache_tag)"
    )
    try:
        done = subprocess.run(
            [str(prefix / "bin" / "python"), "-I", "-c", script],
            capture_output=True,
            text=True,
            timeout=PYTHON_ASKED_S,
            env={"PATH": os.defpath},
        )
        magic, tag = done.stdout.split()
        return bytes.fromhex(magic), tag
    except (OSError, ValueError, subprocess.TimeoutExpired) as err:
        raise NotCopied(f"its Python did not say which bytecode it reads ({err})") from None


def first_of(
    prefixes: Iterable[Path], attempt: Callable[[Path], T], say: Callable[[str], None]
) -> T | None:
    """What `attempt` gives for the first of `prefixes` it can take; each refusal is said."""
    for prefix in prefixes:
        try:
            return attempt(prefix)
        except NotCopied as err:
            say(f"not taken from {prefix}: {err}")
        except OSError as err:  # removed or replaced while it was read
            say(f"not taken from {prefix}: it could not be read ({err.strerror or err})")
    return None
