"""pytest plugin for a guard run in a subprocess: every uv lock this session makes holds a wrong hash.

`pytest -p wrong_hash_lock ...` (tests/ on PYTHONPATH): after the real `ensure_lock`, every hash of
the first package that is not torch is replaced by one no file has, and the metadata's lock_sha256
is updated to the new bytes, so gpuenv accepts the lock as its own. That is a bad lock as a broken
locker would write it: only a download that checks hashes (pip --require-hashes) can tell.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from gpuenv.envs import locking

WRONG = "sha256:" + "0" * 64
_real_ensure_lock = locking.ensure_lock


def with_wrong_hashes(text: str) -> str:
    """`text` (a uv lock) with every hash of its first package that is not torch replaced by WRONG."""
    name = next(line.split("==")[0] for line in text.splitlines() if "==" in line and not line.startswith((" ", "torch==")))
    out, inside = [], False
    for line in text.splitlines(keepends=True):
        if not line.startswith((" ", "\t")):
            inside = line.startswith(f"{name}==")
        out.append(re.sub(r"sha256:[0-9a-f]{64}", WRONG, line) if inside else line)
    return "".join(out)


def _ensure_wrong_lock(*args, **kwargs):
    result = _real_ensure_lock(*args, **kwargs)
    lock = Path(result.directory) / "requirements.lock.txt"
    bad = with_wrong_hashes(lock.read_text())
    lock.write_text(bad)
    meta = Path(result.directory) / "stack.json"
    data = json.loads(meta.read_text())
    data["lock_sha256"] = hashlib.sha256(bad.encode()).hexdigest()
    meta.write_text(json.dumps(data, indent=2) + "\n")
    return result


locking.ensure_lock = _ensure_wrong_lock
