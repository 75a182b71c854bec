"""Make (or reuse) the lock of a stack: the bytes everyone who builds the stack installs.

`ensure_lock` renders the inputs (spec, virtual packages or requirements, wheelhouse listing),
hashes them, and returns the existing lock when the hash is unchanged. Otherwise it locks into a
temporary sibling of the lock directory, checks the result (every line hashed; a GPU stack did
not fall back to CPU-only builds) and renames it into place, so a failed or interrupted lock
leaves the previous one intact.

The wheelhouse and the framework index (uv backend): the wheelhouse is searched first (uv
`--find-links`). When it holds a wheel of the stack's exact framework build for every locked
platform, the framework index is not named at all, so a host that cannot reach
download.pytorch.org still locks (dependencies come from PyPI). Otherwise the framework index is
named as an extra index; if it does not answer, the error says so and names the wheel to put in
the wheelhouse.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from packaging.requirements import Requirement
from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from gpuenv import PROJECT_ROOT
from gpuenv.envs import BACKENDS, conda, condalock, lockdir, spec, uv
from gpuenv.errors import BadInput, GpuenvError, ToolError
from gpuenv.progress import Say
from gpuenv.stack import Stack
from validate.writing import os_error_reason

ENVS_DIR = PROJECT_ROOT / "envs"
DEFAULT_TEAM_FILE = ENVS_DIR / "team.yml"
MAPPING_FILE = ENVS_DIR / "pypi-to-conda.yaml"
LOCKS_ENV_VAR = "GPUENV_LOCKS_DIR"
METADATA_FILE = lockdir.METADATA_FILE
SPEC_FILE = lockdir.SPEC_FILE
LOCK_FORMAT = lockdir.LOCK_FORMAT
#: Read-back of locks lives in gpuenv.envs.lockdir; these names stay importable from here.
LockedPackage = lockdir.LockedPackage
read_requirements_lock = lockdir.read_requirements_lock
read_conda_lock = lockdir.read_conda_lock
read_metadata = lockdir.read_metadata
#: Team and environment files larger than this are refused before anything reads them as YAML:
#: a real one is a few kB, and a 50 MB one made uv look up hundreds of thousands of names.
MAX_SPEC_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LockResult:
    """Where the lock of a stack lives and whether this call had to make it."""

    directory: Path
    backend: str
    input_hash: str
    skipped: bool
    files: Path


@dataclass(frozen=True)
class _Plan:
    """Everything that decides a lock's content; its hash is the lock's input hash."""

    backend: str
    platforms: tuple[str, ...]
    spec_text: str
    packages: spec.Packages
    virtual_packages: str
    extra_index_urls: tuple[str, ...]
    wheelhouse: Path | None
    wheelhouse_listing: tuple[str, ...]
    source: str
    channels: tuple[str, ...] = spec.CHANNELS
    origin: Path | None = None  # the file the user wrote (team file or --file), for messages
    team_file_sha256: str | None = None  # of the team file merged in (the export checks it later)
    env_file: Path | None = None  # the received file locked instead of the rendered spec
    #: canonical channel URL -> mirror URL (the team's settings): where repodata is read; not in the
    #: hash
    mirrors: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def input_hash(self) -> str:
        data = {
            "format": LOCK_FORMAT,
            "backend": self.backend,
            "platforms": list(self.platforms),
            "spec": self.spec_text,
            "virtual_packages": self.virtual_packages,
            "extra_index_urls": list(self.extra_index_urls),
            "wheelhouse": list(self.wheelhouse_listing),
            **({"channels": list(self.channels)} if self.backend != "uv" else {}),
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def locks_root() -> Path:
    """envs/locks, or $GPUENV_LOCKS_DIR (tests and CI lock into their own folders)."""
    override = os.environ.get(LOCKS_ENV_VAR)
    return Path(override) if override else ENVS_DIR / "locks"


def lock_directory(stack: Stack) -> Path:
    return locks_root() / stack.stack_id


def lock_file_name(backend: str) -> str:
    return lockdir.lock_file_name(backend)


def ensure_lock(
    stack: Stack,
    *,
    backend: str = "conda-lock",
    platforms: list[str] | None = None,
    wheelhouse: Path | None = None,
    team_file: Path | None = None,
    env_file: Path | None = None,
    force: bool = False,
    progress: Say | None = None,
    conda_channels: Iterable[str] = (),
    mirrors: dict[str, str] | None = None,
) -> LockResult:
    """Lock `stack` into its lock directory unless an identical lock is already there.

    `team_file` defaults to envs/team.yml; `env_file` locks a received environment.yml instead of
    the rendered spec (the team file is then not merged: the received file is the whole spec).
    """
    say = progress or (lambda _msg: None)
    plan = plan_lock(
        stack,
        backend=backend,
        platforms=platforms,
        wheelhouse=wheelhouse,
        team_file=team_file,
        env_file=env_file,
        conda_channels=conda_channels,
        mirrors=mirrors,
    )
    input_hash = plan.input_hash()
    directory = lock_directory(stack)
    lock_path = directory / lock_file_name(plan.backend)
    if not force and _is_current(directory, stack, plan.backend, input_hash):
        say(
            f"lock of {stack.stack_id} is up to date ({plan.backend}, inputs {input_hash[:12]}): "
            f"{lock_path}"
        )
        return LockResult(
            directory=directory,
            backend=plan.backend,
            input_hash=input_hash,
            skipped=True,
            files=lock_path,
        )

    say(f"checking the spec with conda-lock's parser ({', '.join(plan.platforms)})")
    _parse_like_conda_lock(plan.spec_text, plan.platforms, plan.origin)
    root = directory.parent
    work: Path | None = None
    try:
        for stale in lockdir.clean_stale(root):
            say(f"removed {stale.name}, left by a lock that did not finish")
        work = lockdir.new_work_dir(root, stack.stack_id)
        _lock_into(work, stack, plan, input_hash, say)
        say(f"writing {directory}")
        lockdir.replace_directory(work, directory)
        work = None
    except OSError as err:
        raise GpuenvError(
            f"cannot write the lock under {root}: {os_error_reason(err)}",
            fix=f"make {root} writable (or set {LOCKS_ENV_VAR} to a writable folder); the "
            "previous lock is unchanged",
        ) from None
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return LockResult(
        directory=directory,
        backend=plan.backend,
        input_hash=input_hash,
        skipped=False,
        files=lock_path,
    )


def plan_lock(
    stack: Stack,
    *,
    backend: str = "conda-lock",
    platforms: Iterable[str] | None = None,
    wheelhouse: Path | None = None,
    team_file: Path | None = None,
    env_file: Path | None = None,
    conda_channels: Iterable[str] = (),
    mirrors: dict[str, str] | None = None,
) -> _Plan:
    """Read and check every input before anything is written: bad input ends here."""
    if backend not in BACKENDS:
        raise BadInput(
            f"--backend {backend!r} is not known", fix=f"use one of {', '.join(BACKENDS)}"
        )
    if env_file is not None:
        text = _read(env_file, "--file")
        received = spec.parse_environment_file(text, str(env_file), condalock.conda_spec_problem)
        check_received_against_stack(received.packages, stack, env_file, text)
        chosen = spec.check_platforms(platforms or received.platforms or ())
        spec_text = spec.render_environment_file(received, chosen)
        packages = received.packages
        channels = received.channels or spec.CHANNELS
        source = str(env_file)
        origin: Path | None = env_file
        team_sha = None
    else:
        team_path, team, team_sha = read_team_file_hashed(team_file)
        chosen = spec.check_platforms(platforms or ())
        spec_text = spec.render_environment(stack, team, chosen)
        packages = spec.merge_packages(stack, team)
        channels = spec.CHANNELS
        source = f"rendered from the stack and {team_path}" if team else "rendered from the stack"
        origin = team_path if team else None
    listing: tuple[str, ...] = ()
    if wheelhouse is not None:
        if not wheelhouse.is_dir():
            raise BadInput(
                f"--wheelhouse {wheelhouse}: no such folder",
                fix="give a folder that holds .whl files",
            )
        from gpuenv.envs.wheelhouse import wheel_names

        listing = tuple(
            f"{name} {(wheelhouse / name).stat().st_size}" for name in wheel_names(wheelhouse)
        )  # regular files only
    extra = [c for c in packages.conda if spec.conda_name(c) not in ("python", "pip")]
    if backend == "uv" and extra:
        raise BadInput(
            f"the uv backend is pip-only and cannot lock conda packages: {', '.join(extra)}",
            fix="move them to the pip list of the team file, or use --backend conda-lock",
        )
    # The framework index is not named when the wheelhouse holds the framework build (air-gapped).
    extra_index = tuple(
        url
        for url in packages.pip_repositories
        if not (url == stack.index_url and wheelhouse_has_framework(wheelhouse, stack, chosen))
    )
    virtual_packages = "" if backend == "uv" else spec.render_virtual_packages(stack, chosen)
    return _Plan(
        backend=backend,
        platforms=chosen,
        spec_text=spec_text,
        packages=packages,
        virtual_packages=virtual_packages,
        extra_index_urls=extra_index,
        wheelhouse=wheelhouse,
        wheelhouse_listing=listing,
        source=source,
        channels=tuple(c for c in (conda_channels or channels) if c != "nodefaults"),
        mirrors=conda.check_mirrors(mirrors or {}),
        origin=origin,
        team_file_sha256=team_sha,
        env_file=env_file,
    )


def read_team_file(team_file: Path | None) -> tuple[Path, spec.Packages | None]:
    """The team file given (which must exist), else envs/team.yml if present; parsed and checked."""
    path, team, _sha = read_team_file_hashed(team_file)
    return path, team


def read_team_file_hashed(team_file: Path | None) -> tuple[Path, spec.Packages | None, str | None]:
    """read_team_file, plus the sha256 of the bytes parsed (None when there is no team file)."""
    team_path = team_file if team_file is not None else DEFAULT_TEAM_FILE
    if team_file is not None and not team_path.exists():
        raise BadInput(
            f"--team-file {team_file}: no such file",
            fix="give the path of a team file like envs/team.yml",
        )
    if not team_path.exists():
        return team_path, None, None
    text = _read(team_path, "--team-file")
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return team_path, spec.parse_team_file(text, str(team_path), condalock.conda_spec_problem), sha


def check_received_against_stack(
    packages: spec.Packages, stack: Stack, source: Path, text: str = ""
) -> None:
    """A received environment.yml locked for a stack must hold that stack's framework and Python.

    Otherwise the lock would be filed under the stack's name while holding something else
    (torch 2.1.0 in a `torch2.3.1-...` lock). Pins that contradict the stack, and a file without
    the framework, are bad input naming the line.
    """
    req = Requirement(stack.pip_requirement)
    framework = canonicalize_name(req.name)
    exact = next(
        (Version(s.version) for s in req.specifier if s.operator in ("==", "===")),
        Version(stack.framework_version),
    )

    def where(line: str) -> str:
        number = next((n for n, raw in enumerate(text.splitlines(), 1) if line in raw), None)
        return packages.where.get(line) or (f"{source}:{number}" if number else str(source))

    names = {framework} | (
        {"tensorflow", "tensorflow-cpu"} if stack.framework == "tensorflow" else set()
    )
    option = "--torch" if stack.framework == "torch" else "--tensorflow"
    found = False
    for line in packages.pip:
        pin = Requirement(line)
        if canonicalize_name(pin.name) not in names:
            continue
        if canonicalize_name(pin.name) != framework:
            raise BadInput(
                f"{where(line)}: {line!r} is not the stack's build ({stack.pip_requirement})",
                fix=f"write {stack.pip_requirement} (or choose the stack that installs {pin.name})",
            )
        found = True
        if pin.url or (pin.specifier and not pin.specifier.contains(exact, prereleases=True)):
            raise BadInput(
                f"{where(line)}: {line!r} contradicts the stack {stack.stack_id} "
                f"({stack.framework} {stack.framework_version})",
                fix=f"lock it with {option} matching the file, or change the pin",
            )
    for line in packages.conda:
        name = spec.conda_name(line)
        if canonicalize_name(name) in names:
            raise BadInput(
                f"{where(line)}: {line!r} installs {name} from conda",
                fix=f"the stack installs {stack.pip_requirement} with pip: move it to the pip list",
            )
        if name == "python" and not python_pin_allows(line, stack.python):
            raise BadInput(
                f"{where(line)}: {line!r} contradicts the stack's Python {stack.python}",
                fix="lock it with --python matching the file, or change the pin",
            )
    if not found:
        raise BadInput(
            f"{source}: has no {framework} requirement, but the stack {stack.stack_id} is built "
            "around it",
            fix=f"add '{stack.pip_requirement}' to its pip list (or lock the rendered spec "
            "without --file)",
        )


def python_pin_allows(line: str, python: str) -> bool:
    """Whether a conda `python` spec (python=3.11, python=3.11.4, python>=3.10,<3.12) allows X.Y."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    rest = line.split("::")[-1].strip()[len("python") :].replace(" ", "")
    if not rest or rest == "*":
        return True
    if rest.startswith("=") or (rest.startswith("==") and "*" not in rest):
        parts = rest.lstrip("=").rstrip("*").rstrip(".").split(".")  # conda's =3.11 means 3.11.*
        return parts[: len(python.split("."))] == python.split(".")[: len(parts)]
    try:
        allowed = SpecifierSet(rest)
    except InvalidSpecifier:
        return True  # conda's parser has accepted it already; do not guess
    v = Version(python)
    return any(allowed.contains(Version(f"{v.major}.{v.minor}.{patch}")) for patch in (0, 5, 30))


