"""`invoke verify --prefix DIR`: does a prefix hold exactly its lock's bytes?

The judge is validate/intact.py (the suite's "environment intact" row uses the same one): every
file checked against what its package declares (conda-meta's paths_data, each RECORD, gpuenv's
own files in gpuenv-prefix.json), and the installed packages against the lock the prefix records
it was made from. Images: gpuenv/images/verify.py reads the same tree out of the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuenv.envs import lockdir
from gpuenv.errors import BadInput, DataError
from gpuenv.stack import Stack
from validate import intact
from validate.reading import InputRefused, load_json_input, read_text_input

#: The record gpuenv writes into a prefix (gpuenv/envs/install.py: RECORD_FILE).
PREFIX_RECORD = intact.GPUENV_RECORD
#: pip packages `python -m venv` puts into an image's uv environment (ensurepip): not the lock's,
#: still checked file by file against their RECORD.
ENSUREPIP = frozenset({"pip", "setuptools"})
#: A progress line at most every this many bytes hashed.
PROGRESS_STEP = 256 * 1024 * 1024


@dataclass(frozen=True)
class Compared:
    """The lock the packages were compared with, or why they were not."""

    expected: intact.Expected | None
    what: str
    sha256: str = ""


def expected_from_lock(
    lock_dir: Path,
    stack: Stack | None,
    *,
    platform: str = "linux-64",
    allowed: frozenset[str] = frozenset(),
) -> Compared:
    """The packages the lock in `lock_dir` installs on `platform` (verified as a build does)."""
    lock = lockdir.verify(Path(lock_dir), stack)
    here = [p for p in lock.packages if p.platform == platform]
    conda = {p.name: p.version for p in here if p.manager == "conda"}
    pip = {p.name: p.version for p in here if p.manager == "pip"}
    return Compared(
        intact.Expected(conda, pip, allowed),
        f"{lock.path} (sha256 {lock.sha256[:12]})",
        lock.sha256,
    )


def prefix_lock(prefix: Path) -> Compared:
    """The lock a gpuenv prefix was installed from, when it is still there unchanged."""
    try:
        record = load_json_input(read_text_input(prefix / PREFIX_RECORD, 1024 * 1024), max_depth=16)
    except InputRefused as err:
        return Compared(None, f"not compared with a lock: {PREFIX_RECORD} cannot be read ({err})")
    if not isinstance(record, dict) or not isinstance(record.get("lock_file"), str):
        return Compared(None, f"not compared with a lock: {PREFIX_RECORD} names none")
    lock_file = Path(record["lock_file"])
    if not lock_file.is_file():
        return Compared(
            None, f"not compared with a lock: {lock_file}, which it was installed from, is gone"
        )
    if lockdir.file_sha256(lock_file) != record.get("lock_sha256"):
        return Compared(
            None, f"not compared with a lock: {lock_file} changed since the install (relocked?)"
        )
    try:
        return expected_from_lock(lock_file.parent, None)
    except DataError as err:
        return Compared(None, f"not compared with a lock: {err.message}")


def byte_progress(
    say: Callable[[str], None], total: int | None, what: str
) -> Callable[[int], None]:
    """A callback counting hashed bytes that says how far it got every PROGRESS_STEP bytes."""
    from gpuenv.progress import format_bytes

    done = [0, PROGRESS_STEP]

    def step(count: int) -> None:
        done[0] += count
        if done[0] >= done[1]:
            done[1] += PROGRESS_STEP
            of = f" of {format_bytes(total)}" if total else ""
            say(f"{what}: {format_bytes(done[0])}{of} hashed")

    return step


def verify_prefix(
    prefix: str | Path, *, say: Callable[[str], None], hash_limit: int | None = None
) -> intact.Verdict:
    """Every file of `prefix` against its package's record, and its packages against its lock."""
    root = Path(prefix).expanduser().absolute()
    if not root.is_dir():
        raise BadInput(
            f"--prefix {prefix}: no such folder",
            fix="give a folder `invoke install` made (or any conda/venv prefix)",
        )
    if not (root / "conda-meta").is_dir() and not any(root.glob("lib/python3*/site-packages")):
        raise BadInput(
            f"--prefix {prefix} is not a Python environment "
            "(no conda-meta/, no lib/python3*/site-packages)",
            fix="give the folder `invoke install --prefix` made",
        )
    tree = intact.FolderTree(root)
    total = sum(e.size for e in tree.entries().values() if e.kind == intact.FILE)
    say(f"checking {len(tree.entries())} paths of {root} ({_bytes(total)})")
    tree.progress = byte_progress(say, total, str(root))
    compared = prefix_lock(root)
    return intact.check(
        tree,
        str(root),
        expected=compared.expected,
        expected_from=compared.what,
        hash_limit=hash_limit,
    )


def _bytes(size: int) -> str:
    from gpuenv.progress import format_bytes

    return format_bytes(size)
