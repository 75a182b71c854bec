"""nvidia-smi's values as numbers and flags, and the tree (`Node`) both of its forms are read into
(pure, stdlib only), shared by every section parser.

A value nvidia-smi could not read is printed as "N/A" (NVML answered NotSupported) or as the
error itself ("GPU is lost"); both read here as None or as the NVML error, never as 0 or "no".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

#: nvidia-smi's words for a value it could not read, and the NVML error each stands for.
ERROR_WORDS = {
    "gpu is lost": "NVMLError_GpuIsLost",
    "unknown error": "NVMLError_Unknown",
    "insufficient permissions": "NVMLError_NoPermission",
    "gpu requires reset": "NVMLError_ResetRequired",
}
#: nvidia-smi's words for "not reported" (NVML NotSupported, or a field this driver lacks).
NOT_AVAILABLE = {
    "",
    "n/a",
    "[n/a]",
    "not supported",
    "[not supported]",
    "none",
    "requested functionality has been deprecated",
}


def error_of(text: str | None) -> str | None:
    """The NVML error nvidia-smi printed in place of a value ("GPU is lost", "[Unknown Error]")."""
    return ERROR_WORDS.get((text or "").strip().strip("[]").strip().lower())


def not_available(text: str | None) -> bool:
    """True for nvidia-smi's "N/A" / "Not Supported": the driver did not report the value."""
    return (text or "").strip().lower() in NOT_AVAILABLE - {"", "none"}


def number(text: str | None) -> float | None:
    """'40960 MiB' -> 40960.0, '16x' -> 16, '400.00 W' -> 400.0; None when not a number."""
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text or "")
    return float(match.group(1)) if match else None


def to_bytes(text: str | None) -> int | None:
    """'98 MiB' -> bytes; old drivers print 'MB' for MiB-sized figures, read as decimal here."""
    value = number(text)
    if value is None:
        return None
    unit = (text or "").split()[-1].lower() if len((text or "").split()) > 1 else "mib"
    scale = {
        "b": 1,
        "kib": 2**10,
        "mib": 2**20,
        "gib": 2**30,
        "kb": 10**3,
        "mb": 10**6,
        "gb": 10**9,
    }.get(unit, 2**20)
    return int(value * scale)


def yes(text: str | None) -> bool | None:
    """'Enabled'/'Active'/'Yes' -> True, 'Disabled'/'Not Active'/'No' -> False, else None."""
    word = (text or "").strip().lower()
    if word in ("yes", "enabled", "active", "true"):
        return True
    if word in ("no", "disabled", "not active", "false"):
        return False
    return None


@dataclass
class Node:
    """One element of nvidia-smi's output: a tag (XML) or label (text), its value, its children."""

    tag: str
    text: str = ""
    children: list["Node"] = field(default_factory=list)

    def child(self, name: str) -> "Node | None":
        wanted = name.lower()
        return next((c for c in self.children if c.tag.lower() == wanted), None)

    def all(self, name: str) -> list["Node"]:
        wanted = name.lower()
        return [c for c in self.children if c.tag.lower() == wanted]

    def find(self, paths: str) -> "Node | None":
        """The first node on any of the '|'-separated paths ('a/b|A/B')."""
        for path in paths.split("|"):
            node: Node | None = self
            for part in path.split("/"):
                node = node.child(part) if node is not None else None
            if node is not None:
                return node
        return None

    def descendant(self, name: str) -> "Node | None":
        """The first node of this name at any depth (text output nests some labels)."""
        for c in self.children:
            if c.tag.lower() == name.lower():
                return c
            found = c.descendant(name)
            if found is not None:
                return found
        return None

    def value(self, paths: str) -> str | None:
        node = self.find(paths)
        return None if node is None else node.text.strip()

    def worst(self, paths: str, higher: bool = True) -> str | None:
        """A health reading given more than once (a pasted or hostile capture) as its worst value:
        the highest (`higher`) or lowest number among the same-named siblings of the first match,
        so a failing second reading is never hidden behind a first one. Else as `value`."""
        for path in paths.split("|"):
            head, _, last = path.rpartition("/")
            holder = self.find(head) if head else self
            twins = holder.all(last) if holder is not None else []
            if twins:
                numeric = [(n, t.text.strip()) for t in twins if (n := number(t.text)) is not None]
                if len(numeric) < 2:
                    return twins[0].text.strip()
                return (max if higher else min)(numeric, key=lambda pair: pair[0])[1]
        return None