def _is_current(directory: Path, stack: Stack, backend: str, input_hash: str) -> bool:
    """Whether the lock there was made from the same inputs; a damaged lock is an error, not
    "unchanged"."""
    try:
        meta = lockdir.read_metadata(directory)
    except lockdir.OlderLockFormat:
        return False  # made by another gpuenv version: relocked, as LOCK_FORMAT promises
    if meta is None or meta.backend != backend or meta.input_hash != input_hash:
        return False
    lockdir.verify(directory, stack)  # raises DataError naming the mismatch
    return True


def _parse_like_conda_lock(spec_text: str, platforms: tuple[str, ...], source: Path | None) -> None:
    """conda-lock's own parser must accept the spec (both backends), before any lock folder
    exists."""
    with tempfile.TemporaryDirectory(prefix="gpuenv-spec-") as tmp:
        path = Path(tmp) / SPEC_FILE
        path.write_text(spec_text, encoding="utf-8")
        condalock.parse_spec_with_conda_lock(path, platforms, MAPPING_FILE, source=source)


def wheelhouse_has_framework(
    wheelhouse: Path | None, stack: Stack, platforms: Iterable[str]
) -> bool:
    """Whether the wheelhouse holds the stack's exact framework build for the stack's Python on
    every platform."""
    if wheelhouse is None or not wheelhouse.is_dir():
        return False
    req = Requirement(stack.pip_requirement)
    name = canonicalize_name(req.name)
    py = "cp" + stack.python.replace(".", "")
    found: set[str] = set()
    for path in wheelhouse.glob("*.whl"):
        try:
            wheel_name, version, _build, tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if wheel_name != name or not req.specifier.contains(version, prereleases=True):
            continue
        for tag in tags:
            arch = _arch_of(tag)
            if tag.interpreter in (py, "py3") and arch is not None:
                found.add(arch)
    return all(spec.PLATFORM_ARCH[p] in found for p in platforms)


