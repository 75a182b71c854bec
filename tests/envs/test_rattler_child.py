"""The child Python that runs each py-rattler solve and link (gpuenv/envs/conda.py: _run_child,
`python -m gpuenv.envs.conda`) starts once per lock and once per install: it loads only what the
child's work needs. What the parent alone needs is imported where it is used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Modules the child never needs: the lock folder's reader (YAML, packaging's parsers) and
#: urllib's HTTP client (downloads are the parent's). Together a third of the child's start.
CHILD_NEVER_LOADS = ("gpuenv.envs.lockdir", "urllib.request", "http.client", "yaml", "packaging")

#: What `python -m gpuenv.envs.conda` loads before its child's work (the module's own imports),
#: then the modules loaded.
_LOADED = """
import sys
import gpuenv.envs.conda
print("\\n".join(sorted(sys.modules)))
"""


def test_the_rattler_child_loads_neither_the_lock_reader_nor_an_http_client():
    done = subprocess.run(
        [sys.executable, "-c", _LOADED],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(done.stdout.split())
    assert {"gpuenv.envs.conda", "gpuenv.errors"} <= loaded
    unneeded = sorted(
        name
        for name in loaded
        if any(name == never or name.startswith(never + ".") for never in CHILD_NEVER_LOADS)
    )
    assert unneeded == [], f"the rattler child loads {unneeded}"
