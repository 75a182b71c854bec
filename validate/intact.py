"""Is an installed environment what its packages declare? The judge behind `invoke verify` and the
suite's "environment intact" row.

Every file a package installed is declared with its sha256, as `rpm -V` and `debsums` check:
- conda packages: the prefix's `conda-meta/<name>-<version>-<build>.json`, whose `paths_data`
  is the package's `info/paths.json` as the installer linked it. A file whose prefix was
  rewritten (`prefix_placeholder`) is checked against `sha256_in_prefix`, the digest the
  installer (rattler) recorded after the rewrite; a symbolic link's `sha256_in_prefix` is the
  digest of its target's text, and an entry point's `sha256` that of the script written;
- pip packages: each `*.dist-info/RECORD` (PEP 376, PEP 627): `path,sha256=<urlsafe base64,
  no padding>,size`, paths relative to site-packages;
- gpuenv's own files in a prefix (the suite, the stack record): the `files` map of
  `gpuenv-prefix.json`.
Then every file is owned, or it is named: altered (the bytes or the kind differ), missing, or
unowned (no package declares it: an added module, a stray script). Bytecode caches are not
files any package declares, and what installers and venv creators write beside the packages
(`conda-meta/`, `pyvenv.cfg`, the activate scripts, the interpreter links of a venv) is listed
as scaffolding, never judged. With the lock's package list (`Expected`), a package that the lock
does not hold (`pip install` of another one) or does not hold at that version is named too.

Pure over a `Tree`: a folder on disk (`FolderTree`) or a tar stream of one (`TarTree`, what the
Docker engine hands out of an image without running it). Stdlib only: the suite runs it inside
images, where gpuenv is not installed.
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import io
import json
import os
import posixpath
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

#: A conda-meta record or a RECORD larger than this is refused (torch's RECORD is under 2 MB).
MAX_METADATA_BYTES = 64 * 1024 * 1024
#: What the checker reads at a time while hashing.
BLOCK = 1 << 20
FILE, LINK, DIR = "file", "link", "dir"

ALTERED, MISSING, UNOWNED = "altered", "missing", "unowned"
EXTRA_PACKAGE, MISSING_PACKAGE, OTHER_VERSION = "extra package", "missing package", "other version"

#: gpuenv's record of a prefix it installed (gpuenv/envs/install.py: RECORD_FILE).
GPUENV_RECORD = "gpuenv-prefix.json"

#: Written by installers and venv creators beside the packages; no package declares them.
_SCAFFOLDING = re.compile(
    r"^(?:conda-meta/.*|CACHEDIR\.TAG|\.lock|\.gitignore|pyvenv\.cfg|lib64|"
    + re.escape(GPUENV_RECORD)
    + "|"
    r"bin/(?:activate[^/]*|Activate\.ps1|deactivate\.bat|pydoc\.bat|python(?:3(?:\.\d+)?)?)|"
    r"lib/python3\.\d+/site-packages/_virtualenv\.(?:py|pth))$"
)
#: Installed distributions sit in site-packages itself; a dist-info deeper down
#: (setuptools/_vendor/wheel-0.46.3.dist-info) is a file of the package that vendors it.
_RECORD = re.compile(r"^lib/python3\.\d+/site-packages/(?P<dist>[^/]+)\.dist-info/RECORD$")
_CONDA_META = re.compile(r"^conda-meta/[^/]+\.json$")


def is_cache(path: str) -> bool:
    """Bytecode caches: Python (or an installer's compile step) writes them; no package owns
    them."""
    parts = path.split("/")
    return "__pycache__" in parts or ".pytest_cache" in parts or path.endswith((".pyc", ".pyo"))


def is_scaffolding(path: str) -> bool:
    return bool(_SCAFFOLDING.match(path))


def is_metadata(path: str) -> bool:
    """The files the checker reads to learn what is owned (kept whole by a TarTree)."""
    return bool(_CONDA_META.match(path) or _RECORD.match(path)) or path == GPUENV_RECORD


# ---------------------------------------------------------------- what is on disk


@dataclass(frozen=True)
class Entry:
    """One path of the environment as found: its kind, size (files) and target (links)."""

    kind: str
    size: int = 0
    target: str = ""


class Tree(Protocol):
    """An environment's files, relative to its root, as posix paths (`bin/python`)."""

    def entries(self) -> Mapping[str, Entry]: ...

    def read(self, path: str, limit: int) -> bytes: ...

    def sha256(self, path: str) -> str: ...


class TreeError(Exception):
    """The environment could not be read (a folder that is not there, a broken tar stream)."""


class FolderTree:
    """A folder on disk; symbolic links are never followed."""

    def __init__(
        self, root: str | os.PathLike[str], *, progress: Callable[[int], None] | None = None
    ) -> None:
        self.root = os.fspath(root)
        self.progress = progress
        self._entries: dict[str, Entry] | None = None

    def entries(self) -> Mapping[str, Entry]:
        if self._entries is None:
            if not os.path.isdir(self.root):
                raise TreeError(f"{self.root} is not a folder")
            found: dict[str, Entry] = {}
            for folder, dirs, files in os.walk(self.root):
                rel = os.path.relpath(folder, self.root)
                for name in dirs + files:
                    path = name if rel == "." else f"{rel}/{name}".replace(os.sep, "/")
                    try:
                        info = os.lstat(os.path.join(folder, name))
                    except OSError:
                        continue
                    if stat.S_ISLNK(info.st_mode):
                        found[path] = Entry(LINK, 0, os.readlink(os.path.join(folder, name)))
                    elif stat.S_ISDIR(info.st_mode):
                        found[path] = Entry(DIR)
                    elif stat.S_ISREG(info.st_mode):
                        found[path] = Entry(FILE, info.st_size)
                    else:
                        found[path] = Entry("special")
                dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
            self._entries = found
        return self._entries

    def read(self, path: str, limit: int) -> bytes:
        with open(os.path.join(self.root, path), "rb") as handle:
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise TreeError(f"{path} is larger than {limit} bytes")
        return data

    def sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with open(os.path.join(self.root, path), "rb") as handle:
            while block := handle.read(BLOCK):
                digest.update(block)
                if self.progress:
                    self.progress(len(block))
        return digest.hexdigest()


# ---------------------------------------------------------------- what the packages declare


@dataclass(frozen=True)
class Claim:
    """What one package declares about one path."""

    path: str
    owner: str
    kind: str
    sha256: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class Package:
    """An installed package as its records name it."""

    manager: str  # "conda" or "pip"
    name: str
    version: str
    #: conda: the package archive's sha256 its record keeps; pip: ""
    sha256: str = ""


def _json(tree: Tree, path: str) -> object:
    return json.loads(tree.read(path, MAX_METADATA_BYTES).decode("utf-8"))


def conda_claims(tree: Tree, path: str) -> tuple[Package, list[Claim]]:
    """A conda-meta record's package and its `paths_data` (else, from older installers, `files`
    with nothing but their presence to check)."""
    record = _json(tree, path)
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    package = Package(
        "conda",
        str(record.get("name", "")),
        str(record.get("version", "")),
        str(record.get("sha256") or ""),
    )
    owner = f"{package.name} {package.version} ({record.get('build', '')}) [conda]"
    claims = []
    paths = (
        (record.get("paths_data") or {}).get("paths")
        if isinstance(record.get("paths_data"), dict)
        else None
    )
    if isinstance(paths, list):
        for item in paths:
            if not isinstance(item, dict) or not isinstance(item.get("_path"), str):
                continue
            kind = {"softlink": LINK, "directory": DIR}.get(str(item.get("path_type")), FILE)
            rewritten = "sha256_in_prefix" in item
            digest = item.get("sha256_in_prefix") or item.get("sha256")
            size = (
                item.get("size_in_bytes")
                if kind == FILE and not rewritten and not item.get("file_mode")
                else None
            )
            claims.append(
                Claim(
                    item["_path"],
                    owner,
                    kind,
                    str(digest) if digest else None,
                    int(size) if isinstance(size, int) else None,
                )
            )
    else:
        claims = [Claim(p, owner, FILE) for p in record.get("files") or [] if isinstance(p, str)]
    return package, claims


def record_hash(text: str) -> str | None:
    """`sha256=<urlsafe base64, no padding>` as hex; None for no hash or another algorithm."""
    algorithm, _, value = text.partition("=")
    if algorithm != "sha256" or not value:
        return None
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    except (binascii.Error, ValueError):
        return None


def record_claims(tree: Tree, path: str) -> tuple[Package, list[Claim]]:
    """A dist-info's RECORD as claims on paths relative to the environment's root. Rows that
    leave the environment (`../../..` past its root) are not the environment's to check."""
    dist = _RECORD.match(path).group("dist")  # type: ignore[union-attr]
    name, _, version = dist.partition("-")
    package = Package("pip", name, version)
    owner = f"{name} {version} [pip]"
    base = posixpath.dirname(posixpath.dirname(path))
    text = tree.read(path, MAX_METADATA_BYTES).decode("utf-8")
    claims = []
    for row in csv.reader(io.StringIO(text)):
        if not row or not row[0]:
            continue
        where = (
            posixpath.normpath(posixpath.join(base, row[0])) if not row[0].startswith("/") else "/"
        )
        if where.startswith(("../", "/")) or where == "..":
            continue
        digest = record_hash(row[1]) if len(row) > 1 else None
        size = int(row[2]) if len(row) > 2 and row[2].isdigit() else None
        claims.append(Claim(where, owner, FILE, digest, size))
    return package, claims


def gpuenv_claims(tree: Tree) -> list[Claim]:
    """The files gpuenv put into a prefix it installed, from `gpuenv-prefix.json`'s `files`."""
    if tree.entries().get(GPUENV_RECORD, Entry("none")).kind != FILE:
        return []
    record = _json(tree, GPUENV_RECORD)
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        return []
    return [
        Claim(p, "gpuenv [its own files]", FILE, str(d))
        for p, d in files.items()
        if isinstance(p, str)
    ]


# ---------------------------------------------------------------- the verdict


@dataclass(frozen=True)
class Problem:
    kind: str
    path: str
    owner: str
    detail: str

    def line(self) -> str:
        return (
            f"{self.kind}: {self.path}"
            + (f" ({self.owner})" if self.owner else "")
            + (f": {self.detail}" if self.detail else "")
        )


@dataclass(frozen=True)
class Expected:
    """The packages a lock installs: conda name -> version, pip name -> version. `allowed`:
    pip names the environment may hold beyond the lock (what `python -m venv` adds by ensurepip)."""

    conda: Mapping[str, str]
    pip: Mapping[str, str]
    allowed: frozenset[str] = frozenset()


@dataclass
class Verdict:
    root: str
    packages: list[Package] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files_checked: int = 0
    files_hashed: int = 0
    bytes_hashed: int = 0
    caches: int = 0
    scaffolding: list[str] = field(default_factory=list)
    #: what was only size-checked, when hashing was sampled (the suite's --quick)
    sampled: str = ""
    #: how the package list was compared ("" when it was not)
    compared: str = ""
    #: what was found of the image's environment layer ("" for a prefix)
    layer: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "format": "gpuenv-verify/1",
            "root": self.root,
            "ok": self.ok,
            "problems": [
                {"kind": p.kind, "path": p.path, "owner": p.owner, "detail": p.detail}
                for p in self.problems
            ],
            "packages": {
                "conda": sum(p.manager == "conda" for p in self.packages),
                "pip": sum(p.manager == "pip" for p in self.packages),
            },
            "files_checked": self.files_checked,
            "files_hashed": self.files_hashed,
            "bytes_hashed": self.bytes_hashed,
            "caches_skipped": self.caches,
            "scaffolding": self.scaffolding,
            "sampled": self.sampled,
            "compared_with_lock": self.compared,
            "environment_layer": self.layer,
        }


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def check(
    tree: Tree,
    root: str,
    *,
    expected: Expected | None = None,
    expected_from: str = "",
    hash_limit: int | None = None,
) -> Verdict:
    """Judge `tree` against what its packages declare (and `expected`, the lock's packages).

    `hash_limit`: hash only files up to that size, check the larger ones by size (the suite's
    --quick); None hashes every file.
    """
    verdict = Verdict(root)
    entries = tree.entries()
    claims, conda_owned = _read_claims(tree, entries, verdict)
    skipped_large = sum(
        _check_claims(tree, path, entries.get(path), claims[path], verdict, hash_limit)
        for path in sorted(claims)
    )
    for path, entry in sorted(entries.items()):
        if entry.kind == DIR or path in claims:
            continue
        if is_cache(path):
            verdict.caches += 1
        elif is_scaffolding(path):
            verdict.scaffolding.append(path)
        else:
            verdict.problems.append(Problem(UNOWNED, path, "", "no package declares it"))
    if hash_limit is not None:
        verdict.sampled = (
            f"files over {hash_limit} bytes checked by size only ({skipped_large} of them)"
        )
    verdict.compared = expected_from or ("the lock" if expected is not None else "")
    if expected is not None:
        verdict.problems += compare_packages(verdict.packages, conda_owned, expected, expected_from)
    return verdict


