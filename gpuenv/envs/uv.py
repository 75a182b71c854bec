"""The one module that builds uv command lines and runs them (the conda solver and installer are
py-rattler, in gpuenv.envs.conda).

Command lines are built by pure functions (tested on their output); `run_*` execute them,
capture the output, and turn a failure into a one-line `ToolError` (the solver's own reason,
not a stack trace).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Sequence

from gpuenv.errors import BadInput, ToolError
from gpuenv.progress import Say

#: Where a lock that needs a channel may take long: a solve that hangs is cut off.
SOLVE_TIMEOUT_S = 1800

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: Lines of solver output that carry the reason, in the order they are looked for.
_UV_ERROR = re.compile(r"^error: (.*)")
_UV_CAUSE = re.compile(r"^\s*(?:cause|Caused by|╰─▶): (.*)|^\s*╰─▶ (.*)")


def uv_causes(output: str) -> list[str]:
    """The `cause:` lines of uv's error chain, in order, each whole: uv wraps a long cause to the
    terminal's width (COLUMNS), and the lines indented past a cause's own that follow it belong
    to it ("...: Temporary" then "failure in name resolution")."""
    causes: list[str] = []
    indent: int | None = None  # the last cause line's, while a wrapped part of it may follow
    for raw in output.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        depth = len(line) - len(line.lstrip())
        match = _UV_CAUSE.match(line)
        if match:
            causes.append(next(g for g in match.groups() if g).strip())
            indent = depth
        elif indent is not None and line.strip() and depth > indent:
            causes[-1] += " " + line.strip()
        else:
            indent = None
    return causes


_PY_EXCEPTION = re.compile(r"^(?:\w+\.)*(\w*(?:Error|Exception|Unsatisfiable\w*|NotFound\w*): .+)$")


class IndexUnreachable(ToolError):
    """A package index named for the lock did not answer; `url` is the one that failed."""

    def __init__(self, message: str, *, url: str, fix: str | None = None) -> None:
        self.url = url
        super().__init__(message, fix=fix)


# ---------------------------------------------------------------- command lines (pure)

#: The packages a framework index (download.pytorch.org/whl/<variant>) may serve; every other name
#: comes from PyPI, so a name the framework index also hosts (numpy, jinja2, ...) cannot be swapped
#: in.
FRAMEWORK_INDEX_PACKAGES = ("torch", "torchvision", "torchaudio")
UV_PROJECT_FILE = "pyproject.toml"


def uv_lock_project(
    requirements: Sequence[str],
    framework_index: str,
    pinned: Sequence[str] = FRAMEWORK_INDEX_PACKAGES,
) -> str:
    """A pyproject.toml for `uv pip compile` that pins the framework packages to an explicit index.

    uv's explicit index (`explicit = true` plus `[tool.uv.sources]`) is used only for the
    packages that name it, unlike `--extra-index-url`, from which uv's first-index rule would
    take any package the index also hosts (dependency confusion).
    """
    import json

    names = {
        re.split(r"[\s\[<>=!~;@]", r.strip(), maxsplit=1)[0].lower()
        for r in requirements
        if r.strip()
    }
    deps = "".join(f"    {json.dumps(r.strip())},\n" for r in requirements if r.strip())
    sources = "".join(f'{name} = {{ index = "framework" }}\n' for name in pinned if name in names)
    return (
        "# Rendered by gpuenv for uv pip compile: the framework index serves the framework "
        "packages only.\n"
        '[project]\nname = "gpuenv-lock"\nversion = "0"\n'
        f"dependencies = [\n{deps}]\n\n"
        f"[tool.uv.sources]\n{sources}\n"
        f'[[tool.uv.index]]\nname = "framework"\nurl = {json.dumps(framework_index)}\n'
        "explicit = true\n"
    )


def with_install_index(lock_text: str, framework_index: str) -> str:
    """The lock with the framework index added for `pip install --require-hashes`.

    uv does not emit an explicit index; pip needs it to find the framework wheel. Every pin
    carries its hashes, so pip cannot take another file (a decoy numpy) from that index.
    """
    line = f"--extra-index-url {framework_index}\n"
    if line in lock_text:
        return lock_text
    lines = lock_text.splitlines(keepends=True)
    at = max(
        (
            i + 1
            for i, ln in enumerate(lines)
            if ln.startswith(("--index-url", "--extra-index-url"))
        ),
        default=0,
    )
    return "".join(lines[:at] + [line] + lines[at:])


def uv_python_platform(platform: str, glibc: str) -> str:
    """uv's --python-platform for a conda subdir and the base image's glibc, e.g.
    x86_64-manylinux_2_35."""
    arch = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}.get(platform)
    if arch is None:
        raise BadInput(f"unknown platform {platform!r}", fix="use linux-64 or linux-aarch64")
    return f"{arch}-manylinux_{glibc.replace('.', '_')}"


def uv_compile_command(
    *,
    uv: str,
    requirements: Path,
    output: Path,
    python: str,
    python_platform: str,
    extra_index_urls: Sequence[str] = (),
    find_links: Path | None = None,
    pylock: bool = False,
) -> list[str]:
    """`uv pip compile` for the stack's Python and target platform (not this host), with hashes.

    `pylock`: write PEP 751's pylock.toml (each wheel's URL and sha256, for conda-lock.yml's pip
    entries) instead of a requirements lock; `output` must then be named pylock.NAME.toml.

    The wheelhouse is a flat `--find-links` source; the extra indexes are written into the lock
    (`--emit-index-url`) so `pip install --require-hashes -r` finds the same files. The
    wheelhouse path is not written: it is a folder of this host.
    """
    cmd = [
        uv,
        "pip",
        "compile",
        str(requirements),
        "--output-file",
        str(output),
        "--python-version",
        python,
        "--python-platform",
        python_platform,
        "--generate-hashes",
        "--no-header",
        "--emit-index-url",
        "--quiet",
        "--no-config",
    ]
    if pylock:
        cmd += ["--format", "pylock.toml"]
    for url in extra_index_urls:
        cmd += ["--extra-index-url", url]
    if find_links is not None:
        cmd += ["--find-links", str(find_links)]
    return cmd


# ---------------------------------------------------------------- running


def uv_binary() -> str:
    """The uv that came with the `uv` Python package (a pinned version), else one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        from shutil import which

        found = which("uv")
        if found is None:
            raise ToolError("uv is not installed", fix="pip install uv") from None
        return found


