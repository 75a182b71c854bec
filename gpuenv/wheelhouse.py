"""A wheel folder for air-gapped servers: the one place that lists it (the resolver reads names only)."""

from __future__ import annotations

from pathlib import Path

from gpuenv.errors import BadInput


def wheel_names(folder: str | Path) -> tuple[str, ...]:
    """The .whl file names in `folder`; a missing folder or a file given instead is bad input."""
    path = Path(folder).expanduser()
    if not path.exists():
        raise BadInput(f"--wheelhouse {folder}: no such folder", fix="give the folder that holds the .whl files")
    if not path.is_dir():
        raise BadInput(f"--wheelhouse {folder} is a file, not a folder", fix="give the folder that holds the .whl files")
    return tuple(sorted(p.name for p in path.iterdir() if p.name.endswith(".whl")))