def _read_claims(
    tree: Tree, entries: Mapping[str, Entry], verdict: Verdict
) -> tuple[dict[str, list[Claim]], set[str]]:
    """What every package record in `tree` declares (conda-meta/*.json, *.dist-info/RECORD, and
    gpuenv's own files), by path; and the paths conda's records claim. Each package read goes
    into `verdict.packages`; a record that cannot be read is an ALTERED problem."""
    claims: dict[str, list[Claim]] = {}
    conda_owned: set[str] = set()
    for path in sorted(entries):
        if entries[path].kind != FILE or not (_CONDA_META.match(path) or _RECORD.match(path)):
            continue
        try:
            package, found = (
                conda_claims(tree, path)
                if path.startswith("conda-meta/")
                else record_claims(tree, path)
            )
        except (ValueError, UnicodeDecodeError, TreeError, csv.Error) as err:
            verdict.problems.append(
                Problem(ALTERED, path, "", f"the package record cannot be read ({err})")
            )
            continue
        if path.startswith("conda-meta/"):
            conda_owned.update(c.path for c in found)
        verdict.packages.append(package)
        for claim in found:
            claims.setdefault(claim.path, []).append(claim)
    for claim in gpuenv_claims(tree):
        claims.setdefault(claim.path, []).append(claim)
    return claims, conda_owned


