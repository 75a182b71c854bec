"""The set-up's venv step: install gpuenv's own lock (requirements/dev.lock.txt) into a venv,
every file checked against the lock's sha256, and say in one line why when it cannot.

    python3 scripts/install_lock.py --python .venv/bin/python [--target DIR] [--lock FILE]

pip does the work (`--require-hashes --no-deps`: the lock is the whole environment, so nothing
is resolved and nothing unlisted comes in); this script only checks the interpreter against the
lock's target, adds PyTorch's CPU index when pip's own configuration cannot find the torch CPU
wheel, removes what an older venv holds beyond the lock, and turns pip's multi-line refusal
(a hash mismatch, a missing file) into one line with the fix. Standard library only: it runs
before the venv has anything in it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "dev.lock.txt"
#: The CPU torch build is not on PyPI: pip's find-links (a folder) or PyTorch's own index serves it.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: Left in place when the venv is brought to the lock: pip runs the install, gpuenv is the project.
KEPT = {"pip", "gpuenv"}
RELOCK = "python scripts/relock_own.py"

_TARGET = re.compile(
    r"^# target: CPython (\d+\.\d+), (\S+) Linux, glibc >= (\d+\.\d+)", re.MULTILINE
)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.MULTILINE)


class Refused(Exception):
    """The install cannot go on; the message is the one line to print."""


def normalize(name: str) -> str:
    """PEP 503's form of a distribution name, so `PyYAML` and `pyyaml` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lock_text: str) -> dict[str, str]:
    """The lock's `name==version` lines, by normalized name."""
    return {normalize(name): version for name, version in _PIN.findall(lock_text)}


def check_target(lock_text: str, lock: Path, python: str) -> None:
    """Refuse an interpreter the lock was not made for: its wheels would not install, or worse,
    pip would build an sdist the lock never saw."""
    match = _TARGET.search(lock_text)
    if match is None:
        raise Refused(f"{lock}: no '# target:' line; make it again with {RELOCK}")
    want_python, want_machine, want_glibc = match.groups()
    probe = (
        "import json, platform, sys; v = sys.version_info;"
        " print(json.dumps([f'{v[0]}.{v[1]}',"
        " platform.machine(), sys.implementation.name, platform.libc_ver()]))"
    )
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise Refused(f"{python} does not run: {out.stderr.strip()[-200:]}")
    version, machine, implementation, (libc, libc_version) = json.loads(out.stdout)
    glibc_ok = libc == "glibc" and _version(libc_version) >= _version(want_glibc)
    if (version, machine, implementation) != (want_python, want_machine, "cpython") or not glibc_ok:
        raise Refused(
            f"{lock} is for CPython {want_python} on {want_machine} Linux (glibc >= {want_glibc}); "
            f"{python} is {implementation} {version} on {machine} "
            f"({libc or 'no glibc'} {libc_version}): run the set-up with python{want_python} "
            f"first on PATH, or relock for this one ({RELOCK})"
        )


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2]) or (0,)


def pip_install(python: str, lock: Path, extra: list[str]) -> subprocess.CompletedProcess[str]:
    """pip's install of the whole lock: hashes required, no resolution."""
    cmd = [
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--require-hashes",
        "--no-deps",
        "--only-binary",
        ":all:",
        "-r",
        str(lock),
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def torch_not_found(output: str) -> bool:
    """pip's configuration found no file for a torch pin (the CPU build is not on PyPI)."""
    return re.search(r"No matching distribution found for torch==", output) is not None


def one_line(output: str, lock: Path) -> str:
    """pip's refusal in one line: for a hash mismatch the package, both hashes and the fix."""
    text = output.replace("\r", "")
    mismatch = re.search(
        r"^\s+(\S+==\S+) from (\S+?)(?: \(from .*\))?:\s*\n\s+Expected sha256 (\w+)\n"
        r"(?:\s+Expected\s+or \w+\n)*\s+Got\s+(\w+)",
        text,
        re.MULTILINE,
    )
    if mismatch:
        pin, url, expected, got = mismatch.groups()
        url = url.split("#", 1)[0]
        return (
            f"{pin}: the file pip downloaded ({url}) has sha256 {got}, but {lock} expects "
            f"{expected}: the lock was edited or the index served other bytes; restore the lock "
            f"(git checkout -- {lock}) or relock ({RELOCK})"
        )
    missing = re.search(
        r"Hashes are required in --require-hashes mode, but they are missing[^\n]*\n\s+(\S+)", text
    )
    if missing:
        return f"{lock}: {missing.group(1)} has no --hash line; relock ({RELOCK})"
    errors = [
        line.removeprefix("ERROR: ").strip()
        for line in text.splitlines()
        if line.startswith("ERROR: ")
    ]
    if errors:
        return errors[-1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "pip failed and said nothing"


def beyond_lock(python: str, locked: dict[str, str]) -> list[str]:
    """Distributions in the venv the lock does not list (an older set-up's, or added by hand)."""
    probe = (
        "import json, importlib.metadata as m;"
        " print(json.dumps([d.metadata['Name'] for d in m.distributions()]))"
    )
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    return sorted(
        {
            n
            for n in json.loads(out.stdout)
            if normalize(n) not in locked and normalize(n) not in KEPT
        }
    )


def install(python: str, lock: Path, target: Path | None) -> str:
    """Install the lock; returns what was done, raises Refused with the one line otherwise."""
    lock_text = lock.read_text()
    check_target(lock_text, lock, python)
    extra = ["--target", str(target)] if target is not None else []
    done = pip_install(python, lock, extra)
    note = ""
    if done.returncode != 0 and torch_not_found(done.stdout + done.stderr):
        note = f" (torch from {TORCH_CPU_INDEX}: pip's own configuration has no torch CPU wheel)"
        done = pip_install(python, lock, [*extra, "--extra-index-url", TORCH_CPU_INDEX])
    if done.returncode != 0:
        raise Refused(one_line(done.stdout + done.stderr, lock))
    if target is None:
        extras = beyond_lock(python, pins(lock_text))
        if extras:
            subprocess.run(
                [python, "-m", "pip", "uninstall", "--quiet", "--yes", *extras], check=True
            )
            note += f"; removed {len(extras)} not in the lock ({', '.join(extras)})"
    return f"{len(pins(lock_text))} packages as {lock.name} pins them{note}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="the venv's python; its pip installs")
    parser.add_argument("--lock", type=Path, default=LOCK, help="the lock (default: %(default)s)")
    parser.add_argument("--target", type=Path, help="install into this folder instead (a check)")
    args = parser.parse_args(argv)
    try:
        print(f"install_lock: {install(args.python, args.lock, args.target)}")
    except Refused as refused:
        print(f"install_lock: {refused}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
