"""The bytecode cache's two rules, kept in one place for both of its users: the bytecode step an
install runs in the environment's own Python (condalock.BYTECODE_SCRIPT, which this file's text
leads) and the image's environment read from an installed prefix (fromhost), which takes each
.pyc by the same key. Standard library only, and valid on every Python an environment may have.

An entry is a .pyc (checked-hash, naming its source by its path in the prefix) followed by its
own sha256, filed under the sha256 of the Python's magic number, the source's path in the prefix
and its bytes: a .pyc depends on nothing else, so the host's prefix and the image's environment of
one lock compile each file once between them.
"""

from __future__ import annotations

import hashlib
import os


def entry_path(cache: str, magic: bytes, rel: str, source: bytes) -> str:
    """Where the .pyc of `source`, at `rel` in the prefix, compiled by the Python of `magic`, is
    kept under `cache`."""
    key = magic + b"checked-hash+sha256\0" + os.fsencode(rel) + b"\0" + source
    name = hashlib.sha256(key).hexdigest()
    return os.path.join(cache, name[:2], name + ".pyc")


def cached_code(entry: str, magic: bytes) -> bytes | None:
    """The .pyc an entry holds, or None when it is missing, cut short, changed or of another
    Python (one that broke would break the import that loads it)."""
    try:
        with open(entry, "rb") as reader:
            data = reader.read()
    except OSError:
        return None
    code, check = data[:-32], data[-32:]
    if code[:4] == magic and hashlib.sha256(code).digest() == check:
        return code
    return None