def tool_versions(backend: str) -> dict[str, str]:
    """Versions of the tools that made a lock, for the lock's metadata."""
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str] = {}
    names = ("py-rattler", "conda-lock", "uv") if backend == "conda-lock" else ("uv",)
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    if backend == "uv" and versions["uv"] == "not installed":
        out = subprocess.run(
            [uv_binary(), "--version"], capture_output=True, text=True, check=False
        )
        versions["uv"] = out.stdout.strip().removeprefix("uv ") or "unknown"
    return versions


def run_uv_compile(cmd: list[str], *, cwd: Path) -> None:
    """Run a uv compile; an unreachable index or a failed resolution becomes a one-line error."""
    env = {**os.environ, "UV_NO_PROGRESS": "1", "NO_COLOR": "1"}
    # uv would read a uv.toml or pyproject of the working directory: lock in a clean one.
    done = _run(cmd, cwd=cwd, env=env, tool="uv")
    if done.returncode != 0:
        output = done.stderr + done.stdout
        url = unreachable_url(output)
        if url is not None:
            causes = uv_causes(output)
            reason = causes[-1] if causes else summarize_tool_output(output)
            raise IndexUnreachable(f"uv could not reach {url} ({reason})", url=url)
        raise ToolError(
            f"uv could not lock: {summarize_tool_output(output)}",
            fix="change the pins in the team file, or choose another stack",
        )


