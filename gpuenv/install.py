"""Install a stack's lock into a folder on this host, for servers and clusters without Docker.

uv lock -> a relocatable venv on this host's Python X.Y, `uv pip install --require-hashes`.
conda lock -> `micromamba create` from the unified lockfile (conda and pip entries, hashed).
Either way the validation suite (`validate/`) is copied in, so `PREFIX/bin/python -m validate`
checks the server with exactly the environment the team's image holds.

Atomic: the prefix is built in a hidden sibling folder and renamed into place; a failed or
interrupted install leaves the previous prefix whole. A prefix records the lock hash it was made
from (gpuenv-prefix.json): a second run on an unchanged lock does nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gpuenv import __version__, lockers
from gpuenv.errors import BadInput, DataError, ToolError
from gpuenv.images import VALIDATE_DIR, LockFile, read_lock, stack_json
from gpuenv.stack import Stack
from validate.files import replace_dir

#: The record a prefix keeps of what it was made from.
RECORD_FILE = "gpuenv-prefix.json"
#: A .pth line runs at interpreter start-up (site.py): it points the suite at PREFIX/stack.json.
STACK_PTH = 'import os, sys; os.environ.setdefault("GPUENV_STACK_FILE", os.path.join(sys.prefix, "stack.json"))\n'
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")

Say = Callable[[str], None]


@dataclass(frozen=True)
class InstallPlan:
    """One install, decided before anything is written."""

    stack: Stack
    lock: LockFile
    prefix: Path
    wheelhouse: Path | None
    validate_dir: Path = VALIDATE_DIR
    offline: bool = False


@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    skipped: bool
    lock_sha256: str


def plan_install(
    stack: Stack, lock_dir: Path, prefix: Path, *, wheelhouse: Path | None = None, offline: bool = False, validate_dir: Path = VALIDATE_DIR,
) -> InstallPlan:
    """Check the prefix and the lock; a folder that is not ours is never replaced."""
    lock = read_lock(lock_dir)
    prefix = Path(os.path.abspath(os.path.expanduser(str(prefix))))
    if prefix.exists() and not prefix.is_dir():
        raise BadInput(f"--prefix {prefix} is a file", fix="give a folder path (it is created)")
    if prefix.is_dir() and any(prefix.iterdir()) and not (prefix / RECORD_FILE).is_file():
        raise BadInput(f"--prefix {prefix} is a folder gpuenv did not make", fix="give a new or empty folder; gpuenv replaces only prefixes it made")
    if prefix == Path(prefix.anchor):
        raise BadInput("--prefix / is the root folder", fix="give a folder such as /opt/envs/torch")
    existing = next(p for p in prefix.parents if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK) or (prefix.parent.exists() and not os.access(prefix.parent, os.W_OK | os.X_OK)):
        raise BadInput(f"--prefix {prefix}: {existing} is not writable by this user",
                       fix="choose a folder you can write, or ask for one on the shared path")
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        raise BadInput(f"--wheelhouse {wheelhouse}: no such folder", fix="give a folder of .whl files")
    if offline and wheelhouse is None:
        raise BadInput("--offline needs --wheelhouse", fix="give the folder that holds every wheel of the lock (see the README's offline recipe)")
    if offline and lock.backend != "uv":
        raise BadInput("--offline works with uv locks only", fix="lock with --backend uv, or install the conda lock where its channel answers")
    return InstallPlan(stack=stack, lock=lock, prefix=prefix, wheelhouse=Path(wheelhouse) if wheelhouse else None,
                       validate_dir=validate_dir, offline=offline)


def read_record(prefix: Path) -> dict | None:
    """What a prefix was installed from, or None when it is not a (whole) gpuenv prefix."""
    try:
        return json.loads((Path(prefix) / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_current(plan: InstallPlan) -> bool:
    record = read_record(plan.prefix)
    return bool(record and record.get("lock_sha256") == plan.lock.sha256 and (plan.prefix / "bin" / "python").exists())


def install(plan: InstallPlan, *, say: Say, output: Say, force: bool = False) -> InstallResult:
    """Install the lock of `plan` into its prefix unless the prefix already holds exactly that lock."""
    if not force and is_current(plan):
        say(f"{plan.prefix} already holds lock {plan.lock.sha256[:12]} ({plan.lock.backend}): nothing to do")
        return InstallResult(plan.prefix, True, plan.lock.sha256)
    parent = plan.prefix.parent
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{plan.prefix.name}.", suffix=".tmp", dir=parent))
    try:
        work.rmdir()  # the installers want to create the folder themselves
        if plan.lock.backend == "uv":
            _install_uv(plan, work, say, output)
        else:
            _install_conda(plan, work, say, output)
        say("copying the validation suite into the prefix")
        site = _site_packages(work)
        shutil.copytree(plan.validate_dir, site / "validate", ignore=_SKIP)
        (work / "stack.json").write_text(stack_json(plan.stack) + "\n", encoding="utf-8")
        # What the image's ENV GPUENV_STACK_FILE does, for the prefix: the suite compares the
        # environment with the stack's claims. Relative to sys.prefix, so it survives the rename.
        (site / "gpuenv-stack.pth").write_text(STACK_PTH, encoding="utf-8")
        record = {
            "stack": plan.stack.stack_id,
            "lock_sha256": plan.lock.sha256,
            "lock_backend": plan.lock.backend,
            "lock_file": str(plan.lock.path),
            "gpuenv_version": __version__,
            "installed_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        (work / RECORD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        work.chmod(0o755)
        say(f"moving it into place: {plan.prefix}")
        replace_dir(work, plan.prefix)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return InstallResult(plan.prefix, False, plan.lock.sha256)


def _install_uv(plan: InstallPlan, work: Path, say: Say, output: Say) -> None:
    uv = lockers.uv_binary()
    say(f"creating a venv on this host's Python {plan.stack.python}")
    lockers.run_installer(lockers.uv_venv_command(uv=uv, prefix=work, python=plan.stack.python), on_line=output, tool="uv venv",
                          env={})
    if not (work / "bin" / "python").exists():
        raise ToolError(f"uv made no interpreter in {work}", fix=f"install Python {plan.stack.python} on this host")
    source = f" (wheelhouse {plan.wheelhouse}{', offline' if plan.offline else ''})" if plan.wheelhouse else ""
    say(f"installing {plan.lock.path.name} with hashes required{source}")
    lockers.run_installer(lockers.uv_install_command(uv=uv, prefix=work, lock=plan.lock.path, find_links=plan.wheelhouse, offline=plan.offline),
                          on_line=output, tool="uv pip install")


def micromamba_binary(say: Say | None = None) -> str:
    """The micromamba that images use too: pinned, sha256-verified, cached (gpuenv.buildtools)."""
    import platform

    from gpuenv import buildtools

    conda_platform = buildtools.CONDA_PLATFORMS.get(buildtools.normalise_arch(platform.machine()))
    if conda_platform is None:
        raise ToolError(f"no micromamba build for this host's architecture {platform.machine()}", fix="lock with --backend uv")
    return str(buildtools.micromamba(conda_platform, progress=say))


def _install_conda(plan: InstallPlan, work: Path, say: Say, output: Say) -> None:
    micromamba = micromamba_binary(say)
    say(f"creating the conda prefix from {plan.lock.path.name} with micromamba")
    root = Path(tempfile.mkdtemp(prefix="gpuenv-mamba-root-"))
    try:
        env = {"MAMBA_ROOT_PREFIX": str(root)}
        if plan.wheelhouse:
            env["PIP_FIND_LINKS"] = str(plan.wheelhouse)
        cmd = lockers.micromamba_create_command(micromamba=micromamba, build_dir=work, target=plan.prefix, lock=plan.lock.path)
        lockers.run_installer(cmd, on_line=output, tool="micromamba", env=env)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _site_packages(prefix: Path) -> Path:
    found = sorted(prefix.glob("lib/python3*/site-packages"))
    if not found:
        raise DataError(f"no lib/python3.*/site-packages in {prefix}", fix="the installer made no Python environment; see --verbose")
    return found[0]