def _arch_of(tag: Tag) -> str | None:
    for arch in spec.PLATFORM_ARCH.values():
        if tag.platform.endswith(arch) and tag.platform.startswith(("manylinux", "linux")):
            return arch
    return None


def _lock_into(work: Path, stack: Stack, plan: _Plan, input_hash: str, say: Say) -> None:
    """Make the whole lock directory inside `work` (nothing outside it is touched)."""
    (work / SPEC_FILE).write_text(plan.spec_text, encoding="utf-8")
    if plan.backend == "uv":
        packages = _lock_with_uv(work, stack, plan, say)
    else:
        packages = _lock_with_rattler(work, stack, plan, input_hash, say)
    say("checking the lock: hashes on every entry, GPU builds for a GPU stack")
    problem = cpu_only_problem(stack, packages, plan.platforms)
    if problem:
        raise ToolError(
            f"the lock of GPU stack {stack.stack_id} resolved to CPU-only builds: {problem}",
            fix="check the framework pin and its wheel index (or the wheelhouse)",
        )
    lock_file = work / lock_file_name(plan.backend)
    metadata = lockdir.LockMetadata(
        stack=stack,
        backend=plan.backend,
        input_hash=input_hash,
        lock_sha256=lockdir.file_sha256(lock_file),
        platforms=plan.platforms,
        source=plan.source,
        tool_versions=uv.tool_versions(plan.backend),
        extra_index_urls=plan.extra_index_urls,
        wheelhouse=str(plan.wheelhouse) if plan.wheelhouse else None,
        team_file=str(plan.origin) if plan.team_file_sha256 else None,
        team_file_sha256=plan.team_file_sha256,
        env_file=str(plan.env_file) if plan.env_file else None,
        locked_at=int(time.time()),
    )
    problem = lockdir.content_problem(stack, packages, plan.platforms, plan.backend)
    if problem:
        raise ToolError(
            f"the new lock of {stack.stack_id} does not hold the stack: {problem}",
            fix="check the pins of the file you locked",
        )
    lockdir.write_metadata(work, metadata)


