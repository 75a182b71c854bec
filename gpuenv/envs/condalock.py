"""A stack's conda-lock.yml, made and installed without the conda-lock program or an installer
binary.

Lock: the conda part of the spec is solved per platform by gpuenv.envs.conda (py-rattler) with the
stack's virtual packages; the pip part is locked by uv for the same platform, with hashes (so an
aarch64 lock holds aarch64 wheels); both go into conda-lock's unified lockfile, written through
conda-lock's own models, so `conda-lock install` and pixi users read it.

Install: every conda package of the host's platform is fetched and checked against its sha256,
linked into a folder for its final path (the folder may be a build folder beside a prefix, or a
staging folder on the host for an image), then the pip entries are installed by uv with every
hash required. Before any download, a lock whose packages need a `__cuda` or `__glibc` the
target does not have is refused in one line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import tomllib
from packaging.version import InvalidVersion, Version

from gpuenv.datacache import cache_dir
from gpuenv.envs import conda, installed, lockdir, spec, uv
from gpuenv.errors import BadInput, DataError, ToolError
from gpuenv.progress import Say
from gpuenv.stack import Stack

if TYPE_CHECKING:
    from gpuenv.envs import fromhost

CONDA_LOCK_FILE = lockdir.CONDA_LOCK_FILE


# ---------------------------------------------------------------- conda-lock's own parser


def parse_spec_with_conda_lock(
    spec: Path, platforms: Sequence[str], mapping: Path, source: Path | None = None
) -> dict[str, list[str]]:
    """Parse a spec with conda-lock's own parser, offline; returns the dependency names per
    platform.

    Catches what the YAML checks cannot (conda-lock's requirement rules). A failure is a
    BadInput naming `source` (the file the user wrote; default the spec itself) and the line
    there that holds the entry conda-lock names.
    """
    from conda_lock.src_parser import make_lock_spec

    try:
        lock_spec = make_lock_spec(
            src_files=[spec], platform_overrides=list(platforms), mapping_url=str(mapping)
        )
    except Exception as err:  # conda-lock raises plain ValueError/RuntimeError for bad specs
        raise _spec_error(source or spec, err) from None
    return {
        platform: [dep.name for dep in deps] for platform, deps in lock_spec.dependencies.items()
    }


def conda_spec_problem(value: str) -> str | None:
    """Why conda-lock's MatchSpec rejects `value` (e.g. "Invalid version '1..2'"), or None when it
    parses."""
    from conda_lock.src_parser.conda_common import conda_spec_to_versioned_dep

    try:
        conda_spec_to_versioned_dep(value, "main")
    except Exception as err:  # it wraps conda's InvalidMatchSpec in a RuntimeError
        cause = err.__cause__ or err
        return str(cause).splitlines()[0] if str(cause) else type(cause).__name__
    return None


def _spec_error(spec: Path, err: Exception) -> BadInput:
    reason = str(err) or type(err).__name__
    if err.__cause__ is not None:
        reason = f"{reason} ({err.__cause__})"
    quoted = re.findall(r"[`'](.+?)[`']", reason)
    line_no = 1
    text = spec.read_text(encoding="utf-8") if spec.is_file() else ""
    for number, line in enumerate(text.splitlines(), start=1):
        if any(q and q in line for q in quoted):
            line_no = number
            break
    return BadInput(
        f"{spec}:{line_no}: conda-lock cannot parse it: {reason.splitlines()[0]}",
        fix="write the entry as a conda spec (name=1.2) or pip requirement (name==1.2)",
    )


@dataclass(frozen=True)
class PipPin:
    """One wheel of the pip part for one platform."""

    name: str
    version: str
    url: str
    sha256: str


# ---------------------------------------------------------------- the pip part (uv, pylock.toml)


def read_pylock(path: Path) -> list[PipPin]:
    """The wheels uv chose (`uv pip compile --format pylock.toml` for one target platform)."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    pins = []
    for package in data.get("packages", []):
        wheels = package.get("wheels") or []
        if len(wheels) != 1 or not (wheels[0].get("hashes") or {}).get("sha256"):
            raise ToolError(
                f"uv locked {package.get('name')} without exactly one hashed wheel for the "
                "platform",
                fix="pin a version that publishes a wheel for it (sdists are not locked)",
            )
        wheel = wheels[0]
        pins.append(
            PipPin(
                str(package["name"]),
                str(package["version"]),
                str(wheel["url"]),
                str(wheel["hashes"]["sha256"]),
            )
        )
    return pins


# ---------------------------------------------------------------- writing conda-lock.yml


def write_lock(
    path: Path,
    *,
    conda_part: Mapping[str, Sequence[conda.CondaPackage]],
    pip_part: Mapping[str, Sequence[PipPin]],
    channels: Sequence[str],
    content_hash: str,
    source: str,
) -> None:
    """conda-lock.yml through conda-lock's models (conda_lock.lockfile.v2prelim)."""
    from conda_lock.lockfile import write_conda_lock_file
    from conda_lock.lockfile.v2prelim.models import HashModel, LockedDependency, Lockfile, LockMeta

    packages = []
    for platform, records in conda_part.items():
        for record in records:
            packages.append(
                LockedDependency(
                    name=record.name,
                    version=record.version,
                    manager="conda",
                    platform=platform,
                    dependencies=_dependencies(record.depends),
                    url=record.url,
                    hash=HashModel(md5=record.md5 or None, sha256=record.sha256),
                    build=record.build,
                    categories={"main"},
                )
            )
        for pin in pip_part.get(platform, ()):
            packages.append(
                LockedDependency(
                    name=pin.name,
                    version=pin.version,
                    manager="pip",
                    platform=platform,
                    dependencies={},
                    url=pin.url,
                    hash=HashModel(sha256=pin.sha256),
                    categories={"main"},
                )
            )
    meta = LockMeta(
        content_hash={platform: content_hash for platform in conda_part},
        channels=[{"url": c, "used_env_vars": []} for c in channels],
        platforms=list(conda_part),
        sources=[source],
    )
    write_conda_lock_file(
        Lockfile(package=packages, metadata=meta),
        path,
        metadata_choices=(),
        include_help_text=False,
    )


def _dependencies(depends: Iterable[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in depends:
        name, _, rest = line.strip().partition(" ")
        found[name] = rest.strip() or "*"
    return found


# ---------------------------------------------------------------- reading it back for an install


@dataclass(frozen=True)
class LockedEnvironment:
    """The entries of one platform of a conda-lock.yml."""

    platform: str
    conda: tuple[conda.CondaPackage, ...]
    pip: tuple[PipPin, ...]


def read_lock(path: Path, platform: str) -> LockedEnvironment:
    """One platform of a conda-lock.yml, read with conda-lock's own parser."""
    import tempfile

    from conda_lock.lockfile import parse_conda_lock_file

    # conda-lock reads with yaml.safe_load and no bounds: the text is read once, bounded and its
    # shape checked (lockdir.load_lock_yaml), and conda-lock parses that same text from a copy.
    text = lockdir.lock_text(path)
    lockdir.read_conda_lock(path, text)  # bounded, shaped, every entry hashed, none listed twice
    with tempfile.TemporaryDirectory(prefix="gpuenv-lock-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_text(text, encoding="utf-8")
        try:
            lock = parse_conda_lock_file(copy)
        except Exception as err:  # pydantic's ValidationError, yaml's errors, conda-lock's own
            first = (str(err).splitlines() or [type(err).__name__])[0].replace(str(copy), str(path))
            raise DataError(
                f"{path}: conda-lock cannot read it ({first})", fix="relock: invoke lock --force"
            ) from None
    if platform not in lock.metadata.platforms:
        raise BadInput(
            f"{path} is locked for {', '.join(lock.metadata.platforms)}, not for {platform}",
            fix=f"lock for it too: invoke lock --platform {platform}",
        )
    conda_part, pip_part = [], []
    for dep in lock.package:
        if dep.platform != platform:
            continue
        if dep.manager == "conda":
            if not dep.hash.sha256:
                raise DataError(
                    f"{path}: {dep.name} has no sha256", fix="relock: invoke lock --force"
                )
            conda_part.append(
                # build_number and channel: not in conda-lock.yml, not needed to install
                conda.CondaPackage(
                    name=dep.name,
                    version=dep.version,
                    build=dep.build or "",
                    build_number=0,
                    subdir=dep.url.rsplit("/", 2)[-2],
                    url=dep.url,
                    sha256=dep.hash.sha256,
                    md5=dep.hash.md5 or "",
                    depends=tuple(
                        f"{k} {v}".strip() if v != "*" else k for k, v in dep.dependencies.items()
                    ),
                    channel="",
                )
            )
        else:
            pip_part.append(PipPin(dep.name, dep.version, dep.url, dep.hash.sha256 or ""))
    return LockedEnvironment(platform, tuple(conda_part), tuple(pip_part))


# ---------------------------------------------------------------- what the target machine must have


def host_virtual_versions(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """This host's `__cuda` and `__glibc` (None: none). CONDA_OVERRIDE_CUDA / _GLIBC win, as in
    conda."""
    environ = os.environ if environ is None else environ
    cuda = environ.get("CONDA_OVERRIDE_CUDA")
    if cuda is None:
        cuda = _driver_cuda()
    glibc = (
        environ.get("CONDA_OVERRIDE_GLIBC")
        or (os.confstr("CS_GNU_LIBC_VERSION") or "glibc ").split(" ")[-1]
        or None
    )
    return {"__cuda": cuda or None, "__glibc": glibc}


def _driver_cuda() -> str | None:
    """The CUDA version the NVIDIA driver supports (read by validate/host/nvml.py, NVML's one
    owner), or None without a driver, a GPU or nvidia-ml-py."""
    from validate.host.nvml import read_host

    return read_host().cuda_driver_version


_CONSTRAINT = re.compile(r"^(>=|<=|==|!=|>|<|=)?\s*([0-9][0-9A-Za-z.*]*)$")


def unmet_virtual(
    packages: Iterable[conda.CondaPackage], have: Mapping[str, str | None]
) -> str | None:
    """The first `__cuda` / `__glibc` requirement of a locked package that `have` does not meet, as
    "gpuenv-accel needs __cuda >=12.4, this machine has 12.1"; None when all are met."""
    for package in packages:
        for line in package.depends:
            name, _, spec = line.strip().partition(" ")
            if name not in ("__cuda", "__glibc"):
                continue
            value = have.get(name)
            if value is None:
                needs = f"{package.name} {package.version} ({package.build}) needs {name} {spec}"
                return needs.rstrip() + f", and there is no {name} here"
            if spec and not all(_meets(value, part.strip()) for part in spec.split(",")):
                return (
                    f"{package.name} {package.version} ({package.build}) needs {name} {spec}, "
                    f"and this has {value}"
                )
    return None


def _meets(value: str, constraint: str) -> bool:
    match = _CONSTRAINT.match(constraint)
    if not match:
        return True  # a form gpuenv does not read: the solver accepted it for the stack
    op, version = match.group(1) or "==", match.group(2)
    try:
        have = Version(value)
        if version.endswith(".*") or (op in ("=", "==") and "*" in version):
            prefix = version.rstrip("*").rstrip(".").split(".")
            return value.split(".")[: len(prefix)] == prefix
        want = Version(version)
    except InvalidVersion:
        return True
    return {
        ">=": have >= want,
        "<=": have <= want,
        ">": have > want,
        "<": have < want,
        "!=": have != want,
    }.get(op, have == want)


# ---------------------------------------------------------------- installing


def install(
    lock_path: Path,
    *,
    into: Path,
    final_prefix: Path,
    platform: str,
    have: Mapping[str, str | None],
    target: str,
    mirrors: Mapping[str, str] | None = None,
    wheelhouse: Path | None = None,
    offline: bool = False,
    cache: Path,
    say: Say,
    output: Say,
) -> None:
    """Install the `platform` part of a conda-lock.yml into `into`, for use at `final_prefix`.

    `have`: the target's `__cuda` / `__glibc` (`target` names it in the refusal: "this host", "the
    base image"). `cache`: where packages are downloaded (removed by the caller; the packages
    are removed from it, once linked, while the pip part installs).
    """
    environment = runnable_environment(lock_path, platform, have, target)
    say(f"fetching {len(environment.conda)} conda packages, each checked against the lock's sha256")
    # `output` takes chunks as a tool prints them: each fetch line ends with its own newline
    archives = conda.fetch_verified(
        environment.conda, cache, mirrors=mirrors, say=lambda line: output(line + "\n")
    )
    conda.link(archives, into, final_prefix=final_prefix, platform=platform, say=say)
    settle_records(into, environment.conda)
    # Linked: the archives and rattler's copies of them unpacked go while uv and the bytecode step
    # work, rather than after them (the caller removes `cache` only once this returns).
    removal = _remove_in_background(list(cache.iterdir()))
    try:
        _install_pip_part(environment, into, wheelhouse, offline, cache, say, output)
    finally:
        removal.join()


def _remove_in_background(paths: Sequence[Path]) -> threading.Thread:
    """A started thread that removes `paths` (folders whole); the caller joins it. Removing is an
    optimisation of time: a path that cannot be removed is left for the caller's removal."""

    def remove() -> None:
        for path in paths:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()

    thread = threading.Thread(target=remove, name="gpuenv-remove-packages", daemon=True)
    thread.start()
    return thread


def _install_pip_part(
    environment: LockedEnvironment,
    into: Path,
    wheelhouse: Path | None,
    offline: bool,
    cache: Path,
    say: Say,
    output: Say,
) -> None:
    """The lock's pip entries installed by uv, every hash required, then the bytecode compiled."""
    if environment.pip:
        say(f"installing {len(environment.pip)} pip packages with uv, every hash required")
        requirements = cache / "pip-requirements.txt"
        requirements.write_text(pip_requirements(environment.pip, wheelhouse), encoding="utf-8")
        cmd = [
            uv.uv_binary(),
            "pip",
            "install",
            "--python",
            str(into / "bin" / "python"),
            "--require-hashes",
            "--no-deps",
            "--no-config",
            "--link-mode",
            "copy",
            "-r",
            str(requirements),
        ]
        if offline:
            cmd += ["--offline", "--no-index"]
        uv.run_installer(cmd, on_line=output, tool="uv pip install")
        say("compiling the bytecode (each file once: the bytecode cache keeps it by content)")
        compile_bytecode(into, output)


def runnable_environment(
    lock_path: Path, platform: str, have: Mapping[str, str | None], target: str
) -> LockedEnvironment:
    """The `platform` part of the lock, refused in one line when `target` lacks a `__cuda` or
    `__glibc` its packages need, or when it has no Python."""
    environment = read_lock(lock_path, platform)
    problem = unmet_virtual(environment.conda, have)
    if problem:
        raise BadInput(
            f"{lock_path.name} cannot run on {target}: {problem}",
            fix="install where the driver (or base image) meets it, or lock the stack for this "
            "machine's CUDA (--cuda)",
        )
    if not any(p.name == "python" for p in environment.conda):
        raise DataError(f"{lock_path}: no python for {platform}", fix="relock: invoke lock --force")
    return environment


def settle_records(into: Path, packages: Sequence[conda.CondaPackage]) -> None:
    """conda-meta's records name each package by the lock's URL, not by the temporary folder it
    was fetched into, and keep no path of that folder (rattler's `extracted_package_dir`, `link`,
    `package_tarball_full_path`): the same lock then writes the same records whoever installs it,
    wherever (the image's environment layer is the same for every user of the lock)."""
    from gpuenv.envs.fromhost import record_text

    urls = {p.file_name: p.url for p in packages}
    for meta in sorted((into / "conda-meta").glob("*.json")):
        record = json.loads(meta.read_bytes())
        if record.get("fn") in urls:
            record["url"] = urls[record["fn"]]
        for key in ("extracted_package_dir", "link", "package_tarball_full_path"):
            record.pop(key, None)
        meta.write_text(record_text(record), encoding="utf-8")


#: gpuenv/envs/pyccache.py's text, which leads BYTECODE_SCRIPT: the cache's key and entry in one
#: place for the bytecode step and for fromhost.
_PYC_CACHE_TEXT = Path(__file__).with_name("pyccache.py").read_text(encoding="utf-8")

#: Run by the environment's own Python (its version's compiler, magic number and cache tag):
#: each .py under site-packages gets its .pyc from the bytecode cache when the cache holds one for
#: these source bytes at this path, else it is compiled and the result kept in the cache. argv:
#: site-packages, the prefix, the cache folder, then the top-level folders of site-packages left
#: uncompiled (NOT_COMPILED). A cache entry is the .pyc followed by its own sha256: checking that
#: costs a hash, where loading the code object to see that it is whole cost a fifth of a warm run.
#: Each source is read once: the main process reads it, makes its key, looks it up and writes the
#: .pyc of a hit (a warm run starts no worker); the misses go, eight at a time and with their
#: bytes, to a pool of worker processes (one a core, as `compileall -j 0` has; started at the
#: first miss), which compile each, write its .pyc and keep it in the cache, while the main
#: process reads on. The last few misses are compiled by the main process itself.
#: A .pyc is what `py_compile.compile(source, dfile=its path in the prefix,
#: invalidation_mode=CHECKED_HASH)` writes (as `compileall.compile_file(stripdir=prefix)` calls
#: it): PEP 552's header (the magic number, flags 0b11: hash-based and checked, the source's
#: hash) then the marshalled code compiled as importlib compiles it; its mode is the source's,
#: writable by its owner (importlib's `_calc_mode`), less the umask. Like py_compile, a .pyc
#: path that is a symlink or not a regular file is refused, never written through.
BYTECODE_SCRIPT = (
    _PYC_CACHE_TEXT
    + r"""
import concurrent.futures, contextlib, hashlib, importlib.util, marshal, multiprocessing, os
import stat, sys

site, root, cache = sys.argv[1:4]
skipped = set(sys.argv[4:])
MAGIC = importlib.util.MAGIC_NUMBER
CHECKED_HASH = (0b11).to_bytes(4, "little")  # PEP 552: hash-based, checked against the source
made = set()  # folders known to exist (in this process): one mkdir each, not one a file


def make_folder_of(path):
    folder = os.path.dirname(path)
    if folder not in made:
        os.makedirs(folder, exist_ok=True)
        made.add(folder)


def write_new(path, data, mode):
    # made new (O_EXCL: never through a link or over a file; one a killed run left is removed
    # first), and removed when the write fails (a full disk leaves no piece of a file behind)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o666)
    except FileExistsError:
        os.unlink(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o666)
    try:
        with open(fd, "wb") as out:
            out.write(data)
    except OSError:
        os.unlink(path)
        raise


def write_whole(path, data, mode):
    # a temporary file renamed: a reader never sees part of it, a link at `path` is replaced
    part = f"{path}.{os.getpid()}.part"
    write_new(part, data, mode)
    os.replace(part, path)


def keep(entry, code):
    try:
        make_folder_of(entry)
        write_whole(entry, code + hashlib.sha256(code).digest(), 0o666)
    except OSError:
        pass  # the cache is an optimisation, never an error


def place(target, code, mode, there):
    make_folder_of(target)
    (write_whole if there else write_new)(target, code, mode)


def compile_batch(batch):
    # in a worker: each source compiled, its .pyc written and kept in the cache; per source None
    # (done) or the error line of a source that could not be compiled
    return [compile_one(*job) for job in batch]


def compile_one(path, rel, target, there, entry, source, mode):
    try:
        compiled = compile(source, rel, "exec", dont_inherit=True)
    except Exception as err:  # SyntaxError, ValueError, UnicodeDecodeError: as py_compile
        return f"*** Error compiling {path!r}: {type(err).__name__}: {err}"
    code = MAGIC + CHECKED_HASH + importlib.util.source_hash(source) + marshal.dumps(compiled)
    try:
        place(target, code, mode, there)
    except OSError as err:
        return f"*** Error compiling {path!r}: {err}"
    keep(entry, code)
    return None


def sources():
    for folder, dirs, files in os.walk(site):
        dirs[:] = sorted(
            d for d in dirs if d != "__pycache__" and not (folder == site and d in skipped)
        )
        rel = os.path.relpath(folder, root)
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.endswith(".py") and os.path.isfile(path):
                yield path, os.path.join(rel, name)


def main():
    hits, failed, batch, sent, pool = 0, [], [], [], None
    for path, rel in sources():
        target = importlib.util.cache_from_source(path)
        there = False  # a .pyc at `target` already (a package's own): replaced whole
        try:
            with open(path, "rb") as f:
                source = f.read()
                mode = os.fstat(f.fileno()).st_mode | 0o200
            there = stat.S_ISREG(os.lstat(target).st_mode)
            if not there:
                failed.append(f"*** Error compiling {path!r}: {target} is not a regular file")
                continue
        except FileNotFoundError as err:
            if err.filename != target:
                failed.append(f"*** Error compiling {path!r}: {err}")
                continue
        except OSError as err:
            failed.append(f"*** Error compiling {path!r}: {err}")
            continue
        entry = entry_path(cache, MAGIC, rel, source)
        code = cached_code(entry, MAGIC)
        if code is not None:
            try:
                place(target, code, mode, there)
                hits += 1
            except OSError as err:
                failed.append(f"*** Error compiling {path!r}: {err}")
            continue
        batch.append((path, rel, target, there, entry, source, mode))
        if len(batch) == 8:
            if pool is None:  # forked (not spawned): the workers need not import this again
                fork = multiprocessing.get_context("fork")
                pool = concurrent.futures.ProcessPoolExecutor(mp_context=fork)
            sent.append(pool.submit(compile_batch, batch))
            batch = []
    compiled, results = 0, compile_batch(batch)  # the last few here, while the workers finish
    with pool or contextlib.nullcontext():
        results += [result for future in sent for result in future.result()]
    for result in results:
        if result is None:
            compiled += 1
        else:
            failed.append(result)
    print(f"{hits} .pyc files from the bytecode cache, {compiled} compiled", flush=True)
    for line in failed:  # last: the one-line error (its last line) names a file that failed
        print(line, flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
"""
)


#: Top-level packages of site-packages whose bytecode is not compiled: pip, the installer, which no
#: workload imports. A user of the image cannot install into its root-owned environment anyway;
#: `pip install --user` there compiles pip in memory, and a prefix's owner's first `pip` writes
#: pip's .pyc files itself. It is the largest package of every conda environment (conda-forge's
#: python depends on it: 491 of the 1,446 .py files of the test channel's CPU stack), and the
#: bare tools leave it uncompiled too: rattler compiles no `noarch: python` package, uv only what
#: it installs.
NOT_COMPILED = ("pip",)


def compile_bytecode(into: Path, output: Say, *, cache: Path | None = None) -> None:
    """The .pyc files of site-packages, hash-checked (`checked-hash`: valid as long as the source
    bytes are the same, wherever and whenever they were made), so the same lock gives the same
    bytes. The .pyc files stay: a non-root user cannot write them at run time.

    Each names its source relative to the prefix (`lib/python3.11/site-packages/...`), not by a
    prefix path: Python's import puts the real path in its place as it loads it
    (`importlib._bootstrap_external._compile_bytecode` -> `_imp._fix_co_filename`), so tracebacks
    show where the file is. A .pyc then depends only on its source, its path in the prefix and
    the Python, and `cache` (gpuenv's `bytecode/`) keeps each by those: a prefix installed on the
    host and the image's environment of the same lock compile each file once between them.
    The packages of NOT_COMPILED are left as they are."""
    site = sorted(into.glob("lib/python3*/site-packages"))
    if not site:
        raise DataError(
            f"no lib/python3.*/site-packages in {into}",
            fix="the lock's python package made no environment",
        )
    cache = cache if cache is not None else cache_dir() / "bytecode"
    cmd = [
        str(into / "bin" / "python"),
        "-c",
        BYTECODE_SCRIPT,
        str(site[0]),
        str(into),
        str(cache),
        *NOT_COMPILED,
    ]
    uv.run_installer(cmd, on_line=output, tool="the bytecode step (python)")


def pip_requirements(pins: Iterable[PipPin], wheelhouse: Path | None) -> str:
    """Direct-URL requirements with their hashes; a wheel that the wheelhouse holds comes from
    there."""
    lines = []
    for pin in pins:
        file_name = urllib.parse.unquote(pin.url.rsplit("/", 1)[-1])
        local = wheelhouse / file_name if wheelhouse is not None else None
        url = local.resolve().as_uri() if local is not None and local.is_file() else pin.url
        lines.append(f"{pin.name} @ {url} --hash=sha256:{pin.sha256}\n")
    return "".join(lines)


def retarget_scripts(into: Path, final_prefix: Path) -> None:
    """Scripts uv wrote into `into/bin` name `into`'s Python; make them name the final path's.

    uv installs the pip part with the folder's own interpreter, which is not yet at its final place
    (a build folder renamed into place, or a staging folder copied into an image). Both of uv's
    forms are rewritten: `#!INTO/bin/python` and the /bin/sh trampoline for long paths.
    """
    old, new = str(into).encode(), str(final_prefix).encode()
    changed = []
    for script in (into / "bin").iterdir():
        if script.is_symlink() or not script.is_file() or script.stat().st_size > 64 * 1024:
            continue
        data = script.read_bytes()
        if data.startswith(b"#!") and old in data and b"\0" not in data:
            script.write_bytes(data.replace(old + b"/bin/", new + b"/bin/"))
            changed.append(str(script))
    # Their RECORD rows then name the bytes now there, as pip's own script rewriting does
    # (`invoke verify` checks every file against its RECORD).
    for site in sorted(into.glob("lib/python3*/site-packages")):
        installed.update_record(site, changed)


def make_reproducible(prefix: Path) -> None:
    """Drop what differs between two installs of the same lock: the install time rattler writes into
    conda-meta/history, so the same lock gives the same image."""
    from gpuenv.envs.fromhost import without_install_times

    history = prefix / "conda-meta" / "history"
    if history.is_file():
        history.write_text(
            without_install_times(history.read_text(encoding="utf-8")), encoding="utf-8"
        )


#: Where the image's environment lives (docker/install-env.sh: ENV_DIR).
IMAGE_ENV_DIR = Path("/opt/gpuenv/env")


def stage_for_image(
    lock_path: Path,
    *,
    stack: Stack,
    lock_sha256: str,
    platform: str,
    target: str,
    mirrors: Mapping[str, str],
    wheelhouse: Path | None,
    offline: bool,
    cache_root: Path,
    say: Say,
) -> Path | fromhost.PrefixForImage:
    """The conda lock installed on the host for an image's /opt/gpuenv/env, kept in `cache_root`
    by the lock's hash: the image build only copies it, so the base needs no installer and the
    build no network. When none is staged and `invoke install` put the lock into a prefix here,
    that prefix is read instead (gpuenv.envs.fromhost): nothing is installed or written again.
    Installed at a fixed path (the temporary folder, by user and lock), since an install writes
    its own path into some files (uv's RECORD, rattler's conda-meta): the same lock then gives
    the same bytes, and so the same image. The image's `__cuda` is the stack's CUDA,
    its `__glibc` the stack's base image's (the driver is checked when the container starts)."""
    import shutil
    import tempfile

    have = {"__cuda": None if stack.is_cpu else stack.cuda, "__glibc": spec.glibc_for(stack)}
    staged = cache_root / f"{lock_sha256[:16]}-{platform}"
    manifest = staged.with_name(staged.name + ".manifest.json")
    if staged.exists() or manifest.exists():
        damage = staged_damage(staged, manifest)
        if damage is None:
            say(f"the conda environment of lock {lock_sha256[:12]} is staged already: {staged}")
            return staged
        say(f"the staged conda environment {staged} is damaged ({damage}): staging it again")
        _discard(staged, manifest)
    from_host = _from_host(lock_path, lock_sha256, platform, have, target, say)
    if from_host is not None:
        return from_host
    cache_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.gettempdir()) / f"gpuenv-stage-{os.getuid()}-{lock_sha256[:16]}-{platform}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        into = work / "env"
        install(
            lock_path,
            into=into,
            final_prefix=IMAGE_ENV_DIR,
            platform=platform,
            have=have,
            target=target,
            mirrors=mirrors,
            wheelhouse=wheelhouse,
            offline=offline,
            cache=work / "downloads",
            say=say,
            output=lambda _l: None,
        )
        retarget_scripts(into, IMAGE_ENV_DIR)
        make_reproducible(into)
        partial = Path(tempfile.mkdtemp(prefix=f".{staged.name}.", dir=cache_root))
        try:  # into the cache whole or not at all (the cache may be on another file system)
            try:
                os.replace(into, partial / "env")  # the same file system: nothing copied
            except OSError:
                shutil.copytree(into, partial / "env", symlinks=True)
            listed = json.dumps(tree_manifest(partial / "env"))
            (partial / "manifest.json").write_text(listed, encoding="utf-8")
            if not staged.exists():
                os.replace(partial / "env", staged)
                # last: a staged folder without its manifest is staged again
                os.replace(partial / "manifest.json", manifest)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return staged


def _from_host(
    lock_path: Path,
    lock_sha256: str,
    platform: str,
    have: Mapping[str, str | None],
    target: str,
    say: Say,
) -> fromhost.PrefixForImage | None:
    """The image's environment read from a prefix that `invoke install` made of this lock here
    (gpuenv.envs.fromhost), rather than the lock installed a second time; None when there is none
    it can be taken from (each refusal said)."""
    from gpuenv.envs import fromhost
    from gpuenv.envs.verify import byte_progress, expected_from_lock

    prefixes = [p for p in fromhost.remembered(lock_sha256, platform) if p.is_dir()]
    if not prefixes:
        return None
    environment = runnable_environment(lock_path, platform, have, target)
    compared = expected_from_lock(lock_path.parent, None, platform=platform)
    assert compared.expected is not None

    def attempt(prefix: Path) -> fromhost.PrefixForImage:
        say(f"taking the environment {prefix} installed for the image, checked against its lock")
        return fromhost.for_image(
            prefix,
            final_prefix=IMAGE_ENV_DIR,
            lock_sha256=lock_sha256,
            expected=compared.expected,
            expected_from=compared.what,
            # as an install compiles it (install: only with a pip part), from the bytecode cache
            bytecode_cache=cache_dir() / "bytecode" if environment.pip else None,
            not_compiled=NOT_COMPILED,
            progress=byte_progress(say, None, f"reading {prefix}"),
        )

    return fromhost.first_of(prefixes, attempt, say)


#: A staged environment's manifest: at most this many bytes are read (a CUDA stack lists some
#: 30,000 files).
MAX_MANIFEST_BYTES = 64 << 20


def tree_manifest(root: Path) -> dict[str, list]:
    """Every entry under `root` by relative path: [kind, size] for files ("f"), [kind, target]
    for links ("l"), folders ("d"). Compared on reuse, so a lost or changed file is found."""
    found: dict[str, list] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ["l", os.readlink(path)]
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ["d", 0]
            else:
                found[rel] = ["f", info.st_size]
    return dict(sorted(found.items()))


def staged_damage(staged: Path, manifest: Path) -> str | None:
    """What is wrong with a staged environment, in a few words, or None when it is whole: its
    manifest missing or unreadable, or an entry lost, added or changed in size since staging
    (a package's files, or its conda-meta record)."""
    from validate.reading import InputRefused, decode_input, load_json_input, read_input

    if not staged.is_dir() or staged.is_symlink():
        return "the folder is missing"
    try:
        text = decode_input(read_input(manifest, MAX_MANIFEST_BYTES))
        recorded = load_json_input(text, max_depth=4)
    except InputRefused as err:
        return f"its manifest {manifest.name}: {err}"
    if not isinstance(recorded, dict):
        return f"its manifest {manifest.name} is not a manifest"
    try:
        now = tree_manifest(staged)
    except OSError as err:
        return f"it cannot be read ({err.strerror})"
    for rel, entry in recorded.items():
        if rel not in now:
            return f"{rel} is missing"
        if now[rel] != entry:
            return f"{rel} changed"
    added = next((rel for rel in now if rel not in recorded), None)
    return f"{added} was added" if added else None


def _discard(staged: Path, manifest: Path) -> None:
    """Move a damaged staged environment aside (a build may still be copying it), then remove it."""
    import shutil
    import tempfile

    manifest.unlink(missing_ok=True)
    if staged.is_dir() and not staged.is_symlink():
        aside = Path(tempfile.mkdtemp(prefix=f".{staged.name}.damaged.", dir=staged.parent))
        os.replace(staged, aside / "env")
        shutil.rmtree(aside, ignore_errors=True)
    elif staged.is_symlink() or staged.exists():
        staged.unlink()