def _check_claims(
    tree: Tree,
    path: str,
    entry: Entry | None,
    path_claims: list[Claim],
    verdict: Verdict,
    hash_limit: int | None,
) -> int:
    """Hold the entry at `path` to each package's claim on it, adding a problem to `verdict`
    (the first missing, altered or differing file ends the path's checks: one problem a path).
    Returns how many claims were checked by size only, being over `hash_limit`."""
    skipped_large = 0
    for claim in path_claims:
        if claim.kind == DIR:
            if entry is None or entry.kind != DIR:
                verdict.problems.append(
                    Problem(MISSING, path, claim.owner, "a folder the package declares")
                )
            continue
        if entry is None:
            verdict.problems.append(Problem(MISSING, path, claim.owner, ""))
            break
        if claim.kind != entry.kind:
            verdict.problems.append(
                Problem(
                    ALTERED, path, claim.owner, f"declared a {claim.kind}, found a {entry.kind}"
                )
            )
            break
        if claim.path.endswith(".dist-info/RECORD") and claim.sha256 is None:
            continue  # a RECORD names itself without a hash
        verdict.files_checked += 1
        if entry.kind == LINK:
            if claim.sha256 and hashlib.sha256(entry.target.encode()).hexdigest() != claim.sha256:
                verdict.problems.append(
                    Problem(ALTERED, path, claim.owner, f"the link points to {entry.target!r}")
                )
            continue
        if claim.size is not None and claim.size != entry.size:
            verdict.problems.append(
                Problem(ALTERED, path, claim.owner, f"{entry.size} bytes, declared {claim.size}")
            )
            break
        if claim.sha256 is None:
            continue
        if hash_limit is not None and entry.size > hash_limit:
            skipped_large += 1
            continue
        verdict.files_hashed += 1
        verdict.bytes_hashed += entry.size
        if tree.sha256(path) != claim.sha256:
            verdict.problems.append(
                Problem(ALTERED, path, claim.owner, "its sha256 differs from the declared one")
            )
            break
    return skipped_large


