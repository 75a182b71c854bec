"""Pick a stack that exists and works: the compatibility engine's decision logic.

Pure: it reads the Matrix and the Request and nothing else (the host and the wheelhouse folder
are read by the caller), so every rule is tested table-driven. The rules, in the order they
apply (README "How the stack is chosen"):

- GPUs first: Jetson modules are refused (JetPack targets them), and a driver older than the
  first branch that knows a GPU is refused under every rule.
- CUDA rule: `--cuda X.Y` is the container's CUDA (base image, and the most the driver runs).
  The build CUDA is chosen first: the newest at or below X.Y within X's major, else the lowest
  above it (on the X.Y image by minor-version compatibility); then the newest release with that
  build. The wheels carry their own CUDA libraries (Cog's rule); a major is never crossed.
- Driver rule: without `--cuda`, the base image is one the driver runs natively and the build
  the newest of that major under minor-version compatibility (11.x from 450.80.02, 12.x from
  525.60.13); when no image of the major runs natively (CUDA 11 hosts), the image itself runs by
  minor-version compatibility. Not with `--strict-driver`.
- Kernels: SASS of the GPU's major at or below its minor, or PTX the driver JIT-compiles, which
  needs a driver that runs the build's CUDA natively (TensorFlow's from its build_info.py).
  The minimum driver is the highest of the image's, the build's, the PTX JIT's and the GPUs'.
- Default Python: the newest the release supports whose X.Y.0 is at least six months old.
- Wheelhouse: with wheels of the framework in it, only the releases, builds and Pythons it holds.

It prefers the newest framework release, then a confirmed build, then the newest build CUDA;
when nothing fits it names the constraint that emptied the candidates and fixes that are the
exact options to change, each resolved before it is printed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date
from typing import Iterable

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from gpuenv.compat.matrix import (
    CudaImage,
    CudaRelease,
    Matrix,
    TensorflowRelease,
    TorchRelease,
    TorchVariant,
    load_matrix,
    version_key as V,
)
from gpuenv.errors import BadInput, GpuenvError, NoCompatibleStack
from gpuenv.stack import CPU, FRAMEWORKS, Stack

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"
#: How old a Python's X.Y.0 must be before it is the default (most packages support it by then).
DEFAULT_PYTHON_MIN_AGE_MONTHS = 6
_FRAMEWORK_ALIASES = {"torch": "torch", "pytorch": "torch", "tensorflow": "tensorflow", "tf": "tensorflow"}
_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow"}
_LINUX_X86 = re.compile(r"^(manylinux\w*|linux)_x86_64$")


@dataclass(frozen=True)
class Request:
    """What the user wants; every field optional. Values are raw strings as typed on the command line.

    `wheelhouse` holds the file names of a wheel folder (None: no wheelhouse), `wheelhouse_dir`
    its path for messages; `today` fixes the date for the default-Python rule (tests).
    """

    driver: str | None = None
    cuda: str | None = None
    framework: str | None = None
    torch: str | None = None
    tensorflow: str | None = None
    python: str | None = None
    gpu_archs: tuple[str, ...] = ()
    driver_source: str = "--driver"
    strict_driver: bool = False
    wheelhouse: tuple[str, ...] | None = None
    wheelhouse_dir: str | None = None
    today: date | None = None
    #: False for the re-resolutions behind suggestions (their own suggestions are not needed).
    explain: bool = True
    #: Where a value came from when not the command line, by field ("invoke.yaml: gpuenv.torch",
    #: "the GPUs of --host x.xml"): an error blames that, not an option nobody typed.
    origins: tuple[tuple[str, str], ...] = ()

    def blame(self, key: str) -> str:
        """What an error about field `key` names: its origin, or the command-line option."""
        return dict(self.origins).get(key) or _OPTION_NAMES.get(key, "--" + key)


@dataclass(frozen=True)
class _Candidate:
    """One framework build for one Python; `placement` is filled once the base image is chosen."""

    framework_version: str
    python: str
    cuda: CudaRelease | None  # the build's CUDA (framework_cuda)
    variant: TorchVariant | None = None
    tf: TensorflowRelease | None = None
    from_pypi: bool = False  # the wheelhouse holds the PyPI wheel (no +local tag) of this build
    placement: "_Placement | None" = None

    @property
    def release(self) -> CudaRelease:
        assert self.cuda is not None, "a CPU candidate has no CUDA release"
        return self.cuda

    @property
    def kernels(self) -> "TorchVariant | TensorflowRelease":
        """What the build compiled: torch's variant or TensorFlow's release (both have archs and ptx)."""
        return self.variant if self.variant is not None else self.tf  # type: ignore[return-value]

    def sort_key(self) -> tuple:
        """Newest CUDA major first (never a CUDA 11 build when a CUDA 12 one runs), then newest release, then a
        build the data confirms, then the newest build CUDA."""
        if self.cuda is None:
            return (0, V(self.framework_version), True, V("0"))
        confirmed = self.variant is None or self.variant.confirmed
        return (self.cuda.major, V(self.framework_version), confirmed, V(self.cuda.minor))


@dataclass(frozen=True)
class _Placement:
    """The container CUDA and base image a GPU build runs on, and why the driver can run it."""

    container: CudaRelease
    image: CudaImage
    min_driver: str
    minor_compat: bool = False
    #: The image itself runs by minor-version compatibility (no image of its major runs natively).
    image_minor_compat: bool = False


# ---------------------------------------------------------------- input parsing

def parse_cuda(value: str | None, matrix: Matrix, option: str = "--cuda") -> str | None:
    """'12.1' / '12.1.1' / 'cpu' -> '12.1' / 'cpu'; anything else is a BadInput naming the fix."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    if text in (CPU, "none"):
        return CPU
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    known = ", ".join(c.minor for c in sorted(matrix.cuda_releases, key=lambda c: V(c.minor)))
    if not match:
        raise BadInput(f"{option} {value!r} is not a CUDA version", fix=f"use X.Y such as 12.4 (known: {known}) or 'cpu'")
    minor = f"{int(match[1])}.{int(match[2])}"
    if matrix.cuda_release(minor) is None:
        raise BadInput(f"{option} {value}: no CUDA {minor} release is known", fix=f"use one of {known}, or 'cpu'")
    return minor


def parse_driver(value: str | None, source: str = "--driver") -> str | None:
    if value is None or value == "":
        return None
    text = str(value).strip()
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
        raise BadInput(f"{source} {value!r} is not an NVIDIA driver version", fix="give it as nvidia-smi shows it, e.g. 535.104.05")
    return text


