"""What the `invoke verify` tests make and break: a fresh environment of the conda path and of the
uv path (the local test channel, the STAND-IN torch wheel), and the five ways issue 36 names an
environment stops being its lock's. Shared by tests/envs (prefixes) and tests/images (images)."""

from __future__ import annotations

import base64
import hashlib
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SITE = "lib/python3.11/site-packages"


@dataclass(frozen=True)
class Tamper:
    """One change to an environment and the (kind, path) `invoke verify` must name for it."""

    name: str
    kind: str
    path: str


def record_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def extra_package_files() -> dict[str, bytes]:
    """An installed pip package the lock does not hold, as an installer leaves it: its module, and
    a dist-info whose RECORD declares every file with its hash (so only the lock can tell)."""
    files = {
        f"{SITE}/extrapkg/__init__.py": b"EXTRA = True\n",
        f"{SITE}/extrapkg-1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: extrapkg\nVersion: 1.0\n"
        ),
        f"{SITE}/extrapkg-1.0.dist-info/INSTALLER": b"pip\n",
    }
    rows = "".join(
        f"{p[len(SITE) + 1 :]},sha256={record_digest(d)},{len(d)}\n" for p, d in files.items()
    )
    files[f"{SITE}/extrapkg-1.0.dist-info/RECORD"] = (
        rows + "extrapkg-1.0.dist-info/RECORD,,\n"
    ).encode()
    return files


#: The five changes, each with what must be named. The edited file and the changed entry point
#: are pip files (their RECORD), and the conda cases below add a conda package's own files.
TAMPERS = (
    Tamper("edited file", "altered", f"{SITE}/packaging/version.py"),
    Tamper("removed file", "missing", f"{SITE}/packaging/markers.py"),
    Tamper("added module", "unowned", f"{SITE}/evil.py"),
    Tamper("extra pip package", "extra package", "extrapkg-1.0.dist-info"),
    Tamper("changed entry point", "altered", "bin/pytest"),
)
#: Conda packages' files: a binary whose prefix was rewritten, and a noarch entry point.
CONDA_TAMPERS = (
    Tamper("edited file", "altered", "bin/gpuenv-hello"),
    Tamper("changed entry point", "altered", "bin/gpuenv-probe"),
)


@contextmanager
def tampered(root: Path, tamper: Tamper) -> Iterator[None]:
    """`tamper` made in the environment at `root` (a folder) for the `with` block, then undone:
    the module's one environment serves every case, with no copy of it."""
    target = root / tamper.path
    before = target.read_bytes() if target.is_file() else None
    made = (
        [root / p for p in extra_package_files()]
        if tamper.name == "extra pip package"
        else [target]
    )
    try:
        if tamper.name in ("edited file", "changed entry point"):
            data = before or b""
            edited = (
                data.replace(b"import", b"import  ", 1) if b"import" in data else data + b"\x01"
            )
            target.write_bytes(edited)
        elif tamper.name == "removed file":
            target.unlink()
        elif tamper.name == "added module":
            target.write_text("print('not from any package')\n")
        elif tamper.name == "extra pip package":
            for path, data in extra_package_files().items():
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(data)
        yield
    finally:
        if before is not None:
            target.write_bytes(before)
        else:
            for path in made:
                path.unlink(missing_ok=True)
            for folder in {p.parent for p in made if p.parent != root / SITE}:
                shutil.rmtree(folder, ignore_errors=True)


def named(verdict, tamper: Tamper) -> bool:
    """Whether the verdict names the tampered path with the expected kind."""
    return any(p.kind == tamper.kind and p.path == tamper.path for p in verdict.problems)
