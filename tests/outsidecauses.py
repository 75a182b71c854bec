"""Which failures a fixture may turn into a skip: only a named outside cause, read from the error.

A fixture that skips on any error hides product regressions (a lock uv cannot solve, a hash
mismatch from a bad lock, a broken base-image script) as skips, and CI stays green. The rule:
skip only when the error itself shows that something outside gpuenv is unreachable (no route to
a package index or mirror); every other failure fails the test with the product's own message.
"""

from __future__ import annotations

import re

import pytest

#: Words the network stack, pip, uv, apt and debootstrap use when a host cannot be reached at all.
#: A hash mismatch, a resolution failure or a script error matches none of them.
_NO_ROUTE = re.compile(
    r"Temporary failure in name resolution|Name or service not known|No address associated with "
    r"hostname|Network is unreachable|No route to host|Connection refused|Failed to establish a "
    r"new connection|NewConnectionError|ConnectTimeoutError|Connection timed out|connect timed "
    r"out|dns error|Temporary failure resolving|Could not resolve host|Failed getting release "
    r"file",
    re.IGNORECASE,
)


def no_route_cause(output: str) -> str | None:
    """The line of `output` that says a host could not be reached, or None when it says no such
    thing."""
    for line in output.splitlines():
        if _NO_ROUTE.search(line):
            return line.strip()[:300]
    return None


def skip_only_if_unreachable(what: str, output: str) -> None:
    """Skip naming the unreachable host when `output` shows one; otherwise fail with the product's
    words."""
    cause = no_route_cause(output)
    if cause is not None:
        pytest.skip(f"no route from this machine ({what}): {cause}")
    pytest.fail(
        f"{what} failed, and not for want of a network route: {output.strip()[-1500:]}",
        pytrace=False,
    )


def cannot_lock(err: Exception) -> None:
    """A lock that failed: skip only when uv could not reach an index, fail on every other
    reason."""
    from gpuenv.envs.uv import IndexUnreachable

    if isinstance(err, IndexUnreachable):
        pytest.skip(f"no route from this machine to the package index {err.url}: {err.render()}")
    render = getattr(err, "render", None)
    pytest.fail(f"cannot lock the CPU stack: {render() if render else err}", pytrace=False)


#: Where uv downloads python-build-standalone's CPython from when no mirror is set.
PYTHON_BUILD_STANDALONE_HOST = "github.com"


def python_download_unreachable(error_line: str) -> str | None:
    """The cause, when gpuenv's one-line "cannot download Python" error says the
    python-build-standalone host could not be reached (its name did not resolve, the connection
    failed); None for every other cause (a 404, a bad archive, a mirror this test set, any other
    gpuenv error), which must fail the test, not skip it."""
    if "cannot download Python" not in error_line:
        return None
    url = re.search(r"\bfrom (https?://[^\s/]+)/", error_line)
    if url is None or url.group(1).split("://", 1)[1].lower() != PYTHON_BUILD_STANDALONE_HOST:
        return None
    return no_route_cause(error_line)


def nvml_library_present() -> bool:
    """Whether this host has NVIDIA's driver library (libnvidia-ml.so.1): the outside thing the
    NVML tests need, or must not find, to expect what they expect."""
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return True
    except OSError:
        return False
