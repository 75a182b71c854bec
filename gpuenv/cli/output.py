"""What a task prints: every line through `show` (untrusted text made safe for the terminal),
and the progress reporter a long task chooses with --verbose / --quiet."""

from __future__ import annotations

from typing import Any

from validate.text import mask_credentials, safe_text


def show(
    *parts: Any, sep: str = " ", end: str = "\n", file: Any = None, flush: bool = False
) -> None:
    """print(), for everything a task prints: paths and values may come from untrusted input (a
    capture's file name, a node's report, a config value), so control characters are shown as
    \\xNN, never sent to the terminal (an ESC in a --host file name could clear the screen or
    set the window title). Newlines and tabs, the layout of tables, are kept."""
    import sys

    text = sep.join(str(part) for part in parts).replace(
        "\r", "\\r"
    )  # a carriage return would hide what came before it
    text = mask_credentials(text)  # a mirror URL's password, quoted anywhere, is never printed
    print(
        safe_text(text, newlines=True, limit=len(text)),
        end=end,
        file=file or sys.stdout,
        flush=flush,
    )


def reporter(verbose: bool = False, quiet: bool = False) -> Any:
    from gpuenv.errors import BadInput
    from gpuenv.progress import Reporter

    if verbose and quiet:
        raise BadInput("--verbose and --quiet contradict each other", fix="give one of them")
    return Reporter.choose(verbose=verbose, quiet=quiet)
