"""The project's current stack: `envs/locks/current.json`, the stack `lock` and `build` last made.

uv and pixi work from the project's one lock; gpuenv keeps one lock per stack, so this small file
says which of them the project is on. The team commits it with `envs/locks/`, and `build`, `run`,
`validate`, `push`, `install` and `export` address that stack when no stack option is given.

The file holds the options that name the stack whatever the host (CUDA, Python, the framework
release), so a task re-resolves it through the same rules as `--cuda ... --python ...`, and the
stack id it must come back to. It has no time stamp: rebuilding the same stack leaves it unchanged.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuenv import __version__
from gpuenv.errors import DataError
from gpuenv.stack import Stack
from validate.reading import InputRefused, decode_input, load_json_input, read_input
from validate.writing import WriteFailed, write_text_atomic

FILE_NAME = "current.json"
FORMAT = "gpuenv-current-stack/1"
#: At most this many bytes are read: the file is a few lines.
MAX_BYTES = 64 * 1024
FIX = (
    "delete it, or run `invoke build` (or `invoke lock`) with your stack options to record a "
    "stack again"
)


@dataclass(frozen=True)
class CurrentStack:
    """What current.json records: the stack id, the options that name it, and which task made it."""

    stack_id: str
    framework: str
    release: str
    cuda: str
    python: str
    strict_driver: bool
    made_by: str  # "lock" or "build"
    lock_file: str  # the lock file, relative to the locks folder
    #: The gpuenv that wrote the file ("" when it did not say): a newer one may name a stack
    #: (a CUDA release) this one does not know, and the message says so.
    written_by: str = ""

    def options(self) -> dict[str, Any]:
        """The stack options that name this stack, as a task's command line would give them."""
        return {
            "framework": self.framework,
            self.framework: self.release,
            "cuda": self.cuda,
            "python": self.python,
            "strict_driver": self.strict_driver,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "stack_id": self.stack_id,
            "framework": self.framework,
            "release": self.release,
            "cuda": self.cuda,
            "python": self.python,
            "strict_driver": self.strict_driver,
            "made_by": self.made_by,
            "lock_file": self.lock_file,
            "gpuenv_version": self.written_by or __version__,
        }

    @classmethod
    def from_dict(cls, data: Any, where: Path) -> "CurrentStack":
        """Parse current.json: any wrong shape is one DataError naming the file and the key."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DataError(f"{where}: not a gpuenv current-stack file (format {FORMAT})", fix=FIX)
        for key in ("stack_id", "framework", "release", "cuda", "python", "made_by", "lock_file"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise DataError(f"{where}: {key!r} is missing or not a string", fix=FIX)
        if data["framework"] not in ("torch", "tensorflow"):
            raise DataError(
                f"{where}: framework {data['framework']!r} is not torch or tensorflow", fix=FIX
            )
        if not isinstance(data.get("strict_driver"), bool):
            raise DataError(f"{where}: 'strict_driver' is not true or false", fix=FIX)
        written_by = data.get("gpuenv_version", "")
        return cls(
            stack_id=data["stack_id"],
            framework=data["framework"],
            release=data["release"],
            cuda=data["cuda"],
            python=data["python"],
            strict_driver=data["strict_driver"],
            made_by=data["made_by"],
            lock_file=data["lock_file"],
            written_by=written_by if isinstance(written_by, str) else "",
        )

    def unusable(self, where: Path, reason: str) -> DataError:
        """This file's stack cannot be resolved by this gpuenv (a newer one may have written it):
        one line naming the file, the version that wrote it and this one, never an option the
        user did not type (`reason` loses its leading "--cuda 13.6: ")."""
        reason = re.sub(r"^--[a-z][a-z-]* \S+: ", "", reason)
        by = f"gpuenv {self.written_by}" if self.written_by else "another gpuenv"
        newer = self.written_by or "the version that wrote it"
        return DataError(
            f"{where} (written by {by}) names {self.stack_id}, which this gpuenv "
            f"{__version__} cannot use: {reason}",
            fix=f"give stack options, or upgrade gpuenv to {newer}",
        )


def current_file(locks_root: Path) -> Path:
    return locks_root / FILE_NAME


def record(
    locks_root: Path, stack: Stack, *, made_by: str, lock_file: Path, strict_driver: bool
) -> tuple[Path, bool]:
    """Make `stack` the project's current stack. Returns the file and whether it changed."""
    try:
        relative = lock_file.resolve().relative_to(locks_root.resolve()).as_posix()
    except ValueError:
        relative = str(lock_file)
    entry = CurrentStack(
        stack_id=stack.stack_id,
        framework=stack.framework,
        release=stack.framework_version,
        cuda=stack.cuda,
        python=stack.python,
        strict_driver=strict_driver,
        made_by=made_by,
        lock_file=relative,
    )
    path = current_file(locks_root)
    try:
        recorded = read(locks_root)
    except DataError:
        recorded = None  # a damaged record is replaced by the stack just made
    if recorded and recorded.to_dict() == {**entry.to_dict(), "made_by": recorded.made_by}:
        return (
            path,
            False,
        )  # the same stack: the committed file stays as it is (a build after its lock is no change)
    text = json.dumps(entry.to_dict(), indent=2) + "\n"
    try:
        write_text_atomic(path, text)
    except (WriteFailed, OSError) as err:
        raise DataError(
            f"cannot record the current stack in {path}: {err}", fix="make envs/locks writable"
        ) from None
    return path, True


def read(locks_root: Path) -> CurrentStack | None:
    """The recorded current stack, or None when none was recorded."""
    path = current_file(locks_root)
    if not path.exists():
        return None
    try:  # the one bounded reader: a FIFO or a link to /dev/zero is refused, never read
        raw = read_input(path, MAX_BYTES)
    except InputRefused as err:
        raise DataError(f"{path}: {err}", fix=FIX) from None
    try:
        data = load_json_input(decode_input(raw), max_depth=4)
    except InputRefused as err:
        raise DataError(f"{path} is not JSON: {err}", fix=FIX) from None
    return CurrentStack.from_dict(data, path)