def _lock_with_uv(work: Path, stack: Stack, plan: _Plan, say: Say) -> list[LockedPackage]:
    packages: list[LockedPackage] = []
    for index, platform in enumerate(plan.platforms):
        out = work / (lockdir.UV_LOCK_FILE if index == 0 else f"requirements.{platform}.lock.txt")
        _uv_compile(work, stack, plan, platform, out, say)
        packages += read_requirements_lock(out, platform)
    return packages


def _uv_compile(
    work: Path, stack: Stack, plan: _Plan, platform: str, out: Path, say: Say, pylock: bool = False
) -> None:
    """The pip part of the plan locked by uv for one platform into `out` (a requirements lock, or
    pylock.toml)."""
    requirements = work / "requirements.in"
    requirements.write_text("".join(f"{line}\n" for line in plan.packages.pip), encoding="utf-8")
    # The framework index serves the framework packages only (uv explicit index,
    # uv.uv_lock_project).
    framework_index = stack.index_url if stack.index_url in plan.extra_index_urls else None
    extra_index = tuple(u for u in plan.extra_index_urls if u != framework_index)
    if framework_index:
        requirements = work / uv.UV_PROJECT_FILE
        requirements.write_text(
            uv.uv_lock_project(plan.packages.pip, framework_index), encoding="utf-8"
        )
    target = uv.uv_python_platform(platform, spec.glibc_for(stack))
    sources = ", ".join(
        [
            *(["wheelhouse " + str(plan.wheelhouse)] if plan.wheelhouse else []),
            *plan.extra_index_urls,
            "PyPI",
        ]
    )
    say(f"locking with uv for Python {stack.python} on {target} from {sources}")
    cmd = uv.uv_compile_command(
        uv=uv.uv_binary(),
        requirements=requirements,
        output=out,
        python=stack.python,
        python_platform=target,
        extra_index_urls=extra_index,
        find_links=plan.wheelhouse,
        pylock=pylock,
    )
    try:
        uv.run_uv_compile(cmd, cwd=work)
    except uv.IndexUnreachable as err:
        fix = f"this host cannot reach {err.url}"
        if stack.index_url and err.url.startswith(stack.index_url):
            fix = (
                f"put the {stack.pip_requirement} wheel for Python {stack.python} ({platform}) "
                "in a folder and pass --wheelhouse DIR"
            )
        # Still an IndexUnreachable: callers (and the tests' fixtures) tell "no route" from a bad
        # lock by its type.
        raise uv.IndexUnreachable(err.message, url=err.url, fix=fix) from None
    if framework_index and not pylock:
        out.write_text(
            uv.with_install_index(out.read_text(encoding="utf-8"), framework_index),
            encoding="utf-8",
        )


