"""Export a stack's environment as an environment.yml a colleague can use with conda or mamba.

Pinned from the stack's lock when one exists (every conda and pip package at its locked version),
else the rendered spec as is. The pip section names the index the framework build needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuenv import locking, spec
from gpuenv.errors import BadInput
from gpuenv.stack import Stack
from validate.files import write_text_atomic


@dataclass(frozen=True)
class ExportResult:
    path: Path
    lock: Path | None  # the lock file the pins came from, None when unpinned


def pinned_from_lock(directory: Path) -> tuple[spec.Pinned, spec.Packages, Path] | None:
    """Pins and spec packages of the lock in `directory`, or None when there is no lock."""
    meta = locking.read_metadata(directory)
    if meta is None:
        return None
    backend = meta.get("backend", "conda-lock")
    platform = (meta.get("platforms") or ["linux-64"])[0]
    lock_path = directory / locking.lock_file_name(backend)
    spec_path = directory / locking.SPEC_FILE
    if not lock_path.is_file() or not spec_path.is_file():
        return None
    packages = spec.parse_environment_file(spec_path.read_text(encoding="utf-8"), str(spec_path)).packages
    if backend == "uv":
        entries = locking.read_requirements_lock(lock_path, platform)
        pinned = spec.Pinned(conda=(), pip=tuple(f"{p.name}=={p.version}" for p in entries), platform=platform)
    else:
        entries = [p for p in locking.read_conda_lock(lock_path) if p.platform == platform]
        conda = tuple(f"{p.name}={p.version}={p.build}" if p.build else f"{p.name}={p.version}" for p in entries if p.manager == "conda")
        pip = tuple(f"{p.name}=={p.version}" for p in entries if p.manager == "pip")
        pinned = spec.Pinned(conda=conda, pip=pip, platform=platform)
    return pinned, packages, lock_path


def export_environment(stack: Stack, output: Path, *, team_file: Path | None = None) -> ExportResult:
    """Write the environment.yml for `stack` to `output` atomically."""
    if output.is_dir():
        raise BadInput(f"--output {output} is a folder", fix="give a file name such as environment.yml")
    found = pinned_from_lock(locking.lock_directory(stack))
    if found is not None:
        pinned, packages, lock_path = found
        text = spec.render_export(stack, packages, pinned)
    else:
        _, team = locking.read_team_file(team_file)
        text = spec.render_export(stack, spec.merge_packages(stack, team), None)
        lock_path = None
    write_text_atomic(output, text)
    return ExportResult(path=output, lock=lock_path)
