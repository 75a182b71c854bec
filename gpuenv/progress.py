"""Progress of long work (lock, build, push, pull, install) for people and for CI logs.

On a terminal: one live block drawn with `rich` (the step, elapsed time, bytes moved, the tool's
last line), replaced in place. Anywhere else (CI, a pipe, a file): plain lines with no control
codes, one per step and per finished layer. `--verbose` adds every line the tools print (the full
builder log); `--quiet` keeps only results and errors. The library imports only `Say` from here: it
reports through callbacks (a line of text, or a `LayerProgress` from the engine), and the task
layer hands it a Reporter's methods.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import IO, Any, Callable

from validate.text import mask_credentials, safe_text

#: A progress callback: one line of text for the person or the log (the library's one type for it).
Say = Callable[[str], None]

LIVE, PLAIN, VERBOSE, QUIET = "live", "plain", "verbose", "quiet"
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")
#: A step as gpuenv prints BuildKit's trace (gpuenv/engine/buildkit.py): `#7 [install 2/3] COPY
#: ...`.
_BUILDKIT_STEP = re.compile(r"^#\d+ \[(?:(\S+) )?(\d+)/(\d+)\] (.*)")
#: The `#N ` BuildKit puts before each line a step printed.
_BUILDKIT_PREFIX = re.compile(r"^#\d+ ")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")
#: Layer states that mean "all of its bytes are there" (push and pull wording of the engine).
#: Lines gpuenv's own scripts print inside a build (docker/install-env.sh): steps, not noise.
_OWN_STEP = "gpuenv-install:"
#: Tool output shown when the work fails without --verbose: the tool's reason is in there.
FAILURE_TAIL = 40
_DONE = (
    "pushed",
    "layer already exists",
    "mounted from",
    "download complete",
    "pull complete",
    "already exists",
)


def choose_mode(
    *,
    verbose: bool = False,
    quiet: bool = False,
    out: IO[str] | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """quiet > verbose > live (a terminal that is not `dumb`) > plain."""
    env = dict(os.environ) if env is None else env
    out = out or sys.stdout
    if quiet:
        return QUIET
    if verbose:
        return VERBOSE
    is_tty = getattr(out, "isatty", lambda: False)()
    if is_tty and env.get("TERM", "") != "dumb" and not env.get("CI"):
        return LIVE
    return PLAIN


def build_step(line: str) -> str | None:
    """`Step 7/14 : RUN ...` -> `step 7/14: RUN ...` (shortened), BuildKit's `#7 [install 2/3] RUN
    ...` -> `step install 2/3: RUN ...`; None for any other line."""
    match = _STEP.match(line.strip())
    if match:
        where, command = f"{match.group(1)}/{match.group(2)}", match.group(3)
    elif match := _BUILDKIT_STEP.match(line.strip()):
        where, command = (
            (f"{match.group(1)} " if match.group(1) else "") + f"{match.group(2)}/{match.group(3)}",
            match.group(4),
        )
    else:
        return None
    command = " ".join(command.split())
    return f"step {where}: {command[:90]}{'...' if len(command) > 90 else ''}"


def format_bytes(size: float, places: int = 1) -> str:
    """Decimal units, as the Docker CLI shows sizes: 1.2 GB (`places` digits after the point)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} B" if unit == "B" else f"{size:.{places}f} {unit}"
        size /= 1000
    return f"{size:.{places}f} TB"


def format_size(size: int) -> str:
    """An image's size as `invoke images` and a build's summary show it: two places, e.g. ``1.93
    GB``."""
    return format_bytes(float(size), places=2)


def format_elapsed(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds}s"


@dataclass
class _Layer:
    current: int = 0
    total: int = 0
    done: bool = False
    status: str = ""


@dataclass
class _State:
    phase: str = ""
    last_line: str = ""
    layers: dict[str, _Layer] = field(default_factory=dict)
    verb: str = ""


class Reporter:
    """One long command's progress. Use as a context manager around the work.

    `phase(text)`: the current step. `output(text)`: what a tool printed (chunks or lines).
    `layer(event)`: bytes of one image layer. `say(text)`: a message kept in the log.
    `result(text)`: the outcome, printed even with --quiet.
    """

    def __init__(self, mode: str = PLAIN, out: IO[str] | None = None, console: Any = None) -> None:
        self.mode = mode
        self.out = out or sys.stdout
        self.started = time.monotonic()
        self.state = _State()
        self._live: Any = None
        self._console = console
        self._partial = ""
        self._recent: deque[str] = deque(maxlen=FAILURE_TAIL)

    @classmethod
    def choose(
        cls, *, verbose: bool = False, quiet: bool = False, out: IO[str] | None = None
    ) -> "Reporter":
        return cls(choose_mode(verbose=verbose, quiet=quiet, out=out), out=out)

    # -- lifecycle

    def __enter__(self) -> "Reporter":
        if self.mode == LIVE:
            from rich.console import Console
            from rich.live import Live

            self._console = self._console or Console(file=self.out)
            self._live = Live(
                console=self._console,
                get_renderable=self._render,
                refresh_per_second=8,
                transient=True,
            )
            self._live.start()
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self._flush_partial()
        if self._live is not None:
            self._live.stop()
            self._live = None
        if (
            exc_type is not None
            and exc_type is not KeyboardInterrupt
            and self.mode != VERBOSE
            and self._recent
        ):
            # The work failed: the tool's last lines say why (the error line itself is one line).
            self._print(f"last {len(self._recent)} lines of output:", always=True)
            for line in self._recent:
                self._print(f"    {line}", always=True)

    # -- events

    def phase(self, text: str) -> None:
        """A new step of the work: a line of its own in every mode but quiet."""
        self.state.phase = text
        self.state.last_line = ""
        self._emit(text)

    def say(self, text: str) -> None:
        """A message worth keeping in the log (above the live block on a terminal)."""
        self._emit(text)

    def output(self, text: str) -> None:
        """Text a tool printed: in full with --verbose, else only its last line is shown live."""
        text = self._partial + _ANSI.sub("", text)
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            self._line(line)

    def layer(self, event: Any) -> None:
        """A `LayerProgress` (layer, status, current, total) from a push or a pull."""
        if not event.layer:
            if event.status and self.mode == VERBOSE:
                self._print(f"  {event.status}")
            return
        state = self.state.layers.setdefault(event.layer, _Layer())
        status = (event.status or "").lower()
        if event.total:
            state.total = max(state.total, int(event.total))
        if event.current is not None and status.startswith(("pushing", "downloading")):
            state.current = int(event.current)
        state.status = event.status
        if status.startswith(_DONE) and not state.done:
            state.done = True
            state.current = state.total or state.current
            if self.mode in (PLAIN, VERBOSE):
                size = f" ({format_bytes(state.total)})" if state.total else ""
                self._print(f"  layer {event.layer[:12]}: {event.status.lower()}{size}")
        elif self.mode == VERBOSE and not status.startswith(
            ("pushing", "downloading", "extracting")
        ):
            self._print(f"  layer {event.layer[:12]}: {event.status}")

    def result(self, text: str) -> None:
        """The outcome of the command: printed in every mode."""
        self._print(text, always=True)

    def transferred(self) -> tuple[int, int, int, int]:
        """(bytes moved, bytes known, layers done, layers seen)."""
        layers = self.state.layers.values()
        return (
            sum(layer.current for layer in layers),
            sum(layer.total for layer in layers),
            sum(1 for layer in layers if layer.done),
            len(self.state.layers),
        )

    # -- drawing

    def _line(self, line: str) -> None:
        line = line.rstrip()
        if not line.strip():
            return
        step = build_step(line)
        if step is not None:
            self.phase(step)
            return
        self._recent.append(line)
        own = _BUILDKIT_PREFIX.sub("", line, count=1)
        if own.startswith(_OWN_STEP):
            self._emit(own)
            self.state.last_line = own.strip()
            return
        self.state.last_line = line.strip()
        if self.mode == VERBOSE:
            self._print(f"    {line}")

    def _flush_partial(self) -> None:
        if self._partial:
            partial, self._partial = self._partial, ""
            self._line(partial)

    def _emit(self, text: str) -> None:
        if self.mode == QUIET:
            return
        if self.mode == LIVE:
            self._print(text)
        else:
            self._print(f"[{format_elapsed(time.monotonic() - self.started):>5}] {text}")

    def _print(self, text: str, always: bool = False) -> None:
        if self.mode == QUIET and not always:
            return
        # Every line shown: a --prefix path or a tool's line may hold escape sequences, a mirror
        # URL a password (validate/text.py).
        text = safe_text(mask_credentials(text), limit=max(len(text), 1))
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            self.out.write(text + "\n")
            self.out.flush()

    def _render(self) -> Any:
        from rich.console import Group
        from rich.spinner import Spinner
        from rich.text import Text

        elapsed = format_elapsed(time.monotonic() - self.started)
        head = Text.assemble((self.state.phase or "working", "bold"), f"  {elapsed}")
        parts: list[Any] = [Spinner("dots", text=head)]
        moved, known, done, seen = self.transferred()
        if seen:
            total = f" of {format_bytes(known)}" if known else ""
            parts.append(
                Text(f"  {format_bytes(moved)}{total}, {done}/{seen} layers", style="cyan")
            )
        if self.state.last_line:
            parts.append(
                Text(
                    f"  {self.state.last_line[:160]}",
                    style="dim",
                    no_wrap=True,
                    overflow="ellipsis",
                )
            )
        return Group(*parts)
