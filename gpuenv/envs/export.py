"""Export a stack's environment as an environment.yml a colleague can use with conda or mamba.

Pinned from the stack's lock when one exists (every conda and pip package at its locked version),
else the rendered spec as is. The pip section names the index the framework build needs. A lock
is used only after `lockdir.verify` vouched for it, and only while the team file it merged is
unchanged: a stale or damaged lock is an error, never a silently wrong "pinned" export.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpuenv.envs import lockdir, locking, spec
from gpuenv.errors import BadInput, DataError, GpuenvError
from gpuenv.stack import Stack
from validate.reading import InputRefused, read_text_input, refusal_line
from validate.writing import WriteFailed, write_text_atomic


@dataclass(frozen=True)
class ExportResult:
    path: Path
    lock: Path | None  # the lock file the pins came from, None when unpinned


def pinned_from_lock(
    directory: Path, stack: Stack | None = None
) -> tuple[spec.Pinned, spec.Packages, Path] | None:
    """Pins and spec packages of the verified lock in `directory`, or None when there is no lock."""
    if lockdir.read_metadata(directory) is None and not lockdir.has_lock(directory):
        return None
    lock = lockdir.verify(directory, stack)
    platform = lock.metadata.platforms[0]
    spec_path = directory / lockdir.SPEC_FILE
    try:  # the lock directory comes from the team's repository: read bounded
        spec_text = read_text_input(spec_path, lockdir.MAX_LOCK_TEXT_BYTES)
    except InputRefused as err:
        raise DataError(refusal_line(spec_path, err), fix=lockdir.RELOCK) from None
    packages = spec.parse_environment_file(spec_text, str(spec_path)).packages
    entries = [p for p in lock.packages if p.platform == platform]
    conda = tuple(
        f"{p.name}={p.version}={p.build}" if p.build else f"{p.name}={p.version}"
        for p in entries
        if p.manager == "conda"
    )
    pip = tuple(f"{p.name}=={p.version}" for p in entries if p.manager == "pip")
    return spec.Pinned(conda=conda, pip=pip, platform=platform), packages, lock.path


def check_team_file_unchanged(meta: lockdir.LockMetadata, team_file: Path | None) -> None:
    """The lock merged a team file: the one in use now must be the same bytes, or the pins are
    stale."""
    if meta.env_file:
        return  # a received file was locked as the whole spec; the team file was not part of it
    path, _team, sha = locking.read_team_file_hashed(team_file)
    if sha == meta.team_file_sha256:
        return
    if meta.team_file_sha256 is None:
        what = f"{path} was added since the lock"
    elif sha is None:
        what = f"the team file {meta.team_file} is gone since the lock"
    elif Path(meta.team_file or "").resolve() != path.resolve():
        what = f"it merged {meta.team_file}, this export reads {path}"
    else:
        what = f"{path} changed since the lock"
    raise DataError(
        f"the lock of {meta.stack.stack_id} is out of date: {what}",
        fix="run invoke lock with the same stack options, then export again",
    )


def check_output(output: Path) -> None:
    """`--output` must name a file in a folder that exists: a typo in a folder is named, never
    created."""
    if output.is_dir():
        raise BadInput(
            f"--output {output} is a folder", fix="give a file name such as environment.yml"
        )
    parent = Path(os.path.abspath(output)).parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise BadInput(
            f"--output {output}: the folder {parent} {what}",
            fix="create it first, or give a path in an existing folder",
        )


UNPINNED_FIX = (
    "run invoke lock with the same stack options first (then the file is pinned), or pass "
    "--unpinned to share ranges on purpose"
)


def export_environment(
    stack: Stack, output: Path, *, team_file: Path | None = None, unpinned: bool = False
) -> ExportResult:
    """Write the environment.yml for `stack` to `output` atomically. Without a lock it would hold
    version ranges, which resolve differently next month: refused unless `unpinned` is asked for."""
    check_output(output)
    directory = locking.lock_directory(stack)
    found = pinned_from_lock(directory, stack)
    if found is None and not unpinned:
        raise BadInput(
            f"{stack.stack_id} has no lock in {directory}: the environment.yml would not be pinned",
            fix=UNPINNED_FIX,
        )
    if found is not None:
        meta = lockdir.read_metadata(directory)
        assert meta is not None  # verified just now
        check_team_file_unchanged(meta, team_file)
        pinned, packages, lock_path = found
        text = spec.render_export(
            stack, packages, pinned, channels=lock_channels(lock_path, meta.backend)
        )
    else:
        _, team = locking.read_team_file(team_file)
        text = spec.render_export(stack, spec.merge_packages(stack, team), None)
        lock_path = None
    _write(output, text)
    return ExportResult(path=output, lock=lock_path)


def lock_channels(lock_path: Path, backend: str) -> tuple[str, ...]:
    """The channels a conda lock was solved from (conda-lock.yml's `metadata.channels`), as an
    environment.yml names them: `conda-forge` for the default alias's channel, else its URL (a
    `file://` channel stays one, so a colleague's conda reads the same packages). None for a uv
    lock."""
    import yaml

    from gpuenv.envs.conda import DEFAULT_CHANNEL_ALIAS

    if backend != "conda-lock":
        return ()
    try:  # verified by lockdir.verify just before; read bounded all the same
        data = yaml.safe_load(read_text_input(lock_path, lockdir.MAX_LOCK_TEXT_BYTES))
    except (InputRefused, yaml.YAMLError) as err:
        raise DataError(
            f"{lock_path}: its channels cannot be read ({err})", fix=lockdir.RELOCK
        ) from None
    meta = data.get("metadata") if isinstance(data, dict) else None
    channels = []
    for entry in (meta or {}).get("channels") or []:
        url = str(entry.get("url", "") if isinstance(entry, dict) else entry).rstrip("/")
        if not url or url == "nodefaults":
            continue
        alias = DEFAULT_CHANNEL_ALIAS + "/"
        channels.append(url[len(alias) :] if url.startswith(alias) else url)
    return tuple(channels)


def lock_file_for_sharing(stack: Stack) -> Path:
    """The stack's verified lock file (conda-lock.yml or requirements.lock.txt): every package
    with its hash, the form conda-lock and pixi share. A missing lock is one line with the fix."""
    directory = locking.lock_directory(stack)
    if not lockdir.has_lock(directory):
        raise BadInput(
            f"{stack.stack_id} has no lock in {directory}: there is no hashed form to share yet",
            fix="run invoke lock with the same stack options first",
        )
    return lockdir.verify(directory, stack).path


def export_lock(stack: Stack, output: Path) -> ExportResult:
    """Copy the stack's verified, hashed lock file to `output` atomically."""
    check_output(output)
    source = lock_file_for_sharing(stack)
    _write(output, source.read_text(encoding="utf-8"))
    return ExportResult(path=output, lock=source)


def _write(output: Path, text: str) -> None:
    try:
        write_text_atomic(output, text)
    except WriteFailed as err:
        if err.user_fault:
            raise BadInput(f"--output {err}", fix="give a path in a folder you can write") from None
        raise GpuenvError(f"--output {err}", fix="free some space and run it again") from None
