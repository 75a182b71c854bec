"""Bad locks as a broken locker would write them, for the tests that prove gpuenv refuses them."""

from __future__ import annotations

import re

#: A sha256 no file has.
WRONG_HASH = "sha256:" + "0" * 64


def with_wrong_hashes(text: str, name: str | None = None) -> str:
    """The uv lock `text` with every hash of `name` (default: the first package that is not torch)
    replaced by WRONG_HASH."""
    if name is None:
        name = next(
            line.split("==")[0]
            for line in text.splitlines()
            if "==" in line and not line.startswith((" ", "torch=="))
        )
    out, inside = [], False
    for line in text.splitlines(keepends=True):
        if not line.startswith((" ", "\t")):
            inside = line.startswith(f"{name}==")
        out.append(re.sub(r"sha256:[0-9a-f]{64}", WRONG_HASH, line) if inside else line)
    assert "".join(out) != text, f"{name} is not in the lock"
    return "".join(out)
