"""The one terminal-safety function: text someone else wrote (a capture's GPU name, a node's
report, a path given on the command line) made safe to print, as it is made safe for HTML, XML
and JSON. In validate/ because the suite prints such text too and cannot import gpuenv.
"""

from __future__ import annotations

import re
from typing import Any

#: Longest text kept from any one untrusted field (measured, reason, a GPU name ...).
MAX_TEXT = 2000
# C0 and C1 control characters (ESC starts terminal escape sequences), DEL, lone surrogates and
# the two code points XML 1.0 forbids; tab is kept, newlines too where the caller allows them.
# Bidirectional overrides and line separators too: they would make a terminal line read other
# than it is.
_CONTROL = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
_CONTROL_NL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)


def safe_text(value: Any, *, newlines: bool = False, limit: int = MAX_TEXT) -> str:
    """Text any output can carry: control characters shown as \\xNN, never passed on raw (a node's
    report or a capture must not drive the operator's terminal, or make an XML report invalid)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    if text.isprintable():  # the common case, checked in C
        return text
    pattern = _CONTROL if newlines else _CONTROL_NL
    return pattern.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


#: `scheme://user:password@` (or a token alone, `scheme://token@`) anywhere in a line of text.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/@\s:]*)(:[^/\s]*)?@")


def mask_credentials(text: str) -> str:
    """Every URL in `text` with its password (or lone token) shown as ***: a mirror URL from
    invoke.yaml, quoted in a tool's error, must not print its secret. A user name alone stays."""

    def mask(match: re.Match[str]) -> str:
        scheme, user, password = match.group(1), match.group(2), match.group(3)
        if password is None:  # `https://TOKEN@host`: GitHub-style tokens are the user part
            return f"{scheme}***@" if len(user) >= 20 else match.group(0)
        return f"{scheme}{user}:***@"

    return _URL_USERINFO.sub(mask, text) if "@" in text else text


def safe_url(url: str) -> str:
    """A URL as messages show it: a password (`ssh://user:pw@host`) replaced by ***, and made safe
    for the terminal. Secrets in URLs are never echoed."""
    head, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    if sep and at and ":" in userinfo:
        url = head + sep + userinfo.split(":", 1)[0] + ":***@" + hostport + slash + tail
    return safe_text(url, limit=200)