def compare_packages(
    packages: Iterable[Package], conda_owned: set[str], expected: Expected, where: str = ""
) -> list[Problem]:
    """The installed packages against the lock's: extra, missing, or at another version or build.
    A pip distribution that a conda package installed (its dist-info is in a conda record) is
    that conda package's, not the pip part's."""
    where = where or "the lock"
    problems = []
    conda = {p.name: p for p in packages if p.manager == "conda"}
    pip = {}
    for p in packages:
        if p.manager == "pip" and not any(
            path.endswith(f"/{p.name}-{p.version}.dist-info/RECORD") for path in conda_owned
        ):
            pip[normalize(p.name)] = p
    for name, package in sorted(conda.items()):
        if name not in expected.conda:
            problems.append(
                Problem(
                    EXTRA_PACKAGE,
                    f"conda-meta ({name})",
                    f"{name} {package.version} [conda]",
                    f"{where} holds no {name}",
                )
            )
        elif expected.conda[name] != package.version:
            problems.append(
                Problem(
                    OTHER_VERSION,
                    f"conda-meta ({name})",
                    f"{name} {package.version} [conda]",
                    f"{where} pins {expected.conda[name]}",
                )
            )
    for name in sorted(set(expected.conda) - set(conda)):
        problems.append(
            Problem(
                MISSING_PACKAGE, f"conda-meta ({name})", f"{name} [conda]", f"{where} installs it"
            )
        )
    want = {normalize(k): v for k, v in expected.pip.items()}
    allowed = {normalize(n) for n in expected.allowed}
    for name, package in sorted(pip.items()):
        dist = f"{package.name}-{package.version}.dist-info"
        if name not in want:
            if name not in allowed:
                problems.append(
                    Problem(
                        EXTRA_PACKAGE,
                        dist,
                        f"{package.name} {package.version} [pip]",
                        f"{where} holds no {name}",
                    )
                )
        elif want[name] != package.version:
            problems.append(
                Problem(
                    OTHER_VERSION,
                    dist,
                    f"{package.name} {package.version} [pip]",
                    f"{where} pins {want[name]}",
                )
            )
    for name in sorted(set(want) - set(pip)):
        problems.append(
            Problem(MISSING_PACKAGE, name, f"{name} [pip]", f"{where} installs {name} {want[name]}")
        )
    return problems