def _run(
    cmd: list[str], *, cwd: Path, env: dict[str, str], tool: str
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=SOLVE_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise not_found(tool, cmd[0]) from None
    except subprocess.TimeoutExpired:
        raise ToolError(
            f"{tool} did not finish within {SOLVE_TIMEOUT_S} s",
            fix="check the network, then run it again",
        ) from None


def unreachable_url(output: str) -> str | None:
    """The index URL uv failed to fetch because of the network (DNS, connect, timeout), if any."""
    text = _ANSI.sub("", output)
    match = re.search(r"Failed to fetch: `?(\S+?)`?\s*$", text, re.MULTILINE)
    if match and re.search(
        r"dns error|client error \(Connect\)|timed out|operation timed out|Connection refused", text
    ):
        return match.group(1)
    return None


def summarize_tool_output(output: str, limit: int = 400) -> str:
    """The solver's reason in one line, never the trace.

    uv: its `error:` line, the first cause (the resolver's explanation) and the last (the root
    cause). A Python program: the last exception line of a traceback. Else the last line printed.
    """
    lines = [_ANSI.sub("", line).rstrip() for line in output.splitlines() if line.strip()]
    picked: list[str] = []
    errors = [m.group(1) for m in map(_UV_ERROR.match, lines) if m]
    causes = uv_causes(output)
    picked += errors[:1] + causes[:1] + causes[-1:]
    exceptions = [m.group(1) for m in map(_PY_EXCEPTION.match, lines) if m]
    picked += exceptions[-1:]
    picked = (
        list(dict.fromkeys(p.strip() for p in picked if p.strip())) or lines[-1:] or ["no output"]
    )
    text = "; ".join(picked)
    if len(text) <= limit:
        return text
    # Too long: cut the front, never the root cause at the end ("...: No space left on device").
    last = picked[-1]
    if len(last) > limit - 3:
        return "..." + last[-(limit - 3) :]
    room = limit - len(last) - 5
    return ("; ".join(picked[:-1])[:room] + "...; " if room > 0 else "...; ") + last


# ---------------------------------------------------------------- uv's managed Pythons (for images)


def python_request(version: str, arch: str) -> str:
    """uv's request for a glibc CPython X.Y of one architecture, e.g.
    ``cpython-3.11-linux-x86_64-gnu``.

    Explicit, so a Python fetched on one host fits the engine's architecture, and never a
    musl or free-threaded build. nvidia/cuda and ubuntu bases are glibc.
    """
    return f"cpython-{version}-linux-{arch}-gnu"


def python_install_command(uv: str, request: str, install_dir: Path) -> list[str]:
    """`uv python install` into gpuenv's own cache folder (not the user's uv Pythons)."""
    return [uv, "python", "install", request, "--install-dir", str(install_dir), "--no-bin"]


def python_find_command(uv: str, request: str) -> list[str]:
    """`uv python find` restricted to managed Pythons (the install dir comes from the
    environment)."""
    return [uv, "python", "find", request, "--managed-python", "--no-project"]


#: What to tell a user whose host cannot download the standalone Python.
PYTHON_MIRROR_FIX = (
    "set UV_PYTHON_INSTALL_MIRROR to a mirror of python-build-standalone's releases, "
    "or build on a base image that has this Python (--base-image)"
)


def install_standalone_python(
    version: str, arch: str, install_dir: Path, *, ca_cert: Path | None = None
) -> Path:
    """Install (or reuse) uv's managed CPython X.Y for `arch` in `install_dir`; return its root.

    The root is the folder holding bin/ and lib/: a relocatable python-build-standalone tree
    that the image build copies as it is. UV_PYTHON_PREFERENCE=only-managed keeps uv from
    answering with a system Python; UV_PYTHON_INSTALL_MIRROR in the environment is honoured.
    A download that fails becomes one line naming the URL and the setting that points elsewhere.
    """
    install_dir.mkdir(parents=True, exist_ok=True)
    uv = uv_binary()
    request = python_request(version, arch)
    env = {
        **os.environ,
        "UV_PYTHON_PREFERENCE": "only-managed",
        "UV_PYTHON_INSTALL_DIR": str(install_dir),
        "UV_NO_PROGRESS": "1",
        "NO_COLOR": "1",
    }
    if ca_cert is not None:
        env["SSL_CERT_FILE"] = str(ca_cert)
    done = _run(
        python_install_command(uv, request, install_dir), cwd=install_dir, env=env, tool="uv"
    )
    if done.returncode != 0:
        output = _ANSI.sub("", done.stderr + done.stdout)
        url = re.search(r"((?:https?|file)://[^\s`'\")]+)", output)
        where = (
            url.group(1)
            if url
            else os.environ.get("UV_PYTHON_INSTALL_MIRROR") or "python-build-standalone"
        )
        causes = uv_causes(output)
        reason = causes[-1] if causes else summarize_tool_output(output)
        raise ToolError(
            f"cannot download Python {version} ({arch}) for the image from {where} ({reason})",
            fix=PYTHON_MIRROR_FIX,
        )
    found = _run(python_find_command(uv, request), cwd=install_dir, env=env, tool="uv")
    executable = (
        found.stdout.strip().splitlines()[-1]
        if found.returncode == 0 and found.stdout.strip()
        else ""
    )
    if not executable:
        raise ToolError(
            f"uv installed Python {version} ({arch}) but cannot find it in {install_dir}: "
            f"{summarize_tool_output(found.stderr)}",
            fix=f"remove {install_dir} and build again",
        )
    return Path(executable).resolve().parent.parent


# ---------------------------------------------------------------- installing a lock into a prefix
# (invoke install)


def uv_venv_command(*, uv: str, prefix: Path, python: str) -> list[str]:
    """`uv venv` for the stack's Python, found on this host (never downloaded), relocatable.

    Relocatable, because the prefix is built beside its target and renamed into place: entry
    points and activate scripts then find the interpreter relative to themselves.
    """
    return [
        uv,
        "venv",
        "--relocatable",
        "--no-python-downloads",
        "--no-config",
        "--python",
        python,
        str(prefix),
    ]


def uv_install_command(
    *, uv: str, prefix: Path, lock: Path, find_links: Path | None = None, offline: bool = False
) -> list[str]:
    """`uv pip install` of a uv lock with every hash required and no dependency resolution.

    `offline`: no index is asked (`--no-index`, which also ignores the lock's own --index-url
    lines) and nothing is fetched (`--offline`); every wheel must be in `find_links`.
    """
    cmd = [
        uv,
        "pip",
        "install",
        "--python",
        str(prefix / "bin" / "python"),
        "--require-hashes",
        "--no-deps",
        "--no-config",
        "--compile-bytecode",
        "-r",
        str(lock),
    ]
    if find_links is not None:
        cmd += ["--find-links", str(find_links)]
    if offline:
        cmd += ["--no-index", "--offline"]
    return cmd


def not_found(tool: str, program: str) -> ToolError:
    """The one wording for a program that is not there: uv (gpuenv's own tool, from PyPI) or an
    environment's Python (an installer that made no bin/python)."""
    if os.path.basename(program) == "uv":
        fix = "pip install uv (gpuenv runs the uv of its Python package, else the one on PATH)"
    else:
        fix = f"check that {program} exists: the environment it belongs to may be incomplete"
    return ToolError(f"{tool} cannot run: {program} not found", fix=fix)


def run_installer(
    cmd: list[str], *, on_line: Say, tool: str, env: dict[str, str] | None = None
) -> None:
    """Run an installer, handing each line it prints to `on_line`; failure is a one-line ToolError.

    The installer runs in a process group of its own, and whatever stops gpuenv meanwhile (Ctrl-C,
    SIGTERM, an error) ends the whole group: the bytecode step (a pool, as `compileall -j 0` has)
    and uv start workers of their own, which killing the installer alone would leave running
    forever."""
    environment = {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1", **(env or {})}
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise not_found(tool, cmd[0]) from None
    lines: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            on_line(line)
        code = proc.wait()
    except BaseException:
        end_group(proc)
        raise
    finally:
        proc.stdout.close()
    if code != 0:
        raise ToolError(
            f"{tool} could not install: {summarize_tool_output(''.join(lines))}",
            fix="see --verbose for the installer's full output",
        )


#: How long an installer's process group has to leave after SIGTERM before it is killed.
END_GRACE_S = 5.0


def end_group(proc: subprocess.Popen) -> None:
    """End `proc` and every process of its group (it was started with start_new_session): SIGTERM,
    then SIGKILL after END_GRACE_S; bounded, and quiet when they are gone already."""
    import signal

    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=END_GRACE_S)
        except subprocess.TimeoutExpired:
            continue
        if signum == signal.SIGTERM:  # the leader left: its workers get the group's SIGKILL
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        return
