"""pytest plugin for a guard run in a subprocess: every uv lock this session makes holds a wrong
hash.

`pytest -p wrong_hash_lock ...` (tests/ on PYTHONPATH): after the real `ensure_lock`, every hash of
the first package that is not torch is replaced by one no file has, and the metadata's lock_sha256
is updated to the new bytes, so gpuenv accepts the lock as its own. That is a bad lock as a broken
locker would write it: only a download that checks hashes (pip --require-hashes) can tell.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from badlocks import with_wrong_hashes

from gpuenv.envs import locking

_real_ensure_lock = locking.ensure_lock


def _ensure_wrong_lock(*args, **kwargs):
    result = _real_ensure_lock(*args, **kwargs)
    lock = Path(result.directory) / "requirements.lock.txt"
    bad = with_wrong_hashes(lock.read_text())
    lock.write_text(bad)
    meta = Path(result.directory) / "stack.json"
    data = json.loads(meta.read_text())
    data["lock_sha256"] = hashlib.sha256(bad.encode()).hexdigest()
    meta.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return result


locking.ensure_lock = _ensure_wrong_lock