def parse_framework(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    name = _FRAMEWORK_ALIASES.get(str(value).strip().lower())
    if name is None:
        raise BadInput(f"--framework {value!r} is not supported", fix=f"use one of {', '.join(FRAMEWORKS)}")
    return name


def parse_python(value: str | None, option: str = "--python") -> str | None:
    if value is None or value == "":
        return None
    match = re.fullmatch(r"(?:py|python)?\s*(\d+)\.(\d+)(?:\.\d+)?", str(value).strip().lower())
    if not match:
        raise BadInput(f"{option} {value!r} is not a Python version", fix="use X.Y such as 3.11")
    return f"{int(match[1])}.{int(match[2])}"


def parse_gpu_arch(value: str, matrix: Matrix, option: str = "--gpu-arch") -> str:
    """'8.6', 'sm_86', '86', 'compute_90' -> '8.6'; unknown capabilities are a BadInput."""
    text = str(value).strip().lower()
    match = re.fullmatch(r"(\d+)\.(\d+)", text) or re.fullmatch(r"(?:sm_|compute_)?(\d+?)(\d)a?", text)
    known = sorted({cc for a in matrix.gpu_architectures for cc in a.compute_capabilities}, key=V)
    if not match:
        raise BadInput(f"{option} {value!r} is not a compute capability", fix="use X.Y such as 8.6, or sm_86")
    cc = f"{int(match[1])}.{int(match[2])}"
    if matrix.architecture_of(cc) is None:
        raise BadInput(f"{option} {value}: compute capability {cc} is not known", fix=f"use one of {', '.join(known)}")
    return cc


def split_arch_list(values: Iterable[str] | str | None) -> list[str]:
    """Accept '8.0,8.6' or ['8.0', '8.6'] alike."""
    if not values:
        return []
    items = [values] if isinstance(values, str) else list(values)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def _pick_patch(pin: str | None, name: str, releases: list, option: str) -> list[tuple[object, str]]:
    """Expand releases to (release, patch) pairs, newest first, honouring '--torch 2.3' or '2.3.1'."""
    pairs = [(r, p) for r in releases for p in r.patches]
    pairs.sort(key=lambda rp: V(rp[1]), reverse=True)
    if pin is None:
        # Within a series only the newest patch is offered unless pinned: patches fix bugs.
        newest: dict[str, tuple[object, str]] = {}
        for r, p in pairs:
            newest.setdefault(r.series, (r, p))
        return list(newest.values())
    text = str(pin).strip()
    if re.fullmatch(r"\d+\.\d+", text):
        chosen = [rp for rp in pairs if rp[0].series == text][:1]
    else:
        chosen = [rp for rp in pairs if rp[1] == text]
    if not chosen:
        known = ", ".join(sorted({r.series for r in releases}, key=V))
        raise BadInput(f"{option} {pin}: no {name} release {pin} is known", fix=f"use a release of series {known}")
    return chosen


# ---------------------------------------------------------------- rules as small pure functions

def kernel_coverage(cc: str, variant: "TorchVariant | TensorflowRelease") -> str | None:
    """How a build runs on compute capability `cc`: 'sm_XY' (native), 'PTX JIT from compute_XY', or None.

    A cubin for sm_XY runs on the same major with an equal or higher minor; PTX for X.Y is
    JIT-compiled for any newer capability (slow first start, and only by a driver that runs the
    build's CUDA natively: see _kernel_min_driver).
    """
    major, minor = (int(x) for x in cc.split("."))
    native = [a for a in variant.archs if int(a.split(".")[0]) == major and int(a.split(".")[1]) <= minor]
    if native:
        best = max(native, key=V)
        return "sm_" + best.replace(".", "")
    if variant.ptx and V(variant.ptx) <= V(cc):
        return "PTX JIT from compute_" + variant.ptx.replace(".", "")
    return None


def _add_months(day: date, months: int) -> date:
    month = day.month - 1 + months
    year, month = day.year + month // 12, month % 12 + 1
    for last in (31, 30, 29, 28):
        try:
            return date(year, month, min(day.day, last))
        except ValueError:
            continue
    raise AssertionError("unreachable")


def default_python(matrix: Matrix, pythons: Iterable[str], today: date) -> tuple[str, str]:
    """The default Python among `pythons` and the reason: the newest whose X.Y.0 is six months old."""
    offered = sorted(set(pythons), key=V)
    mature = []
    for py in offered:
        rel = matrix.python_release(py)
        if rel is not None and _add_months(rel.released, DEFAULT_PYTHON_MIN_AGE_MONTHS) <= today:
            mature.append(py)
    if mature:
        chosen = mature[-1]
        rel = matrix.python_release(chosen)
        newer = [p for p in offered if V(p) > V(chosen)]
        why = f"the newest Python it supports whose {chosen}.0 is at least {DEFAULT_PYTHON_MIN_AGE_MONTHS} months old (released {rel.released})"
        if newer:
            why += f"; {', '.join(newer)} is newer than that, pick it with --python"
        return chosen, why
    chosen = offered[0]
    return chosen, f"the oldest Python it supports: none of {', '.join(offered)} is {DEFAULT_PYTHON_MIN_AGE_MONTHS} months old yet"


def _cuda_supports_arch(matrix: Matrix, minor: str, cc: str) -> bool:
    arch = matrix.architecture_of(cc)
    if arch is None:
        return False
    if V(minor) < V(arch.first_cuda):
        return False
    return arch.last_cuda is None or V(minor) <= V(arch.last_cuda)


def _kernel_min_driver(matrix: Matrix, c: _Candidate, archs: list[str], driver: str | None) -> str | None:
    """The driver the build needs for these GPUs (its placement's, raised by PTX JIT and GPU families), or None when it cannot run them.

    A cubin of the GPU's major at or below its minor runs on any driver that runs the build; PTX
    is JIT-compiled by the driver, which can only compile PTX of a CUDA it runs natively (not
    under minor-version compatibility), so JIT needs the build CUDA's own driver floor. A GPU
    also needs a driver branch that knows it (driver_branches), whatever the CUDA, and both the
    build's and the container's CUDA must know its family (a CUDA 12.1 image predates Blackwell).
    """
    assert c.placement is not None
    need = c.placement.min_driver
    for cc in archs:
        if not (_cuda_supports_arch(matrix, c.release.minor, cc) and _cuda_supports_arch(matrix, c.placement.container.minor, cc)):
            return None
        how = kernel_coverage(cc, c.kernels)
        if how is None:
            return None
        if how.startswith("PTX"):
            floor = c.release.floor
            if floor is None or (driver is not None and V(driver) < V(floor)):
                return None
            need = _higher(need, floor)
        branch = matrix.driver_branch(cc)
        if branch is not None:
            need = _higher(need, branch.branch + ".0")  # the lowest version of that branch
    return need


def _runnable_images(matrix: Matrix, minor: str, driver: str | None, cudnn: bool) -> list[CudaImage]:
    """Images of a CUDA minor (oldest first) whose update's floor the driver meets (all when no driver)."""
    out = []
    release = matrix.cuda_release(minor)
    for image in matrix.images_of(minor):
        if cudnn and image.cudnn is None:
            continue
        floor = release.update(image.version).min_driver  # type: ignore[union-attr]
        if driver is None or V(driver) >= V(floor):
            out.append(image)
    return out


def _image_floor(matrix: Matrix, image: CudaImage) -> str:
    update = matrix.cuda_release(image.minor).update(image.version)  # type: ignore[union-attr]
    assert update is not None and update.min_driver is not None
    return update.min_driver


def _higher(a: str, b: str | None) -> str:
    return a if b is None or V(a) >= V(b) else b


def _place(matrix: Matrix, c: _Candidate, cuda_wish: str | None, driver: str | None, strict: bool) -> _Placement | None:
    """Choose the container CUDA and base image for a GPU build, or None when this driver runs none."""
    build = c.release
    cudnn = c.tf is not None and not c.tf.and_cuda
    if cuda_wish:
        container = matrix.cuda_release(cuda_wish)
        assert container is not None
        images = _runnable_images(matrix, cuda_wish, driver, cudnn)
        if not images:
            return _place_by_minor_compat(matrix, c, cuda_wish, driver, strict, cudnn)
        image = images[-1]
        if V(build.minor) > V(cuda_wish):  # only newer builds of this major exist (see _cuda_rule)
            major = matrix.cuda_major(build.major)
            assert major is not None
            return _Placement(container, image, _higher(_image_floor(matrix, image), major.minor_compat_min_driver), minor_compat=True)
        return _Placement(container, image, _higher(_image_floor(matrix, image), build.floor))
    images = _runnable_images(matrix, build.minor, driver, cudnn)
    if images:
        image = images[-1]
        return _Placement(build, image, _higher(_image_floor(matrix, image), build.floor if driver is None else None))
    if driver is None or strict:
        return None
    major = matrix.cuda_major(build.major)
    if major is None or V(driver) < V(major.minor_compat_min_driver):
        return None
    # Minor-version compatibility: an image of the same major the driver runs natively, older than the build.
    older = sorted(
        (r for r in matrix.cuda_releases if r.major == build.major and V(r.minor) < V(build.minor)),
        key=lambda r: V(r.minor), reverse=True,
    )
    for release in older:
        images = _runnable_images(matrix, release.minor, driver, cudnn)
        if images:
            image = images[-1]
            return _Placement(release, image, _higher(_image_floor(matrix, image), major.minor_compat_min_driver), minor_compat=True)
    return _place_by_minor_compat(matrix, c, None, driver, strict, cudnn)


def _place_by_minor_compat(matrix: Matrix, c: _Candidate, cuda_wish: str | None, driver: str | None, strict: bool, cudnn: bool) -> _Placement | None:
    """The image itself under minor-version compatibility, when no image of the build's major runs natively.

    CUDA 11 hosts: a driver from 450.80.02 runs CUDA 11.x, but the only CUDA 11 image in the data
    (11.8.0) needs 520.61.05 natively. When the major has an image the driver runs natively, that
    one is used instead (never a newer image by compatibility over an older one natively).
    """
    build = c.release
    major = matrix.cuda_major(build.major)
    if driver is None or strict or major is None or V(driver) < V(major.minor_compat_min_driver):
        return None
    same_major = [r for r in matrix.cuda_releases if r.major == build.major]
    if any(_runnable_images(matrix, r.minor, driver, False) for r in same_major):
        return None
    if cuda_wish:
        wanted = [matrix.cuda_release(cuda_wish)]
    else:  # the build's own CUDA, else the newest older one of its major that has an image
        wanted = sorted((r for r in same_major if V(r.minor) <= V(build.minor)), key=lambda r: V(r.minor), reverse=True)
    for release in wanted:
        assert release is not None
        images = [i for i in matrix.images_of(release.minor) if not cudnn or i.cudnn]
        if images:
            return _Placement(release, images[-1], major.minor_compat_min_driver, minor_compat=True, image_minor_compat=True)
    return None


# ---------------------------------------------------------------- wheelhouse

@dataclass(frozen=True)
class WheelBuild:
    """A framework wheel a wheelhouse holds: which release, build and Python it serves."""

    filename: str
    framework: str
    version: str  # public version, e.g. 2.13.0
    local: str | None  # cpu, cu126, ... (torch); None for a PyPI wheel
    python: str | None  # 3.11 for cp311, None for py3/abi3
    platform: str  # first platform tag
    linux_x86_64: bool

    def describe(self) -> str:
        local = f"+{self.local}" if self.local else ""
        py = f"cp{self.python.replace('.', '')}" if self.python else "any Python"
        return f"{self.framework} {self.version}{local} ({py}, {self.platform})"


def framework_wheels(names: Iterable[str], framework: str) -> list[WheelBuild]:
    """The wheels of `framework` among file names (tensorflow also as tensorflow_cpu), read with packaging."""
    wanted = {"torch": ("torch",), "tensorflow": ("tensorflow", "tensorflow-cpu")}[framework]
    out = []
    for filename in names:
        if not filename.endswith(".whl"):
            continue
        try:
            name, version, _build, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if name not in wanted:
            continue
        tag: Tag = sorted(tags, key=str)[0]
        python = None
        if re.fullmatch(r"cp3\d+", tag.interpreter) and tag.abi != "abi3":
            python = f"3.{tag.interpreter[3:]}"
        platforms = sorted({t.platform for t in tags})
        label = "tensorflow-cpu" if name == "tensorflow-cpu" else framework
        out.append(
            WheelBuild(filename, label, version.public, version.local, python, platforms[0], any(_LINUX_X86.match(p) for p in platforms))
        )
    return out


def _wheel_serves(w: WheelBuild, c: _Candidate, framework: str) -> bool:
    if not w.linux_x86_64 or w.version != c.framework_version:
        return False
    if w.python is not None and w.python != c.python:
        return False
    if framework == "torch":
        assert c.variant is not None
        return w.local == c.variant.name
    return (w.framework == "tensorflow-cpu") == (c.cuda is None)


def _pypi_torch_candidates(matrix: Matrix, c: _Candidate, wheels: list[WheelBuild]) -> list[_Candidate]:
    """A PyPI torch wheel (no +local) is the build of its release's pypi_default_cuda."""
    out = []
    for w in wheels:
        if w.local is None and w.linux_x86_64 and w.version == c.framework_version and (w.python in (None, c.python)):
            release = next(t for t in matrix.torch_releases if c.framework_version in t.patches)
            if c.variant is not None and release.pypi_default_cuda == c.variant.cuda:
                out.append(replace(c, from_pypi=True))
    return out


# ---------------------------------------------------------------- candidates

def _torch_candidates(matrix: Matrix, pin: str | None) -> list[_Candidate]:
    out = []
    for release, patch in _pick_patch(pin, "PyTorch", list(matrix.torch_releases), "--torch"):
        assert isinstance(release, TorchRelease)
        for variant in release.variants:
            cuda = matrix.cuda_release(variant.cuda) if variant.cuda else None
            for py in release.python:
                out.append(_Candidate(patch, py, cuda, variant=variant))
    return out


def _tf_candidates(matrix: Matrix, pin: str | None) -> list[_Candidate]:
    out = []
    for release, patch in _pick_patch(pin, "TensorFlow", list(matrix.tensorflow_releases), "--tensorflow"):
        assert isinstance(release, TensorflowRelease)
        for py in release.python:
            out.append(_Candidate(patch, py, matrix.cuda_release(release.cuda), tf=release))
            out.append(_Candidate(patch, py, None, tf=release))  # the CPU build
    return out


def _candidates(matrix: Matrix, framework: str, pin: str | None) -> list[_Candidate]:
    return _torch_candidates(matrix, pin) if framework == "torch" else _tf_candidates(matrix, pin)


def _fmt(versions: Iterable[str]) -> str:
    return ", ".join(sorted(set(versions), key=V)) or "none"


def _build_name(c: _Candidate) -> str:
    if c.variant is not None:
        return c.variant.name
    return f"CUDA {c.release.minor}" if c.cuda else "CPU"


def _describe(stack: Stack) -> str:
    name = _NAMES[stack.framework]
    build = stack.wheel_variant or ("CPU" if stack.is_cpu else f"CUDA {stack.framework_cuda}")
    where = "" if stack.is_cpu else f" on nvidia/cuda {stack.cuda_version}, driver >= {stack.min_driver}"
    return f"{name} {stack.framework_version} {build}, Python {stack.python}{where}"


def _suggest(request: Request, matrix: Matrix, **changes: object) -> Stack | None:
    """The stack that the request gives with some wishes changed, or None (for concrete fixes)."""
    try:
        return resolve_stack(replace(request, explain=False, **changes), matrix)  # type: ignore[arg-type]
    except GpuenvError:
        return None


_OPTION_NAMES = {"gpu_archs": "--gpu-arch", "strict_driver": "--strict-driver"}


def _drop_pin(request: Request) -> dict[str, object]:
    """Changes that drop the --torch/--tensorflow pin and keep its framework (else it would fall back to PyTorch)."""
    pinned = "torch" if request.torch else "tensorflow" if request.tensorflow else None
    if pinned is None:
        return {}
    return {pinned: None} if request.framework or pinned == "torch" else {"framework": pinned, pinned: None}


def _options_text(changes: dict[str, object]) -> str:
    """'use --cuda 12.2', 'drop --cuda', 'use --framework tensorflow and drop --tensorflow': exactly the options a fix changes."""
    parts = []
    dropped = lambda kv: kv[1] is None or kv[1] is False or kv[1] == ()  # noqa: E731
    for key, value in sorted(changes.items(), key=dropped):  # what to use first, then what to drop
        flag = _OPTION_NAMES.get(key, "--" + key.replace("_", "-"))
        if value is None or value is False or value == ():
            parts.append(f"drop {flag}")
        elif value is True:
            parts.append(flag)
        else:
            parts.append(f"{flag} {','.join(value) if isinstance(value, tuple) else value}")
    text = " and ".join(parts)
    return text if text.startswith("drop ") else "use " + text


def _fix(request: Request, matrix: Matrix, **changes: object) -> tuple[str, Stack] | None:
    """A fix as the exact options to change and what resolving exactly those gives, or None when they fail too.

    Only for the user's own request: the re-resolutions behind a fix (explain=False) suggest nothing
    themselves, so fixes never recurse.
    """
    if not request.explain:
        return None
    stack = _suggest(request, matrix, **changes)
    if stack is None:
        return None
    return f"{_options_text(changes)} (gives {_describe(stack)})", stack


def _first_fix(request: Request, matrix: Matrix, tries: Iterable[dict[str, object]]) -> tuple[str, Stack] | None:
    for changes in tries:
        found = _fix(request, matrix, **changes)
        if found is not None:
            return found
    return None


def _join_fixes(fixes: Iterable[tuple[str, Stack] | None], fallback: str) -> str:
    """Up to two distinct re-resolved fixes joined with 'or' (a second one only when it gives another stack)."""
    out: list[tuple[str, Stack]] = []
    for found in fixes:
        if found is not None and all(found[1] != s for _, s in out):
            out.append(found)
    return ", or ".join(text for text, _ in out[:2]) if out else fallback


def _cuda_tries(minors: Iterable[str]) -> list[dict[str, object]]:
    return [{"cuda": m} for m in minors]


def command_for(request: Request) -> str:
    """The `invoke resolve` command line that asks exactly for this request (for reasons that name a command)."""
    parts = ["invoke resolve"]
    if request.driver:
        parts.append(f"--driver {request.driver}")
    for key in ("cuda", "framework", "torch", "tensorflow", "python"):
        value = getattr(request, key)
        if value:
            parts.append(f"--{key} {value}")
    if request.gpu_archs:
        parts.append(f"--gpu-arch {','.join(request.gpu_archs)}")
    if request.strict_driver:
        parts.append("--strict-driver")
    if request.wheelhouse_dir:
        parts.append(f"--wheelhouse {request.wheelhouse_dir}")
    return " ".join(parts)


# ---------------------------------------------------------------- main entry

def _refuse_integrated(matrix: Matrix, archs: list[str]) -> None:
    """Jetson modules are not servers: say what does target them."""
    for cc in archs:
        gpu = matrix.integrated_gpu(cc)
        if gpu is not None:
            raise NoCompatibleStack(
                f"compute capability {cc} is {gpu.name}, an integrated Jetson GPU: gpuenv builds x86_64 nvidia/cuda images "
                f"with download.pytorch.org/PyPI wheels, which do not target Jetson",
                fix=f"use {matrix.jetson_use} ({matrix.jetson_use_source[0]})",
            )


def _check_driver_branches(matrix: Matrix, archs: list[str], driver: str | None, source: str) -> None:
    """A driver older than the first branch that knows a GPU runs nothing on it, under every rule."""
    if driver is None:
        return
    for cc in archs:
        branch = matrix.driver_branch(cc)
        if branch is not None and int(driver.split(".")[0]) < int(branch.branch):
            raise NoCompatibleStack(
                f"driver {driver} ({source}) predates {branch.name} (compute capability {cc}): the first driver branch that runs it is "
                f"R{branch.branch}, and minor-version compatibility cannot make a driver run a GPU it predates",
                fix=f"install a driver of branch R{branch.branch} or newer",
            )


def resolve_stack(request: Request, matrix: Matrix | None = None) -> Stack:
    """Choose the newest stack that satisfies the request; NoCompatibleStack says why none does."""
    matrix = matrix or load_matrix()
    cuda_wish = parse_cuda(request.cuda, matrix, request.blame("cuda"))
    driver = parse_driver(request.driver, request.driver_source)
    python = parse_python(request.python, request.blame("python"))
    archs = [parse_gpu_arch(a, matrix, request.blame("gpu_archs")) for a in split_arch_list(request.gpu_archs)]
    framework = parse_framework(request.framework)
    for pin, name, releases, key in ((request.torch, "PyTorch", matrix.torch_releases, "torch"),
                                     (request.tensorflow, "TensorFlow", matrix.tensorflow_releases, "tensorflow")):
        if pin:  # an unknown release, blamed on where it came from (candidates are listed later)
            _pick_patch(pin, name, list(releases), request.blame(key))
    if request.torch and request.tensorflow:
        raise BadInput(f"{request.blame('torch')} and {request.blame('tensorflow')} were both given",
                       fix="a stack has one framework: build one image per framework")
    implied = "torch" if request.torch else "tensorflow" if request.tensorflow else None
    if framework and implied and framework != implied:
        raise BadInput(f"--{implied} was given with --framework {framework}", fix=f"drop one, or use --framework {implied}")
    framework = framework or implied or "torch"
    name = _NAMES[framework]
    pin = request.torch if framework == "torch" else request.tensorflow
    what = f"{name} {pin}" if pin else name
    strict = request.strict_driver

    cands = _candidates(matrix, framework, pin)
    notes: list[str] = []
    if cuda_wish != CPU:
        _refuse_integrated(matrix, archs)
        _check_driver_branches(matrix, archs, driver, request.driver_source)

    # 0. the wheelhouse: only what it holds, when it holds the framework at all
    if request.wheelhouse is not None:
        cands, note = _wheelhouse_filter(matrix, request, framework, cands, what, python)
        notes.append(note)

    # 1. CPU or GPU, and the CUDA rule's major
    if cuda_wish == CPU:
        kept = [c for c in cands if c.cuda is None]
        if not kept:
            fix = _join_fixes([_fix(request, matrix, **_drop_pin(request)) if pin else None, _fix(request, matrix, cuda=None)], "drop the version pin or use a CUDA version")
            raise NoCompatibleStack(f"{what} has no CPU build in the data", fix=fix)
        cands = kept
    else:
        gpu = [c for c in cands if c.cuda is not None]
        if not gpu:
            series = sorted({c.framework_version for c in _candidates(matrix, framework, None) if c.cuda}, key=V)
            tries: list[dict[str, object]] = [{"cuda": CPU}]
            if series and request.wheelhouse is None:
                tries.append({framework: series[-1]})
            fix = _join_fixes((_fix(request, matrix, **t) for t in tries), "use --cuda cpu")
            if request.wheelhouse is not None:
                fix += f", or add the wheel of a {name} CUDA build to {request.wheelhouse_dir or 'the wheelhouse'}"
            raise NoCompatibleStack(f"{what} has only a CPU build{' in the wheelhouse' if request.wheelhouse is not None else ' in the data'}", fix=fix)
        cands = gpu
        if cuda_wish:
            cands = _cuda_rule(matrix, request, framework, cands, cuda_wish, what)

    # 2. the Python pin
    if python:
        kept = [c for c in cands if c.python == python]
        if not kept:
            have = _fmt(c.python for c in cands)
            scope = f" for CUDA {cuda_wish}" if cuda_wish and cuda_wish != CPU else ""
            tries = [{"python": p} for p in sorted({c.python for c in cands}, key=V, reverse=True)]
            fix = _join_fixes([_first_fix(request, matrix, tries), _fix(request, matrix, **_drop_pin(request)) if pin else None],
                              f"use --python with one of {have}, or pin another release")
            raise NoCompatibleStack(f"Python {python} is not supported by {what}{scope} (supported: {have})", fix=fix)
        cands = kept

    # 3. the driver: a base image it runs, and the build under the CUDA or minor-version rule
    if cuda_wish != CPU:
        # a placement depends only on the build's CUDA and whether it needs a cuDNN image: compute each once
        memo: dict[tuple[str, bool], _Placement | None] = {}
        placed = []
        for c in cands:
            key = (c.release.minor, c.tf is not None and not c.tf.and_cuda)
            if key not in memo:
                memo[key] = _place(matrix, c, cuda_wish, driver, strict)
            if memo[key] is not None:
                placed.append(replace(c, placement=memo[key]))
        if not placed:
            if driver is None:
                minors = _fmt(c.release.minor for c in cands)
                fix = _join_fixes([_first_fix(request, matrix, _cuda_tries(_image_minors(matrix))), _fix(request, matrix, cuda=None)],
                                  "use --cuda with a release `invoke matrix` lists with images")
                raise NoCompatibleStack(f"no nvidia/cuda image with a known driver floor is in the data for CUDA {cuda_wish or minors}", fix=fix)
            message, fix = _driver_failure(matrix, request, cands, driver, cuda_wish, strict)
            raise NoCompatibleStack(message, fix=fix)
        cands = placed

    # 4. the GPUs: kernels for every compute capability (SASS, or PTX the driver can JIT), and the driver branch each needs
    if cuda_wish != CPU:
        kept = []
        plans: dict[tuple[int, int], _Placement | None] = {}  # per placement and build: the same for every Python
        for c in cands:
            key = (id(c.placement), id(c.kernels))
            if key not in plans:
                need = _kernel_min_driver(matrix, c, archs, driver)
                plans[key] = None if need is None else replace(c.placement, min_driver=need)  # type: ignore[arg-type]
            if plans[key] is not None:
                kept.append(replace(c, placement=plans[key]))
        if not kept:
            message, fix = _arch_failure(matrix, request, cands, archs, cuda_wish, what)
            raise NoCompatibleStack(message, fix=fix)
        cands = kept

    # 5. --cuda X.Y: the build CUDA newest at or below X.Y within X's major, else the lowest above it
    if cuda_wish and cuda_wish != CPU:
        minors = {c.release.minor for c in cands}
        below = [m for m in minors if V(m) <= V(cuda_wish)]
        target = max(below, key=V) if below else min(minors, key=V)
        cands = [c for c in cands if c.release.minor == target]

    best = max(cands, key=_Candidate.sort_key)
    same_build = [c for c in cands if c.sort_key() == best.sort_key() and _build_name(c) == _build_name(best) and c.from_pypi == best.from_pypi]
    if python:
        chosen, py_reason = best, "requested with --python"
    else:
        today = request.today or date.today()
        py, why = default_python(matrix, (c.python for c in same_build), today)
        chosen = next(c for c in same_build if c.python == py)
        py_reason = why
    stack = _to_stack(matrix, chosen, framework, request, driver, cuda_wish, archs, py_reason, notes)
    if request.explain and cuda_wish and cuda_wish != CPU:
        stack = replace(stack, reasons=stack.reasons + tuple(_cuda_alternatives(matrix, request, stack, chosen, name)))
    return stack


def _image_minors(matrix: Matrix) -> list[str]:
    """CUDA minors that have an image with a known driver floor, newest first."""
    return sorted((c.minor for c in matrix.cuda_releases if matrix.images_of(c.minor)), key=V, reverse=True)


def _cuda_alternatives(matrix: Matrix, request: Request, stack: Stack, chosen: _Candidate, name: str) -> list[str]:
    """Under --cuda: what a newer CUDA of the major, and the driver rule (no --cuda), give instead, each re-resolved."""
    out = []
    major = chosen.release.major
    best: tuple[str, Stack] | None = None
    for minor in sorted((c.minor for c in matrix.cuda_releases if c.major == major and V(c.minor) > V(stack.cuda)), key=V):
        found = _fix(request, matrix, cuda=minor)
        if found and V(found[1].framework_version) > V((best[1] if best else stack).framework_version):
            best = found  # the lowest CUDA that gives the newest release
    if best is not None:
        out.append(f"newer {name} releases need a newer CUDA {major}.x build: {best[0]}")
    alt = _suggest(request, matrix, cuda=None)
    if alt is not None and not alt.is_cpu and V(alt.framework_version) > V(stack.framework_version):
        on = f"on driver {request.driver}" if request.driver else "for a driver that runs it"
        out.append(f"without --cuda the driver rule gives a newer release {on}: `{command_for(replace(request, cuda=None))}` gives {_describe(alt)}")
    return out


def _cuda_rule(matrix: Matrix, request: Request, framework: str, cands: list[_Candidate], wish: str, what: str) -> list[_Candidate]:
    """Builds of X.Y's major (those above X.Y run on its image by minor-version compatibility; not with --strict-driver)."""
    major = int(wish.split(".")[0])
    same_major = [c for c in cands if c.release.major == major]
    if request.strict_driver:
        kept = [c for c in same_major if V(c.release.minor) <= V(wish)]
        if kept:
            return kept
    elif same_major:
        return same_major
    minors = sorted({c.release.minor for c in same_major}, key=V)
    have = _fmt(c.release.minor for c in cands)
    if minors:
        message = f"{what} has no build for CUDA {wish} or an older CUDA {major}.x (its CUDA {major}.x builds: {', '.join(minors)})"
        tries = _cuda_tries(minors) + [{"strict_driver": False}]
    else:
        message = f"{what} has no CUDA {major}.x build (it has CUDA {have}), and gpuenv never crosses a CUDA major"
        tries = _cuda_tries(sorted({c.release.minor for c in cands}, key=V, reverse=True))
    fixes = [_first_fix(request, matrix, tries)]
    if not minors:
        fixes.append(_fix(request, matrix, cuda=None))
    if request.torch or request.tensorflow:
        others = sorted({c.framework_version for c in _candidates(matrix, framework, None) if c.cuda and c.release.major == major and V(c.release.minor) <= V(wish)}, key=V)
        if others:
            fixes.append(_fix(request, matrix, **{framework: others[-1]}))
    raise NoCompatibleStack(message, fix=_join_fixes(fixes, f"use --cuda with one of {have}"))


def _wheelhouse_filter(matrix: Matrix, request: Request, framework: str, cands: list[_Candidate], what: str, python: str | None) -> tuple[list[_Candidate], str]:
    folder = request.wheelhouse_dir or "the wheelhouse"
    wheels = framework_wheels(request.wheelhouse or (), framework)
    name = _NAMES[framework]
    if not wheels:
        return cands, f"wheelhouse {folder} holds no {name} wheel: the framework comes from its index"
    if python:
        cands = [c for c in cands if c.python == python] or cands
    kept = [c for c in cands if any(_wheel_serves(w, c, framework) for w in wheels)]
    if framework == "torch":
        kept += [p for c in cands for p in _pypi_torch_candidates(matrix, c, wheels)]
    if not kept:
        holds = "; ".join(w.describe() for w in wheels)
        wanted = _fmt(c.python for c in cands)
        versions = _fmt(c.framework_version for c in cands)
        raise NoCompatibleStack(
            f"wheelhouse {folder} holds {holds}, but {what} needs one of {versions} for Python {wanted} on Linux x86_64",
            fix="add the wheel, or pin the release and Python the folder holds (--torch/--tensorflow, --python)",
        )
    held = ", ".join(sorted({w.describe() for w in wheels}))
    return kept, f"wheelhouse {folder}: only the {name} builds it holds ({held}) are considered"




def _arch_failure(matrix: Matrix, request: Request, cands: list[_Candidate], archs: list[str], cuda_wish: str | None, what: str) -> tuple[str, str]:
    """Why no build has kernels for these GPUs (that this driver can run), and re-resolved values that work."""
    scope = f" for CUDA {cuda_wish}" if cuda_wish else ""
    message = f"no {what} build{scope} has kernels for compute capability {', '.join(archs)}"
    jit = f" that driver {request.driver} can run (PTX is JIT-compiled only by a driver that runs the build's CUDA natively)" if request.driver else ""
    dropped = []
    for cc in archs:
        arch = matrix.architecture_of(cc)
        if arch and arch.last_cuda and cuda_wish and V(cuda_wish) > V(arch.last_cuda):
            dropped.append((cc, arch))
    early = [(cc, matrix.architecture_of(cc)) for cc in archs]
    early = [(cc, a) for cc, a in early if a and cuda_wish and V(cuda_wish) < V(a.first_cuda)]
    newest = max((c.release.minor for c in cands if c.cuda is not None), key=V, default=None)
    predates = [(cc, a) for cc, a in ((cc, matrix.architecture_of(cc)) for cc in archs) if newest and a and V(newest) < V(a.first_cuda)]
    if early:
        cc, arch = early[0]
        message += f" (CUDA {cuda_wish} predates {arch.name}: its first CUDA is {arch.first_cuda})"  # type: ignore[union-attr]
    elif predates:
        cc, arch = predates[0]
        message += f" (its newest build is for CUDA {newest}, which predates {arch.name}: its first CUDA is {arch.first_cuda})"  # type: ignore[union-attr]
    else:
        message += jit
    if dropped:
        cc, arch = dropped[0]
        major = cuda_wish.split(".")[0]  # type: ignore[union-attr]
        message = f"CUDA {major} dropped {arch.name} (compute capability {cc}): CUDA {arch.last_cuda} is the last CUDA for it"
        usable = [m for m in _image_minors(matrix) if V(m) <= V(arch.last_cuda)]
        return message, _join_fixes([_first_fix(request, matrix, _cuda_tries(usable))], "use --cuda cpu")
    tries: list[dict[str, object]] = []
    if cuda_wish:
        wish_major = int(cuda_wish.split(".")[0])
        # the nearest newer CUDA of the same major first (the first to know the GPU), then the others, newest first
        above = sorted((m for m in _image_minors(matrix) if int(m.split(".")[0]) == wish_major and V(m) > V(cuda_wish)), key=V)
        rest = [m for m in _image_minors(matrix) if m not in above and m != cuda_wish]
        tries = _cuda_tries(above + rest)
    fixes = [_first_fix(request, matrix, tries)]
    if cuda_wish:
        fixes.append(_fix(request, matrix, cuda=None))
    if _drop_pin(request):
        fixes.append(_fix(request, matrix, **_drop_pin(request)))
        if cuda_wish:
            fixes.append(_fix(request, matrix, cuda=None, **_drop_pin(request)))
    fallback = "use --cuda cpu, or a GPU the data knows builds for"
    if any(c.placement and c.placement.minor_compat for c in cands):
        fallback = "upgrade the driver (newer builds need a newer driver to run natively), or use --cuda cpu"
    if not any(fixes):
        fixes.append(_fix(request, matrix, cuda=CPU))
    return message, _join_fixes(fixes, fallback)


def _driver_failure(matrix: Matrix, request: Request, cands: list[_Candidate], driver: str, cuda_wish: str | None, strict: bool) -> tuple[str, str]:
    """The message when the driver is too old: which CUDA it needed, and the nearest re-resolved fixes."""
    def image_floor(minor: str) -> str | None:
        """The lowest driver that runs an image of this CUDA in the data (an update without an image does not count)."""
        floors = [_image_floor(matrix, i) for i in matrix.images_of(minor)]
        return min(floors, key=V) if floors else None

    if cuda_wish:
        needed, what = image_floor(cuda_wish), f"CUDA {cuda_wish}"
    else:
        lowest = min(cands, key=lambda c: V(image_floor(c.release.minor) or "9999"))
        needed, what = image_floor(lowest.release.minor), f"CUDA {lowest.release.minor}"
    if needed is None:
        fix = _join_fixes([_first_fix(request, matrix, _cuda_tries(_image_minors(matrix))), _fix(request, matrix, cuda=None)],
                          "use --cuda with a release `invoke matrix` lists with a driver floor")
        return f"no nvidia/cuda image with a known driver floor is in the data for {what} (see `invoke matrix`)", fix
    message = f"driver {driver} is older than {needed} needed by {what}"
    fixes: list[tuple[str, Stack] | None] = []
    if cuda_wish:
        # the newest CUDA of the same major whose image this driver runs natively, then of any major; then no --cuda
        major_no = int(cuda_wish.split(".")[0])
        runnable = [m for m in _image_minors(matrix) if m != cuda_wish and _runnable_images(matrix, m, driver, False)]
        same = [m for m in runnable if int(m.split(".")[0]) == major_no and V(m) < V(cuda_wish)]
        fixes.append(_first_fix(request, matrix, _cuda_tries(same + [m for m in runnable if m not in same])))
        fixes.append(_fix(request, matrix, cuda=None))
    elif strict:
        fixes.append(_fix(request, matrix, strict_driver=False))
    if _drop_pin(request):
        fixes.append(_fix(request, matrix, **_drop_pin(request)))
    fixes.append(_fix(request, matrix, cuda=CPU))
    options = [f"upgrade the driver to >= {needed}", _join_fixes(fixes, "use --cuda cpu")]
    major_no = int((cuda_wish or cands[0].release.minor).split(".")[0])
    major = matrix.cuda_major(major_no)
    if major and V(driver) >= V(major.minor_compat_min_driver):
        message += f" (CUDA {major_no}.x wheels run on it by minor-version compatibility, from {major.minor_compat_min_driver}, but the CUDA {cuda_wish or cands[0].release.minor} image needs its own driver floor)"
    branch = driver.split(".")[0]
    images = matrix.images_of(cuda_wish) if cuda_wish else []
    if images and images[-1].require_cuda and re.search(rf"driver>={branch},driver<{int(branch) + 1}\b", images[-1].require_cuda):
        message += f"; on a data-center GPU, CUDA forward compatibility (the cuda-compat package) supports the {branch} branch for this image"
    return message, " or ".join(options)


def _to_stack(matrix: Matrix, c: _Candidate, framework: str, request: Request, driver, cuda_wish, archs, py_reason: str, notes: list[str]) -> Stack:
    reasons: list[str] = []
    name = _NAMES[framework]
    pinned = request.torch if framework == "torch" else request.tensorflow
    reasons.append(f"{name} {c.framework_version}: " + (f"matches --{framework} {pinned}" if pinned else "the newest release that fits every other constraint"))
    reasons += notes
    place = c.placement
    require = place.image.require_cuda if place else None
    if c.cuda is None:
        reasons.append("CPU only: requested with --cuda cpu")
    else:
        assert place is not None
        image_cuda = place.container.minor
        if cuda_wish and not place.minor_compat:
            if c.release.minor == cuda_wish:
                reasons.append(f"CUDA {cuda_wish} (image {place.image.version}): requested with --cuda; {name} has a build for exactly it ({_build_name(c)})")
            else:
                reasons.append(
                    f"CUDA {cuda_wish} (image {place.image.version}): requested with --cuda, the container's CUDA; {name} {c.framework_version} has no CUDA {cuda_wish} build, "
                    f"so the newest CUDA {c.release.major}.x build at most {cuda_wish} ({_build_name(c)}, CUDA {c.release.minor}) runs on it: the wheels carry their own "
                    f"CUDA libraries and an older runtime runs on a newer driver (Cog's rule); never across a CUDA major"
                )
        elif place.image_minor_compat:
            major = matrix.cuda_major(c.release.major)
            assert major is not None
            own = _image_floor(matrix, place.image)
            require = f"cuda>={c.release.major}.0,driver>={place.min_driver}"
            reasons.append(
                f"CUDA {image_cuda} (image {place.image.version}): no CUDA {c.release.major}.x image in the data runs natively on driver {driver} "
                f"({place.image.version} needs {own}), so the image and the {_build_name(c)} build run by CUDA minor-version compatibility "
                f"(CUDA {c.release.major}.x from {major.minor_compat_min_driver}); its limits: {major.limits}; "
                f"the image's driver gate and NVIDIA_REQUIRE_CUDA ({require}) say the same"
            )
        elif place.minor_compat:
            major = matrix.cuda_major(c.release.major)
            assert major is not None
            picked = (f"requested with --cuda, and no {name} build has a CUDA {c.release.major}.x at most {cuda_wish}, so the lowest above it" if cuda_wish
                      else f"the newest CUDA {c.release.major}.x image driver {driver} runs natively")
            reasons.append(
                f"CUDA {image_cuda} (image {place.image.version}): {picked}; "
                f"the {_build_name(c)} build (CUDA {c.release.minor}) runs on it by CUDA minor-version compatibility (CUDA {c.release.major}.x wheels run on any driver from "
                f"{major.minor_compat_min_driver}); its limits: {major.limits}; use --strict-driver to require a build the driver runs natively"
            )
        else:
            how = f"the CUDA of the newest {name} build" + (" this driver runs natively" if driver else "")
            reasons.append(f"CUDA {image_cuda} (image {place.image.version}): {how}")
        if driver:
            reasons.append(f"driver {driver} ({request.driver_source}) >= {place.min_driver}, the highest of the image's, the build's, its PTX JIT's and the GPUs' minimum")
        else:
            reasons.append(f"driver not checked: none given and none detected on this host; the server needs >= {place.min_driver} (the highest of the image's, the build's, its PTX JIT's and the GPUs' minimum)")
        if c.tf is not None and not c.tf.and_cuda:
            reasons.append(f"cudnn runtime flavour of nvidia/cuda: TensorFlow {c.tf.series} has no and-cuda extra, so cuDNN {c.tf.cudnn} comes from the image")
        else:
            reasons.append("base flavour of nvidia/cuda: the framework wheels carry their own CUDA libraries (cuBLAS, cuDNN, NCCL), so runtime/devel layers would only add size")
    if c.cuda is not None:
        reasons += _gpu_reasons(matrix, c, archs, name)
    reasons.append(f"Python {c.python}: {py_reason}")
    if c.variant is not None and not c.variant.confirmed:
        reasons.append(f"{c.variant.name} of {name} {c.framework_version} is marked unconfirmed in the data (see envs/compat.yaml)")

    if framework == "torch":
        variant = c.variant
        assert variant is not None
        wheel_variant = variant.name
        if c.from_pypi:
            requirement, index_url = f"torch=={c.framework_version}", None
            reasons.append(f"the wheelhouse holds the PyPI wheel of torch {c.framework_version}, a {variant.name} build (its Requires-Dist pins CUDA {variant.cuda})")
        else:
            requirement, index_url = f"torch=={c.framework_version}+{variant.name}", TORCH_INDEX.format(variant=variant.name)
        gpu_archs = variant.archs
        cudnn = None
    else:
        assert c.tf is not None
        if c.cuda is None:
            requirement = f"tensorflow-cpu=={c.framework_version}"
        elif c.tf.and_cuda:
            requirement = f"tensorflow[and-cuda]=={c.framework_version}"
        else:
            requirement = f"tensorflow=={c.framework_version}"
        index_url = None
        wheel_variant = None
        gpu_archs = ()
        cudnn = c.tf.cudnn if c.cuda else None
        if c.cuda and c.tf.and_cuda:
            reasons.append(f"cuDNN {c.tf.cudnn}: TensorFlow {c.tf.series}'s tested build configuration (installed by tensorflow[and-cuda])")
    return Stack(
        cuda=place.container.minor if place else CPU,
        cuda_version=place.image.version if place else None,
        min_driver=place.min_driver if place else None,
        base_image=_image_tag(place.image, c) if place else matrix.cpu_base_image,
        python=c.python,
        framework=framework,
        framework_version=c.framework_version,
        wheel_variant=wheel_variant,
        index_url=index_url,
        pip_requirement=requirement,
        cudnn=cudnn,
        require_cuda=require,
        gpu_archs=tuple(gpu_archs),
        reasons=tuple(reasons),
        framework_cuda=c.release.minor if c.cuda else None,
    )


def _image_tag(image: CudaImage, c: _Candidate) -> str:
    if c.tf is not None and not c.tf.and_cuda and image.cudnn:
        ubuntu = max(image.cudnn.ubuntu or image.ubuntu, key=V)
        return f"nvidia/cuda:{image.version}-{image.cudnn.tag}-runtime-ubuntu{ubuntu}"
    ubuntu = max(image.ubuntu, key=V)
    return f"nvidia/cuda:{image.version}-base-ubuntu{ubuntu}"


def _gpu_reasons(matrix: Matrix, c: _Candidate, archs: list[str], name: str) -> list[str]:
    """One line per GPU: the SASS it runs, or that it runs only by JIT (and what that costs); never SASS that is not there."""
    out = []
    build = f"{name} {c.framework_version} {_build_name(c)}"
    for cc in archs:
        how = kernel_coverage(cc, c.kernels)
        assert how is not None
        if how.startswith("PTX"):
            ptx = how.rsplit(" ", 1)[1]
            line = (f"GPU compute capability {cc}: {build} has no SASS for it and runs only by JIT-compiling its {ptx} PTX, which needs a driver "
                    f"that runs CUDA {c.release.minor} natively (>= {c.release.floor}); the first start compiles kernels for minutes "
                    f"(then cached in ~/.nv/ComputeCache; raise CUDA_CACHE_MAXSIZE so the cache holds them)")
        else:
            line = f"GPU compute capability {cc}: {build} has SASS for it ({how})"
        branch = matrix.driver_branch(cc)
        if branch is not None and c.placement is not None and int(branch.branch) >= int(c.placement.min_driver.split(".")[0]):
            line += f"; {branch.name} needs a driver of branch R{branch.branch} or newer"
        out.append(line)
    return out
