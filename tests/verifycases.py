"""What the `invoke verify` tests make and break: a fresh environment of the conda path and of the
uv path (the local test channel, the STAND-IN torch wheel), and the five ways issue 36 names an
environment stops being its lock's. Shared by tests/envs (prefixes) and tests/images (images)."""

from __future__ import annotations

import base64
import hashlib
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


def apply(root: Path, tamper: Tamper) -> None:
    """Make `tamper` in the environment at `root` (a folder)."""
    if tamper.name in ("edited file", "changed entry point"):
        target = root / tamper.path
        data = target.read_bytes()
        target.write_bytes(
            data.replace(b"import", b"import  ", 1) if b"import" in data else data[:-1] + b"\x01"
        )
    elif tamper.name == "removed file":
        (root / tamper.path).unlink()
    elif tamper.name == "added module":
        (root / tamper.path).write_text("print('not from any package')\n")
    elif tamper.name == "extra pip package":
        for path, data in extra_package_files().items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)


def named(verdict, tamper: Tamper) -> bool:
    """Whether the verdict names the tampered path with the expected kind."""
    return any(p.kind == tamper.kind and p.path == tamper.path for p in verdict.problems)
