"""gpuenv's cache folder, and data files parsed once per content.

PyYAML builds its objects in Python even with libyaml's parser: parsing envs/compat.yaml was
the largest part of `invoke resolve`. `parsed_once` keeps what a parser made of a file's bytes as
JSON in the cache folder, keyed by the bytes' SHA-256 and the parser's `kind` (which names the
parser and its version), so an edited file or another parser misses and parses again. Only data
that JSON gives back exactly is kept (no dates, no keys other than strings). The cache is an
optimisation and never an error: no home folder, a read-only disk or a damaged entry means the
file is parsed as it would have been without it.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable


def cache_dir() -> Path:
    """gpuenv's cache folder: GPUENV_CACHE_DIR, else XDG's cache (~/.cache/gpuenv)."""
    if os.environ.get("GPUENV_CACHE_DIR"):
        return Path(os.environ["GPUENV_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuenv"


#: Entries kept per name (a few versions of a file: checkouts of several branches side by side).
KEEP = 8


def parsed_once(data: bytes, parse: Callable[[bytes], Any], *, name: str, kind: str) -> Any:
    """What `parse(data)` returns, read from the cache when these bytes were parsed by this `kind`
    of parser before. `parse` raising is left to the caller (nothing is cached then). `name` (the
    file's name) prefixes the entry, and only the newest KEEP entries of a name stay."""
    key = hashlib.sha256(kind.encode() + b"\0" + data).hexdigest()
    entry = _entry(f"{name}-{key}")
    if entry is not None:
        try:
            return json.loads(entry.read_bytes())
        except (OSError, ValueError):
            pass  # absent, or damaged: parse again (and rewrite it)
    value = parse(data)
    if entry is not None:
        _store(entry, value)
    return value


def _entry(stem: str) -> Path | None:
    try:
        return cache_dir() / "parsed" / f"{stem}.json"
    except RuntimeError:  # Path.home(): no home folder for this user
        return None


def _store(entry: Path, value: Any) -> None:
    """Write `value` as JSON when it comes back from JSON unchanged; atomically (a reader sees the
    old entry or the whole new one), and quietly not at all when the folder is not writable."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):  # a date, a set, a key that is not a string ...
        return
    if json.loads(text) != value:  # e.g. an int key would come back as a string
        return
    temp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, entry)
        _prune(entry)
    except OSError:
        try:
            temp.unlink(missing_ok=True)
        except OSError:
            pass


def _prune(entry: Path) -> None:
    """Remove all but the newest KEEP entries of the name `entry` has."""
    name = entry.name.rsplit("-", 1)[0]
    older = sorted(
        (p for p in entry.parent.glob(f"{name}-*.json") if p != entry),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for stale in older[KEEP - 1 :]:
        stale.unlink(missing_ok=True)