def _lock_with_rattler(
    work: Path, stack: Stack, plan: _Plan, input_hash: str, say: Say
) -> list[LockedPackage]:
    """conda-lock.yml: the conda part solved by py-rattler per platform, with the stack's virtual
    packages; the pip part locked by uv for the same platform (gpuenv.envs.condalock).

    The two parts of a platform do not depend on each other: uv locks the pip part in a thread
    while the solve's child runs, and both are waited for (each bounded by its own timeout)
    before the next platform; a failed solve is the error said, as when they ran in turn."""
    from concurrent.futures import ThreadPoolExecutor

    conda_part, pip_part = {}, {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuenv-uv-lock") as uv_thread:
        for platform in plan.platforms:
            virtual = conda.virtual_packages(
                cuda=None if stack.is_cpu else stack.cuda,
                glibc=spec.glibc_for(stack),
                arch=spec.PLATFORM_ARCH[platform],
            )
            say(
                f"solving the conda part for {platform} from {', '.join(plan.channels)} "
                f"({', '.join(virtual)})"
            )
            pin_file = work / f"pylock.{platform}.toml"
            pip_locked = (
                uv_thread.submit(
                    _uv_compile, work, stack, plan, platform, pin_file, say, pylock=True
                )
                if plan.packages.pip
                else None
            )
            conda_part[platform] = conda.solve(
                channels=plan.channels,
                specs=plan.packages.conda,
                platform=platform,
                virtual=virtual,
                mirrors=plan.mirrors,
            )
            if pip_locked is not None:
                pip_locked.result()  # uv's error, raised here as the sequential call raised it
                pip_part[platform] = condalock.read_pylock(pin_file)
                pin_file.unlink()
    for leftover in ("requirements.in", uv.UV_PROJECT_FILE):
        (work / leftover).unlink(missing_ok=True)
    lockfile = work / lockdir.CONDA_LOCK_FILE
    condalock.write_lock(
        lockfile,
        conda_part=conda_part,
        pip_part=pip_part,
        channels=[conda.channel_url(c) for c in plan.channels],
        content_hash=input_hash,
        source=SPEC_FILE,
    )
    return read_conda_lock(lockfile)


# ---------------------------------------------------------------- checking locks


def cpu_only_problem(
    stack: Stack, packages: list[LockedPackage], platforms: Iterable[str]
) -> str | None:
    """Why a GPU stack's lock holds CPU-only builds, or None when it is fine (and always for CPU
    stacks).

    The framework build must carry the stack's CUDA local label (torch `+cu121`), or, for builds
    that take CUDA from pip packages (TensorFlow `[and-cuda]`, PyPI's torch), the lock must hold
    NVIDIA's CUDA wheels (`nvidia-*`) or conda CUDA packages (`cuda-*`, `cudatoolkit`).
    """
    if stack.is_cpu:
        return None
    framework = canonicalize_name(Requirement(stack.pip_requirement).name)
    for platform in platforms:
        here = [p for p in packages if p.platform == platform]
        names = {canonicalize_name(p.name) for p in here}
        if "tensorflow-cpu" in names:
            return f"tensorflow-cpu is in the lock for {platform}"
        build = next(
            (p for p in here if canonicalize_name(p.name) == framework and p.manager == "pip"), None
        )
        if build is None:
            return f"{framework} is not in the lock for {platform}"
        local = _local_label(build.version)
        if local == "cpu":
            return f"{framework}=={build.version} is the CPU build ({platform})"
        if (
            stack.wheel_variant
            and stack.wheel_variant.startswith("cu")
            and local is not None
            and local != stack.wheel_variant
        ):
            return (
                f"{framework}=={build.version} is not the {stack.wheel_variant} build ({platform})"
            )
        has_cuda_libs = any(is_cuda_wheel(n) for n in names) or any(
            p.manager == "conda" and (p.name.startswith("cuda-") or p.name == "cudatoolkit")
            for p in here
        )
        if local is None and not has_cuda_libs:
            return (
                f"{framework}=={build.version} comes without CUDA libraries on {platform} (no "
                "nvidia-* packages)"
            )
    return None


#: `nvidia-*` names that carry no CUDA libraries (NVML's Python bindings, which every spec holds).
NOT_CUDA_WHEELS = frozenset({"nvidia-ml-py", "nvidia-ml-py3"})


def is_cuda_wheel(name: str) -> bool:
    """NVIDIA's pip-packaged CUDA libraries (nvidia-cublas-cu12, nvidia-cudnn-cu12, ...)."""
    name = canonicalize_name(name)
    return name.startswith("nvidia-") and name not in NOT_CUDA_WHEELS


def _local_label(version: str) -> str | None:
    try:
        return Version(version).local
    except InvalidVersion:
        return None


def _read(path: Path, option: str) -> str:
    """The text of a user's file, read at most MAX_SPEC_BYTES + 1 bytes deep (so /dev/zero or a
    50 MB file is refused at once instead of being parsed)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise BadInput(f"{option} {path}: no such file", fix="check the path") from None
    except IsADirectoryError:
        raise BadInput(f"{option} {path}: is a folder", fix="give a YAML file") from None
    except PermissionError:
        raise BadInput(f"{option} {path}: permission denied", fix="make it readable") from None
    if len(data) > MAX_SPEC_BYTES:
        try:
            size = path.stat().st_size
        except OSError:
            size = 0
        known = f" ({size / 2**20:.1f} MiB)" if size else ""  # devices and pipes report no size
        raise BadInput(
            f"{option} {path}: larger than the {MAX_SPEC_BYTES // 2**20} MiB an environment file "
            f"may be{known}",
            fix="give the environment file itself, a list of packages of a few kB",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadInput(
            f"{option} {path}: cannot be read as text ({err.__class__.__name__})",
            fix="give a YAML file",
        ) from None
