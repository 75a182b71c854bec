"""Fleet tests: make tests/fleet importable as a folder of helpers (suitecases, servers)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
