"""An image's conda environment copied from a prefix this host already installed from the same
lock, instead of fetching, linking and installing every package a second time (issue 36).

`invoke install` remembers where it put each conda lock (`remember`); staging that lock for an
image (condalock.stage_for_image) then copies such a prefix (`copy_for_image`) and rewrites, for
the image's path, the files that name the prefix's own path. Those are exactly:
- conda's prefix placeholders (conda-meta's `paths_data`, text and binary): the package's file is
  rebuilt from the installed bytes and must match the package's sha256 in that record, then linked
  for the image's path by rattler's rules (text: every placeholder replaced; binary: each C string
  holding one rewritten in place and padded with NULs to its length);
- the Python entry points rattler wrote (`#!PREFIX/bin/python...` on their first line);
- the scripts uv wrote into bin/ (`#!PREFIX/bin/python`), with their RECORD rows.
gpuenv's own files (the suite, the stack record) are left out, as are the bytecode caches no
package declares; site-packages' bytecode is made again from the bytecode cache.

Nothing is taken on trust. Only a prefix no other user can write is copied (its records vouch for
its files, so another user could make both agree); the copy is judged as `invoke verify` judges a
prefix (validate/intact.py: every file against its record, the packages against the lock), and every
file is scanned for the prefix's path while it is copied. A file that names it where no rule above
covers, a file that differs from its record, a `#!` line too long for the image's path: the copy is
dropped and the lock installed for the image as before, with the reason said. Scripts that rattler
or uv wrote as a /bin/sh trampoline (a long path, a path with a blank) are read back as the `#!`
line a short path gets. The copy is byte for byte what installing the lock for the image gives
(tests/envs/test_staged_cache.py), so the image's environment layer does not depend on which way it
was made.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from gpuenv.datacache import cache_dir
from gpuenv.envs import installed
from validate import intact
from validate.reading import InputRefused, load_json_input, read_text_input
from validate.writing import WriteFailed, write_text_atomic

#: gpuenv's cache folder of where each conda lock was installed on this host.
REGISTRY = "installed-prefixes"
#: Prefixes remembered per lock, the latest first.
KEEP = 4
#: A remembered list or a prefix's record is a few lines: at most this many bytes are read.
MAX_RECORD_BYTES = 1024 * 1024
#: The longest `#!` line rattler and uv write as it is; for a longer one (or a path with a blank)
#: they write a /bin/sh trampoline (_TRAMPOLINE), which this copy reads back as the `#!` line.
MAX_SHEBANG = 127
#: What the copy reads at a time (the scan for the prefix's path spans the pieces' seams).
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


def copy_for_image(
    prefix: Path,
    into: Path,
    *,
    final_prefix: Path,
    lock_sha256: str,
    expected: intact.Expected,
    expected_from: str,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Copy `prefix` (gpuenv installed it from the lock `lock_sha256`) into `into`, rewritten for
    use at `final_prefix`. Raises NotCopied, naming why, and leaves `into` half made: the caller
    removes it."""
    record = _prefix_record(prefix)
    if record.get("lock_sha256") != lock_sha256 or record.get("lock_backend") != "conda-lock":
        raise NotCopied(f"{prefix} holds another lock now")
    old, new = os.fsencode(prefix), os.fsencode(final_prefix)
    if b"\n" in old or old in new or new in old:
        raise NotCopied(f"its path {prefix} cannot be told apart in its files")
    own = {intact.GPUENV_RECORD, *(record.get("files") or {})}
    copied = CopiedTree(into, progress=progress)
    naming = _copy_tree(prefix, copied, old, leave_out=own)
    verdict = intact.check(copied, str(prefix), expected=expected, expected_from=expected_from)
    if verdict.problems:
        first = verdict.problems[0]
        raise NotCopied(
            f"it is not what its lock installed ({len(verdict.problems)} problems; the first: "
            f"{first.path} {first.kind}{': ' + first.detail if first.detail else ''})"
        )
    rewritten, conda_owned = _retarget_conda(into, old, new)
    rewritten |= _retarget_scripts(into, old, new, conda_owned)
    left = sorted(set(naming) - rewritten)
    if left:
        raise NotCopied(
            f"{left[0]} names the prefix's path where no package record or installer script "
            "says it does"
        )


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
            continue  # judged when the copy is checked
        found.update(c.path for c in claims if intact.is_cache(c.path))
    return found


class CopiedTree(intact.FolderTree):
    """The copy, each file's sha256 taken as it was written: the judge reads no file twice."""

    def __init__(self, root: Path, *, progress: Callable[[int], None] | None = None) -> None:
        super().__init__(root, progress=progress)
        self.digests: dict[str, str] = {}

    def sha256(self, path: str) -> str:
        return self.digests.get(path) or super().sha256(path)


