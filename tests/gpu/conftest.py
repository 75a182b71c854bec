"""The GPU test set runs only when asked for (`pytest -m gpu`), on a machine with NVIDIA GPUs and
the NVIDIA Container Toolkit. Without -m gpu it is not collected: a machine without GPUs gains no
skips from it. Asked for on a machine without them, every test skips with the exact outside cause.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave this folder's tests out unless the mark expression asks for `gpu`."""
    if collection_path.name.startswith("test_") and "gpu" not in (config.option.markexpr or ""):
        return True
    return None
