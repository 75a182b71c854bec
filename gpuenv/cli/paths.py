"""Path options checked before any work: a name no file system takes is one line, not an OSError
(ENAMETOOLONG) from the first stat deep in the task."""

from __future__ import annotations

from gpuenv.errors import BadInput
from validate.writing import path_problem


def check_paths(*, folders: tuple[str, ...] = (), **paths: str | None) -> None:
    """Each given path option (its parameter name: `team_file` is --team-file) that can never be
    written or read: a NUL byte, a name over 255 bytes, a path over 4095; for the `folders` to
    make, also a place under /proc, /sys or /dev. BadInput names the option and the reason."""
    for name, value in paths.items():
        if value is None or value is False or value == "":
            continue
        problem = path_problem(str(value), folder=name in folders)
        if problem:
            text = str(value) if len(str(value)) <= 80 else str(value)[:60] + "..."
            text = "".join(
                c if c.isprintable() else repr(c)[1:-1] for c in text
            )  # one line, no escape sequences
            flag = "--" + name.rstrip("_").replace("_", "-")
            raise BadInput(f"{flag} {text}: {problem}", fix=f"give {flag} a usable path")
