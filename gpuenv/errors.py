"""The small error hierarchy: every user-facing failure says what was wrong and how to fix it.

The task layer maps these to exit codes; anything else that escapes is a bug in gpuenv.
"""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_NO_STACK = 3


class GpuenvError(Exception):
    """Base class: a message meant for a person, and the exit code the CLI should use."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        return f"{self.message}: {self.fix}" if self.fix else self.message


class BadInput(GpuenvError):
    """A value the user gave cannot be used (bad version string, unknown framework, ...)."""

    exit_code = EXIT_BAD_INPUT


class NoCompatibleStack(GpuenvError):
    """The wishes are well-formed, but no stack in the data satisfies all of them."""

    exit_code = EXIT_NO_STACK


class DataError(GpuenvError):
    """A data file (compatibility matrix, GPU peaks, lock metadata) is malformed or inconsistent."""


class ToolError(GpuenvError):
    """An outside tool (conda-lock, uv, the Docker engine) failed; the message carries its
    reason."""
