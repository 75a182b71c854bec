"""Install a stack's lock into a folder on this host, for servers and clusters without Docker.

uv lock -> a relocatable venv on this host's Python X.Y, `uv pip install --require-hashes`.
conda lock -> py-rattler links its conda packages (each checked by sha256), uv installs its pip
entries with hashes (gpuenv.envs.condalock); no installer is downloaded.
Either way the validation suite (`validate/`) is copied in, so `PREFIX/bin/python -m validate`
checks the server with exactly the environment the team's image holds.

As strict as a build: the lock is verified against the stack (gpuenv.envs.lockdir), and the prefix
is checked before any slow work (check_prefix). Atomic: the prefix is built in a hidden sibling
folder and renamed into place; a failed or interrupted install leaves the previous prefix whole
and nothing beside it, and an interrupt during the swap lets the swap finish first. A symbolic
link as prefix keeps being a link: the folder it points to is replaced. Permissions follow the
prefix's parent folder, not the installer's umask. A prefix records the lock hash it was made
from (gpuenv-prefix.json): a second run on an unchanged lock does nothing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from gpuenv import VALIDATE_DIR, __version__
from gpuenv.envs import conda, installed, lockdir, uv
from gpuenv.envs.lockdir import Lock
from gpuenv.errors import BadInput, DataError, ToolError
from gpuenv.progress import Say
from gpuenv.stack import Stack, stack_json
from validate.reading import InputRefused, load_json_input, read_text_input
from validate.signals import held_signals
from validate.writing import NAME_MAX, path_problem, replace_dir

#: A prefix's install record: a few hundred bytes of what it was installed from.
MAX_RECORD_BYTES = 1024 * 1024

#: The record a prefix keeps of what it was made from.
RECORD_FILE = "gpuenv-prefix.json"
#: A .pth line runs at interpreter start-up (site.py): it points the suite at PREFIX/stack.json.
STACK_PTH = (
    'import os, sys; os.environ.setdefault("GPUENV_STACK_FILE", os.path.join(sys.prefix, '
    '"stack.json"))\n'
)
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}
#: What gpuenv adds to the prefix's folder name beside it: ".NAME.PID.XXXXXXXX.tmp" (a PID has at
#: most 7 digits).
_TEMP_NAME_EXTRA = len("..1234567.abcdefgh.tmp")


@dataclass(frozen=True)
class InstallPlan:
    """One install, decided before anything is written."""

    stack: Stack
    lock: Lock
    #: The prefix as the user named it (a symbolic link stays one) and the folder that is swapped.
    prefix: Path
    wheelhouse: Path | None
    validate_dir: Path = VALIDATE_DIR
    offline: bool = False
    target: Path | None = None
    #: canonical conda channel URL -> mirror URL (the team's settings), for conda locks
    mirrors: dict[str, str] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """The real folder the install replaces: the prefix, or where its symbolic link points."""
        return self.target or self.prefix


@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    skipped: bool
    lock_sha256: str
    #: Signals (Ctrl-C, SIGTERM) that arrived during the final swap, which was completed first.
    interrupted: tuple[int, ...] = ()


def check_prefix(prefix: str | Path | None) -> tuple[Path, Path]:
    """(the prefix as given, made absolute; the real folder to replace), or BadInput in one line
    (see _check_prefix); a folder this user may not even look into is one line too."""
    try:
        return _check_prefix(prefix)
    except OSError as err:
        raise BadInput(
            f"--prefix {_short(str(prefix))}: {err.strerror or err} ({_short(str(err.filename))})",
            fix="give a folder this user can reach and write",
        ) from None
    except BadInput as err:
        if err.message.isprintable():
            raise
        # A path may hold a newline or an escape sequence: the message stays one line, and inert.
        raise BadInput(_printable(err.message), fix=err.fix) from None


def _check_prefix(prefix: str | Path | None) -> tuple[Path, Path]:
    """(the prefix as given, made absolute; the real folder to replace), or BadInput in one line.

    Run before any slow work. Refused: a missing value, impossible names (NUL, over 255 bytes
    with the temporary names gpuenv puts beside it), the kernel's folders (/proc, /sys, /dev),
    a dangling symbolic link, a file, a mount point or a folder holding one (a folder is replaced
    by renaming, which a mount point cannot be, and removing the old one would reach into the
    mount), a folder gpuenv did not make, and a place this user cannot write. A symbolic link
    to a folder is followed: the folder it points to is replaced and the link kept.
    """
    if prefix is None or not str(prefix).strip():
        raise BadInput(
            "--prefix is missing",
            fix="give the folder to install into, e.g. --prefix /shared/envs/torch",
        )
    text = str(prefix)
    problem = path_problem(text, folder=True)
    if problem:
        raise BadInput(
            f"--prefix {_short(text)}: {problem}", fix="give a folder path such as /opt/envs/torch"
        )
    given = Path(os.path.abspath(os.path.expanduser(text)))
    if given == Path(given.anchor):
        raise BadInput("--prefix / is the root folder", fix="give a folder such as /opt/envs/torch")
    target = Path(os.path.realpath(given))
    if given.is_symlink() and not target.exists():
        raise BadInput(
            f"--prefix {given} is a symbolic link to {os.readlink(given)}, which does not exist",
            fix="make the folder it points to, point the link at a gpuenv prefix, or remove the "
            "link",
        )
    problem = path_problem(target, folder=True)
    if problem:
        raise BadInput(
            f"--prefix {_short(text)} leads to {_short(str(target))}: {problem}",
            fix="give a folder path such as /opt/envs/torch",
        )
    if target == Path(target.anchor):
        raise BadInput(
            f"--prefix {given} is the root folder", fix="give a folder such as /opt/envs/torch"
        )
    room = NAME_MAX - _TEMP_NAME_EXTRA
    if len(os.fsencode(target.name)) > room:
        raise BadInput(
            f"--prefix {_short(text)}: the folder name is {len(os.fsencode(target.name))} bytes; "
            f"with the temporary names gpuenv makes beside it, it may be {room} at most",
            fix="give a shorter folder name",
        )
    if target.exists() and not target.is_dir():
        raise BadInput(
            f"--prefix {given} is a file"
            + ("" if target == given else f" (through the link, {target})"),
            fix="give a folder path (it is created)",
        )
    if target.is_dir():
        _check_replaceable(given, target)
    _check_writable_parent(given, target)
    return given, target


def _check_replaceable(given: Path, target: Path) -> None:
    """BadInput unless the existing folder `target` can be replaced: gpuenv made it, and no mount
    point is it or under it (a rename cannot move a mount point, and removing the old folder
    would reach into the mount)."""
    if os.path.ismount(target):
        raise BadInput(
            f"--prefix {given} is a mount point, which cannot be replaced by a rename",
            fix=f"install into a folder inside it, e.g. --prefix {given / 'env'}",
        )
    inside = mounts_under(target)
    if inside:
        raise BadInput(
            f"--prefix {given} holds the mount point {inside[0]}: replacing the folder would "
            "reach into it",
            fix="unmount it, or give another prefix",
        )
    try:
        why = not_ours(target)
    except OSError as err:
        raise BadInput(
            f"--prefix {given} cannot be read: {err.strerror}",
            fix="give a folder this user can read and write",
        ) from None
    if why:
        raise BadInput(
            f"--prefix {given} is a folder gpuenv did not make ({why})",
            fix="give a new or empty folder; gpuenv replaces only prefixes its record "
            "proves it made",
        )


def _check_writable_parent(given: Path, target: Path) -> None:
    """BadInput unless the nearest existing folder above `target` is a folder this user can
    write, on a file system mounted writable and with exec (torch's .so files load from it)."""
    existing = next(p for p in target.parents if p.exists())
    if not existing.is_dir():
        raise BadInput(
            f"--prefix {given}: {existing} is a file, not a folder",
            fix="give a path under a folder",
        )
    flags = _mount_flags(existing)
    if flags & os.ST_RDONLY:
        raise BadInput(
            f"--prefix {given}: {existing} is on a read-only file system",
            fix="choose a folder on a writable file system",
        )
    if flags & os.ST_NOEXEC:
        raise BadInput(
            f"--prefix {given}: {existing} is on a file system mounted noexec, where the "
            "prefix's programs and libraries (torch's .so files) could not be loaded",
            fix="choose a folder on a file system mounted with exec",
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(
            f"--prefix {given}: {existing} is not writable by this user",
            fix="choose a folder you can write, or ask for one on the shared path",
        )


def plan_install(
    stack: Stack,
    lock_dir: Path,
    prefix: str | Path,
    *,
    wheelhouse: Path | None = None,
    offline: bool = False,
    validate_dir: Path = VALIDATE_DIR,
    mirrors: dict[str, str] | None = None,
) -> InstallPlan:
    """Check the prefix and the lock (against `stack`, as a build does); a folder that is not ours
    is never replaced."""
    given, target = check_prefix(prefix)
    suite = Path(os.path.realpath(validate_dir))
    if target == suite or suite in target.parents:
        raise BadInput(
            f"--prefix {given} is inside the validation suite's folder {suite}, which is copied "
            "into every prefix",
            fix="give a folder outside the gpuenv checkout, e.g. /opt/envs/torch",
        )
    if wheelhouse is not None and not Path(wheelhouse).is_dir():
        raise BadInput(
            f"--wheelhouse {wheelhouse}: no such folder", fix="give a folder of .whl files"
        )
    if wheelhouse is not None:
        from gpuenv.envs.wheelhouse import wheel_names

        wheel_names(
            wheelhouse
        )  # every .whl a regular file: a folder or FIFO named x.whl is one line now
    lock = lockdir.verify(Path(lock_dir), stack)
    if offline and wheelhouse is None:
        raise BadInput(
            "--offline needs --wheelhouse",
            fix="give the folder that holds every wheel of the lock (see the README's offline "
            "recipe)",
        )
    mirrors = conda.check_mirrors(mirrors or {})
    if offline and lock.backend != "uv":
        from gpuenv.envs.offline import require_local_channels

        require_local_channels(lock.path, mirrors)
    return InstallPlan(
        stack=stack,
        lock=lock,
        prefix=given,
        wheelhouse=Path(wheelhouse) if wheelhouse else None,
        validate_dir=validate_dir,
        offline=offline,
        target=target,
        mirrors=mirrors,
    )


def not_ours(folder: Path) -> str | None:
    """Why `folder` may not be replaced by an install, in a few words; None when it is empty or
    gpuenv's own record proves gpuenv made it: a record naming a lock hash and the manifest of
    the entries gpuenv put there, and nothing else there. A file of the record's name alone
    proves nothing (anyone can `touch` it); an entry the manifest does not list (the project's
    src/ moved in later) would be deleted with the folder, so it is refused too."""
    entries = sorted(os.listdir(folder))
    if not entries:
        return None
    if RECORD_FILE not in entries:
        return f"no {RECORD_FILE}"
    record = read_record(folder)
    manifest = record.get("manifest") if isinstance(record, dict) else None
    lock_hash = record.get("lock_sha256") if isinstance(record, dict) else None
    if not (
        isinstance(lock_hash, str)
        and re.fullmatch(r"[0-9a-f]{64}", lock_hash)
        and isinstance(manifest, list)
        and all(isinstance(name, str) for name in manifest)
    ):
        return f"its {RECORD_FILE} is not a record gpuenv wrote (no lock hash and manifest)"
    extra = [name for name in entries if name != RECORD_FILE and name not in manifest]
    if extra:
        shown = ", ".join(_printable(name) for name in extra[:3])
        shown += f" and {len(extra) - 3} more" if len(extra) > 3 else ""
        return f"it holds {shown}, which gpuenv did not install"
    return None


def read_record(prefix: Path) -> dict | None:
    """What a prefix was installed from, or None when it is not a (whole) gpuenv prefix."""
    try:  # a prefix may be shared: its record is read bounded (a FIFO there would hang the read)
        return load_json_input(
            read_text_input(Path(prefix) / RECORD_FILE, MAX_RECORD_BYTES), max_depth=16
        )
    except InputRefused:
        return None


def is_current(plan: InstallPlan) -> bool:
    record = read_record(plan.folder)
    return bool(
        record
        and record.get("lock_sha256") == plan.lock.sha256
        and (plan.folder / "bin" / "python").exists()
    )


def install(plan: InstallPlan, *, say: Say, output: Say, force: bool = False) -> InstallResult:
    """Install the lock of `plan` into its prefix unless the prefix already holds exactly that lock.

    Built in a hidden sibling folder and swapped in (validate.writing.replace_dir). Whatever stops
    it before the swap (a failure, Ctrl-C, SIGTERM) removes that folder and leaves the prefix as
    it was; an interrupt during the swap waits for the swap and the removal of the old prefix,
    and is reported in the result. A file-system failure (a full disk) is one ToolError line.
    """
    if not force and is_current(plan):
        say(
            f"{plan.prefix} already holds lock {plan.lock.sha256[:12]} ({plan.lock.backend}): "
            "nothing to do"
        )
        _remember(plan)
        return InstallResult(plan.prefix, True, plan.lock.sha256)
    folder = plan.folder
    for path in leftovers(folder):
        say(
            f"left by an install that was killed (its process is gone): {path}; remove it with "
            "rm -rf once no install runs"
        )
    step = f"making {folder.parent}"
    work: Path | None = None
    made: list[Path] = []
    try:
        _make_parents(folder.parent, made)
        step = "making the build folder beside it"
        work = Path(
            tempfile.mkdtemp(
                prefix=f".{folder.name}.{os.getpid()}.", suffix=".tmp", dir=folder.parent
            )
        )
        work.rmdir()  # the installers want to create the folder themselves
        step = "installing the lock"
        if plan.lock.backend == "uv":
            _install_uv(plan, work, say, output)
        else:
            _install_conda(plan, work, say, output)
        say("copying the validation suite into the prefix")
        step = "copying the validation suite"
        site = _site_packages(work)
        _copy_tree(plan.validate_dir, site / "validate")
        step = "writing the stack record"
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
            # gpuenv's own files beside the packages, with their sha256: `invoke verify` checks them
            "files": own_files(work),
            # What gpuenv put in the prefix: the proof a later install may replace it (not_ours).
            "manifest": sorted(os.listdir(work)),
        }
        (work / RECORD_FILE).write_text(
            json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        step = "setting permissions"
        share_like_parent(work, folder.parent)
        say(
            f"moving it into place: {plan.prefix}"
            + (f" (the link's folder {folder})" if folder != plan.prefix else "")
        )
        step = "moving it into place"
        arrived = replace_dir(work, folder, redeliver=False)
        _remember(plan)
    except BaseException as err:
        with held_signals():  # a second Ctrl-C must not stop the removal halfway
            if work is not None:
                shutil.rmtree(work, ignore_errors=True)
            for parent in reversed(made):  # folders this run made for the prefix, when still empty
                with contextlib.suppress(OSError):
                    parent.rmdir()
        if isinstance(err, OSError):
            raise ToolError(
                f"install into {folder} failed while {step}: {err.strerror or err}",
                fix=f"{_os_fix(err)}; {plan.prefix} is as it was and nothing was left beside it",
            ) from None
        raise
    return InstallResult(plan.prefix, False, plan.lock.sha256, tuple(arrived))


def leftovers(folder: Path) -> list[Path]:
    """Hidden folders beside `folder` that an install of it made (.NAME.PID.XXXXXXXX.tmp, and
    .NAME.old-PID from the swap) whose process no longer runs on this host: what a SIGKILL or a
    power cut leaves. Named, never removed: on a shared file system the process may be another
    host's, still running."""
    if not folder.parent.is_dir():
        return []
    pattern = re.compile(rf"^\.{re.escape(folder.name)}\.(?:(\d+)\.[^.]+\.tmp|old-(\d+))$")
    found = []
    for entry in sorted(folder.parent.iterdir()):
        match = pattern.match(entry.name)
        if (
            match
            and entry.is_dir()
            and not entry.is_symlink()
            and not _running(int(match.group(1) or match.group(2)))
        ):
            found.append(entry)
    return found


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _make_parents(folder: Path, made: list[Path] | None = None) -> list[Path]:
    """Make `folder` and the missing folders above it, each with the access its own parent
    gives (share_like_parent), not the umask's; the folders made, outermost first, are also
    added to `made` as they are made (so a failure halfway knows what to remove)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    made = made if made is not None else []
    for path in reversed(missing):
        path.mkdir()
        made.append(path)
        share_like_parent(path, path.parent, walk=False)
    return made


def share_like_parent(root: Path, parent: Path, *, walk: bool = True) -> None:
    """Give the new prefix the access its parent folder gives, whatever the caller's umask.

    Under `umask 077` uv and copies make everything private to the installer, and a shared
    prefix (/shared/envs/torch) would be unusable by the team. Group and others get read (and
    search, and execute where the owner has it) when the parent lets them reach into it, group
    write when the parent is a group-writable team folder; nobody else ever gets write.
    """
    mode = stat.S_IMODE(os.stat(parent).st_mode)
    reach = 0
    for read, search in ((stat.S_IRGRP, stat.S_IXGRP), (stat.S_IROTH, stat.S_IXOTH)):
        if mode & (read | search):
            reach |= read | search
    group_write = stat.S_IWGRP if mode & stat.S_IWGRP and not mode & stat.S_IWOTH else 0
    readable = reach & (stat.S_IRGRP | stat.S_IROTH)

    def fix(path: str, is_dir: bool) -> None:
        current = os.lstat(path).st_mode
        if stat.S_ISLNK(current):
            return  # a link has no mode of its own
        own = stat.S_IMODE(current) & 0o700
        if is_dir:
            wanted = own | reach | group_write
        else:
            wanted = (
                own
                | readable
                | group_write
                | ((reach & (stat.S_IXGRP | stat.S_IXOTH)) if own & stat.S_IXUSR else 0)
            )
        if wanted != stat.S_IMODE(current):
            os.chmod(path, wanted)

    fix(str(root), True)
    if not walk:
        return
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            fix(os.path.join(folder, name), True)
        for name in files:
            fix(os.path.join(folder, name), False)


def mounts_under(folder: Path) -> list[str]:
    """Mount points strictly inside `folder` (from /proc/self/mountinfo; none where it is
    missing)."""
    try:
        lines = (
            Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace").splitlines()
        )
    except OSError:
        return []
    inside = []
    base = str(folder).rstrip("/") + "/"
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = re.sub(
                r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]
            )  # mountinfo escapes space as \040
            if point.startswith(base):
                inside.append(point)
    return inside


def _copy_tree(source: Path, dest: Path) -> None:
    """Copy the suite, stopping at the first failure with its OSError (shutil.copytree gathers
    them into one shutil.Error at the end, whose text is a list of every file that failed)."""
    for folder, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        into = dest / Path(folder).relative_to(source)
        into.mkdir(parents=True, exist_ok=True)
        for name in sorted(files):
            if not name.endswith(".pyc"):
                shutil.copyfile(os.path.join(folder, name), into / name)
                shutil.copymode(os.path.join(folder, name), into / name)


def _mount_flags(folder: Path) -> int:
    """The statvfs flags of the file system holding `folder` (ST_RDONLY, ST_NOEXEC); 0 when
    unknown."""
    try:
        return os.statvfs(folder).f_flag
    except OSError:
        return 0


def _os_fix(err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "free space on that file system (or raise the quota), or choose another --prefix"
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "choose a --prefix this user can write"
    return "check the file system, or choose another --prefix"


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:60] + "..." + text[-12:]


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _install_uv(plan: InstallPlan, work: Path, say: Say, output: Say) -> None:
    uv_bin = uv.uv_binary()
    say(f"creating a venv on this host's Python {plan.stack.python}")
    uv.run_installer(
        uv.uv_venv_command(uv=uv_bin, prefix=work, python=plan.stack.python),
        on_line=output,
        tool="uv venv",
        env={},
    )
    if not (work / "bin" / "python").exists():
        raise ToolError(
            f"uv made no interpreter in {work}",
            fix=f"install Python {plan.stack.python} on this host",
        )
    source = (
        f" (wheelhouse {plan.wheelhouse}{', offline' if plan.offline else ''})"
        if plan.wheelhouse
        else ""
    )
    say(f"installing {plan.lock.path.name} with hashes required{source}")
    uv.run_installer(
        uv.uv_install_command(
            uv=uv_bin,
            prefix=work,
            lock=plan.lock.path,
            find_links=plan.wheelhouse,
            offline=plan.offline,
        ),
        on_line=output,
        tool="uv pip install",
    )


def _install_conda(plan: InstallPlan, work: Path, say: Say, output: Say) -> None:
    """The conda lock through py-rattler (gpuenv.envs.condalock): packages checked by sha256, linked
    for the prefix's final path, pip entries by uv; refused first when this host lacks its
    __cuda/__glibc."""
    from gpuenv.envs import condalock

    conda_platform = _conda_platform()
    cache = Path(tempfile.mkdtemp(prefix="gpuenv-conda-pkgs-"))
    try:
        condalock.install(
            plan.lock.path,
            into=work,
            final_prefix=plan.folder,
            platform=conda_platform,
            have=condalock.host_virtual_versions(),
            target="this host",
            mirrors=plan.mirrors,
            wheelhouse=plan.wheelhouse,
            offline=plan.offline,
            cache=cache,
            say=say,
            output=output,
        )
        condalock.retarget_scripts(work, plan.folder)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _remember(plan: InstallPlan) -> None:
    """An image of a conda lock copies the prefix that holds it (gpuenv.envs.fromhost)."""
    if plan.lock.backend != "uv":
        from gpuenv.envs import fromhost

        fromhost.remember(plan.folder, plan.lock.sha256, _conda_platform())


def _conda_platform() -> str:
    import platform as host

    found = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}.get(host.machine())
    if found is None:
        raise BadInput(
            f"this host is {host.machine()}, for which gpuenv locks nothing",
            fix="install on a linux-64 or linux-aarch64 host",
        )
    return found


def own_files(prefix: Path) -> dict[str, str]:
    """sha256 of each file gpuenv put into the prefix (the suite, its .pth, the stack record), by
    path relative to the prefix: what no package's record declares."""
    site = _site_packages(prefix).relative_to(prefix).as_posix()
    paths = ["stack.json", f"{site}/gpuenv-stack.pth"]
    for folder, dirs, files in os.walk(prefix / site / "validate"):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        paths += [Path(folder, name).relative_to(prefix).as_posix() for name in files]
    return installed.own_files(prefix, paths)


def _site_packages(prefix: Path) -> Path:
    found = sorted(prefix.glob("lib/python3*/site-packages"))
    if not found:
        raise DataError(
            f"no lib/python3.*/site-packages in {prefix}",
            fix="the installer made no Python environment; see --verbose",
        )
    return found[0]