def _copy_tree(source: Path, copied: CopiedTree, old: bytes, *, leave_out: set[str]) -> list[str]:
    """`source` into `copied` (links as links), but for `leave_out` and the bytecode no package
    declares. Returns the files whose bytes hold `old`."""
    declared = _declared_caches(source)
    naming = []
    into = Path(copied.root)
    into.mkdir(parents=True)
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
            src, dst = os.path.join(folder, name), os.path.join(into, path)
            info = os.lstat(src)
            _only_yours(path, info)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(src), dst)
                if name in dirs:
                    dirs.remove(name)
            elif stat.S_ISDIR(info.st_mode):
                os.mkdir(dst)
            elif stat.S_ISREG(info.st_mode):
                found, copied.digests[path] = _copy_file(src, dst, old, copied.progress)
                if found:
                    naming.append(path)
                # the image keeps only whether a file runs (images/context.py); the prefix's
                # group and other bits follow its parent folder (install.share_like_parent)
                os.chmod(dst, 0o755 if info.st_mode & 0o111 else 0o644)
            else:
                raise NotCopied(f"{path} is not a file, a folder or a link")
    _drop_empty(into)
    return naming


def _only_yours(path: str, info: os.stat_result) -> None:
    """A prefix another user can change (a group-writable team prefix, another owner's files)
    would put that user's bytes into this user's image, its records rewritten to match: such a
    prefix is installed for the image instead."""
    others = stat.S_IWGRP | stat.S_IWOTH
    if info.st_uid != os.geteuid() or (not stat.S_ISLNK(info.st_mode) and info.st_mode & others):
        raise NotCopied(
            f"{path} can be changed by another user (owner uid {info.st_uid}, mode "
            f"{stat.filemode(info.st_mode)}): only a prefix no one else can write is copied"
        )


def _copy_file(
    src: str, dst: str, old: bytes, progress: Callable[[int], None] | None
) -> tuple[bool, str]:
    """Copy one file: whether `old` is in it, and its sha256."""
    found, tail, digest = False, b"", hashlib.sha256()
    with open(src, "rb") as reader, open(dst, "wb") as writer:
        while block := reader.read(CHUNK):
            writer.write(block)
            digest.update(block)
            if progress:
                progress(len(block))
            if not found:
                found = old in tail + block
                tail = block[-(len(old) - 1) :] if len(old) > 1 else b""
    return found, digest.hexdigest()


def _drop_empty(root: Path) -> None:
    """Folders left empty by what was left out (the suite's, the caches'), as an install of the
    lock alone would not have them."""
    for folder, dirs, files in os.walk(root, topdown=False):
        if folder != str(root) and not os.listdir(folder):
            os.rmdir(folder)


# ---------------------------------------------------------------- conda's files


def _retarget_conda(into: Path, old: bytes, new: bytes) -> tuple[set[str], set[str]]:
    """Each conda record's placeholder files and entry points rewritten for `new`, and the record
    updated with their new sha256 (and size). Returns the paths rewritten, and every path the
    records own."""
    done: set[str] = set()
    owned: set[str] = set()
    for meta in sorted((into / "conda-meta").glob("*.json")):
        record = json.loads(meta.read_bytes())
        changed = False
        for item in (record.get("paths_data") or {}).get("paths") or []:
            path = item.get("_path")
            owned.add(path or "")
            placeholder = item.get("prefix_placeholder")
            if placeholder and item.get("file_mode") in ("text", "binary"):
                target = into / path
                data = _relinked(
                    target.read_bytes(),
                    path,
                    old,
                    new,
                    os.fsencode(placeholder),
                    item["file_mode"],
                    item.get("sha256"),
                )
                target.write_bytes(data)
                item["sha256_in_prefix"] = hashlib.sha256(data).hexdigest()
                if "size_in_bytes" in item:  # rattler records the size as linked
                    item["size_in_bytes"] = len(data)
            elif item.get("path_type") == "unix_python_entry_point":
                target = into / path
                data = _with_interpreter(target.read_bytes(), path, old, new)
                target.write_bytes(data)
                item["sha256"] = hashlib.sha256(data).hexdigest()
                item["size_in_bytes"] = len(data)
            else:
                continue
            changed = True
            done.add(path)
        if changed:
            meta.write_text(record_text(record), encoding="utf-8")
    return done, owned


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


def _retarget_scripts(into: Path, old: bytes, new: bytes, conda_owned: set[str]) -> set[str]:
    """The scripts uv wrote into bin/ (the pip part's entry points: no conda record owns them),
    and their RECORD rows."""
    changed: list[str] = []
    done: set[str] = set()
    for script in sorted((into / "bin").iterdir()):
        path = f"bin/{script.name}"
        if path in conda_owned or script.is_symlink() or not script.is_file():
            continue
        with open(script, "rb") as handle:
            head = _as_shebang(handle.read(len(old) + 64), old)
        if not head.startswith(b"#!" + old):
            continue
        script.write_bytes(_with_interpreter(script.read_bytes(), path, old, new))
        changed.append(str(script))
        done.add(path)
    for site in sorted(into.glob("lib/python3*/site-packages")):
        installed.update_record(site, changed)
    return done


def first_of(
    prefixes: Iterable[Path], attempt: Callable[[Path], None], say: Callable[[str], None]
) -> Path | None:
    """The first of `prefixes` that `attempt` copies from; each refusal is said."""
    for prefix in prefixes:
        try:
            attempt(prefix)
        except NotCopied as err:
            say(f"not copied from {prefix}: {err}")
            continue
        except OSError as err:  # removed or replaced while it was copied
            say(f"not copied from {prefix}: it could not be read ({err.strerror or err})")
            continue
        return prefix
    return None
