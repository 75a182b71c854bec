"""Pick a stack that exists and works: the compatibility engine's decision logic.

Pure: it reads the Matrix and the Request and nothing else (the host is probed by the caller),
so every rule is tested table-driven. It prefers the newest framework release, then the newest
CUDA, then the newest Python that fit every constraint, and when nothing fits it names the
constraint that emptied the candidates and the nearest fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from gpuenv.compat import CudaImage, CudaRelease, Matrix, TensorflowRelease, TorchRelease, TorchVariant, load_matrix, version_key as V
from gpuenv.errors import BadInput, NoCompatibleStack
from gpuenv.stack import CPU, FRAMEWORKS, Stack

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"
_FRAMEWORK_ALIASES = {"torch": "torch", "pytorch": "torch", "tensorflow": "tensorflow", "tf": "tensorflow"}


@dataclass(frozen=True)
class Request:
    """What the user wants; every field optional. Values are raw strings as typed on the command line."""

    driver: str | None = None
    cuda: str | None = None
    framework: str | None = None
    torch: str | None = None
    tensorflow: str | None = None
    python: str | None = None
    gpu_archs: tuple[str, ...] = ()
    driver_source: str = "--driver"


@dataclass(frozen=True)
class _Candidate:
    framework_version: str
    python: str
    cuda: CudaRelease | None
    image: CudaImage | None
    variant: TorchVariant | None = None
    tf: TensorflowRelease | None = None

    @property
    def release(self) -> CudaRelease:
        """The CUDA release of a GPU candidate (only asked of candidates filtered to GPU builds)."""
        assert self.cuda is not None, "a CPU candidate has no CUDA release"
        return self.cuda

    def sort_key(self) -> tuple:
        return (V(self.framework_version), V(self.cuda.minor) if self.cuda else V("0"), V(self.python))


# ---------------------------------------------------------------- input parsing

def parse_cuda(value: str | None, matrix: Matrix) -> str | None:
    """'12.1' / '12.1.1' / 'cpu' -> '12.1' / 'cpu'; anything else is a BadInput naming the fix."""
    if value is None or value == "":
        return None
    text = str(value).strip().lower()
    if text in (CPU, "none"):
        return CPU
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", text)
    known = ", ".join(c.minor for c in sorted(matrix.cuda_releases, key=lambda c: V(c.minor)))
    if not match:
        raise BadInput(f"--cuda {value!r} is not a CUDA version", fix=f"use X.Y such as 12.1 (known: {known}) or 'cpu'")
    minor = f"{int(match[1])}.{int(match[2])}"
    if matrix.cuda_release(minor) is None:
        raise BadInput(f"--cuda {value}: no CUDA {minor} release is known", fix=f"use one of {known}, or 'cpu'")
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


def parse_python(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    match = re.fullmatch(r"(?:py|python)?\s*(\d+)\.(\d+)(?:\.\d+)?", str(value).strip().lower())
    if not match:
        raise BadInput(f"--python {value!r} is not a Python version", fix="use X.Y such as 3.11")
    return f"{int(match[1])}.{int(match[2])}"


def parse_gpu_arch(value: str, matrix: Matrix) -> str:
    """'8.6', 'sm_86', '86', 'compute_90' -> '8.6'; unknown capabilities are a BadInput."""
    text = str(value).strip().lower()
    match = re.fullmatch(r"(\d+)\.(\d+)", text) or re.fullmatch(r"(?:sm_|compute_)?(\d+?)(\d)a?", text)
    known = sorted({cc for a in matrix.gpu_architectures for cc in a.compute_capabilities}, key=V)
    if not match:
        raise BadInput(f"--gpu-arch {value!r} is not a compute capability", fix="use X.Y such as 8.6, or sm_86")
    cc = f"{int(match[1])}.{int(match[2])}"
    if matrix.architecture_of(cc) is None:
        raise BadInput(f"--gpu-arch {value}: compute capability {cc} is not known", fix=f"use one of {', '.join(known)}")
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


# ---------------------------------------------------------------- kernel coverage

def kernel_coverage(cc: str, variant: TorchVariant) -> str | None:
    """How a build runs on compute capability `cc`: 'sm_XY' (native), 'PTX JIT from sm_XY', or None.

    A cubin for sm_XY runs on the same major with an equal or higher minor; PTX for X.Y is
    JIT-compiled for any newer capability (slow first start, and not under minor-version compat).
    """
    major, minor = (int(x) for x in cc.split("."))
    native = [a for a in variant.archs if int(a.split(".")[0]) == major and int(a.split(".")[1]) <= minor]
    if native:
        best = max(native, key=V)
        return "sm_" + best.replace(".", "")
    if variant.ptx and V(variant.ptx) <= V(cc):
        return "PTX JIT from compute_" + variant.ptx.replace(".", "")
    return None


def _driver_ok(driver: str | None, cuda: CudaRelease) -> bool:
    return driver is None or V(driver) >= V(cuda.min_driver)


def _image_tag(image: CudaImage) -> str:
    ubuntu = max(image.ubuntu, key=V)
    return f"nvidia/cuda:{image.version}-base-ubuntu{ubuntu}"


# ---------------------------------------------------------------- candidates

def _torch_candidates(matrix: Matrix, pin: str | None) -> list[_Candidate]:
    out = []
    for release, patch in _pick_patch(pin, "PyTorch", list(matrix.torch_releases), "--torch"):
        assert isinstance(release, TorchRelease)
        for variant in release.variants:
            cuda = matrix.cuda_release(variant.cuda) if variant.cuda else None
            image = matrix.image(cuda.latest_patch) if cuda else None
            for py in release.python:
                out.append(_Candidate(patch, py, cuda, image, variant=variant))
    return out


def _tf_candidates(matrix: Matrix, pin: str | None) -> list[_Candidate]:
    out = []
    for release, patch in _pick_patch(pin, "TensorFlow", list(matrix.tensorflow_releases), "--tensorflow"):
        assert isinstance(release, TensorflowRelease)
        cuda = matrix.cuda_release(release.cuda)
        image = matrix.image(cuda.latest_patch) if cuda else None
        for py in release.python:
            out.append(_Candidate(patch, py, cuda, image, tf=release))
            out.append(_Candidate(patch, py, None, None, tf=release))  # the CPU build
    return out


def _candidates(matrix: Matrix, framework: str, pin: str | None) -> list[_Candidate]:
    return _torch_candidates(matrix, pin) if framework == "torch" else _tf_candidates(matrix, pin)


def _covers(c: _Candidate, archs: list[str]) -> bool:
    if c.cuda is None:
        return True
    if c.variant is not None:
        return all(kernel_coverage(cc, c.variant) for cc in archs)
    # TensorFlow publishes no per-arch list we can cite; rely on the CUDA release's own arch range.
    return True


def _cuda_supports_arch(matrix: Matrix, cuda: CudaRelease, cc: str) -> bool:
    arch = matrix.architecture_of(cc)
    if arch is None:
        return False
    if V(cuda.minor) < V(arch.first_cuda):
        return False
    return arch.last_cuda is None or V(cuda.minor) <= V(arch.last_cuda)


def _fits(matrix: Matrix, c: _Candidate, archs: list[str]) -> bool:
    return _covers(c, archs) and (c.cuda is None or all(_cuda_supports_arch(matrix, c.cuda, cc) for cc in archs))


def _fmt(versions: Iterable[str]) -> str:
    return ", ".join(sorted(set(versions), key=V))


# ---------------------------------------------------------------- main entry

def resolve_stack(request: Request, matrix: Matrix | None = None) -> Stack:
    """Choose the newest stack that satisfies the request; NoCompatibleStack says why none does."""
    matrix = matrix or load_matrix()
    cuda_wish = parse_cuda(request.cuda, matrix)
    driver = parse_driver(request.driver, request.driver_source)
    python = parse_python(request.python)
    archs = [parse_gpu_arch(a, matrix) for a in split_arch_list(request.gpu_archs)]
    framework = parse_framework(request.framework)
    if request.torch and request.tensorflow:
        raise BadInput("--torch and --tensorflow were both given", fix="a stack has one framework: build one image per framework")
    implied = "torch" if request.torch else "tensorflow" if request.tensorflow else None
    if framework and implied and framework != implied:
        raise BadInput(f"--{implied} was given with --framework {framework}", fix=f"drop one, or use --framework {implied}")
    framework = framework or implied or "torch"
    name = "PyTorch" if framework == "torch" else "TensorFlow"
    pin = request.torch if framework == "torch" else request.tensorflow

    cands = _candidates(matrix, framework, pin)
    what = f"{name} {pin}" if pin else name

    # 1. the CUDA wish
    if cuda_wish == CPU:
        cands = [c for c in cands if c.cuda is None]
        if not cands:
            raise NoCompatibleStack(f"{what} has no CPU build in the data", fix="drop the version pin or use a CUDA version")
    else:
        gpu = [c for c in cands if c.cuda is not None]
        if cuda_wish:
            cands = [c for c in gpu if c.release.minor == cuda_wish]
            if not cands:
                have = _fmt(c.release.minor for c in gpu)
                others = _fmt(c.framework_version for c in _candidates(matrix, framework, None) if c.cuda and c.release.minor == cuda_wish)
                alt = f" or pick a {name} release built for it ({others})" if others and pin else ""
                raise NoCompatibleStack(f"{what} has no build for CUDA {cuda_wish} (it has CUDA {have})", fix=f"use --cuda with one of {have}{alt}")
        else:
            cands = gpu

    # 2. the Python pin
    if python:
        kept = [c for c in cands if c.python == python]
        if not kept:
            have = _fmt(c.python for c in cands)
            raise NoCompatibleStack(f"Python {python} is not supported by {what}{' for CUDA ' + cuda_wish if cuda_wish and cuda_wish != CPU else ''} (supported: {have})", fix=f"use --python with one of {have}, or pin another release")
        cands = kept

    # 3. the GPUs: kernels for every compute capability
    if archs and cuda_wish != CPU:
        kept = [c for c in cands if _fits(matrix, c, archs)]
        if not kept:
            widest = [c for c in _candidates(matrix, framework, None) if c.cuda and _fits(matrix, c, archs)]
            fix = "use --cuda cpu, or a GPU the data knows builds for"
            if widest:
                first = min(widest, key=lambda c: V(c.release.minor))
                fix = f"use --cuda {first.release.minor} or newer (needs driver >= {first.release.min_driver}) with {name} {first.framework_version} or newer"
            raise NoCompatibleStack(f"no {what} build{' for CUDA ' + cuda_wish if cuda_wish else ''} has kernels for compute capability {', '.join(archs)}", fix=fix)
        cands = kept

    # 4. the driver
    if driver and cuda_wish != CPU:
        kept = [c for c in cands if _driver_ok(driver, c.release)]
        if not kept:
            message, fix = _driver_failure(matrix, framework, pin, python, archs, driver, cands, cuda_wish)
            raise NoCompatibleStack(message, fix=fix)
        cands = kept

    best = max(cands, key=_Candidate.sort_key)
    return _to_stack(matrix, best, framework, request, driver, cuda_wish, python, archs)


def _driver_failure(matrix, framework, pin, python, archs, driver, cands, cuda_wish) -> tuple[str, str]:
    """The message when the driver is too old: which CUDA it needed, and the nearest fix."""
    needed = min(cands, key=lambda c: V(c.release.min_driver))
    message = f"driver {driver} is older than {needed.release.min_driver} needed by CUDA {needed.release.minor}"
    # What would fit this driver if the CUDA wish were dropped (other wishes kept)?
    pool = _candidates(matrix, framework, pin)
    fitting = [c for c in pool if c.cuda and _driver_ok(driver, c.release) and (not python or c.python == python) and _fits(matrix, c, archs)]
    options = [f"upgrade the driver to >= {needed.release.min_driver}"]
    if fitting and cuda_wish:
        options.append(f"use --cuda {max((c.release.minor for c in fitting), key=V)}")
    elif not fitting:
        options.append("use --cuda cpu")
    major = matrix.cuda_major(needed.release.major)
    if major and V(driver) >= V(major.minor_compat_min_driver):
        message += f" (CUDA {needed.release.major}.x minor-version compatibility from {major.minor_compat_min_driver} would start it, but {major.limits.rstrip('.')}; gpuenv does not plan for that)"
    branch = driver.split(".")[0]
    if needed.image and re.search(rf"driver>={branch},driver<{int(branch) + 1}\b", needed.image.require_cuda):
        message += f"; on a data-center GPU, CUDA forward compatibility (the cuda-compat package) supports the {branch} branch for this image"
    return message, " or ".join(options)


def _to_stack(matrix: Matrix, c: _Candidate, framework: str, request: Request, driver, cuda_wish, python, archs) -> Stack:
    reasons: list[str] = []
    name = "PyTorch" if framework == "torch" else "TensorFlow"
    pinned = request.torch if framework == "torch" else request.tensorflow
    reasons.append(f"{name} {c.framework_version}: " + (f"matches --{framework} {pinned}" if pinned else "the newest release that fits every other constraint"))
    if c.cuda is None:
        reasons.append("CPU only: requested with --cuda cpu")
    else:
        how = "requested with --cuda" if cuda_wish else f"the newest CUDA with a {name} {c.framework_version} build" + (" this driver runs" if driver else "")
        reasons.append(f"CUDA {c.release.minor} (image {c.cuda.latest_patch}): {how}; needs driver >= {c.release.min_driver}")
        if driver:
            reasons.append(f"driver {driver} ({request.driver_source}) >= {c.release.min_driver}")
        else:
            reasons.append("driver not checked: none given and none detected on this host; the server needs >= " + c.release.min_driver)
        reasons.append("base flavour of nvidia/cuda: the framework wheels carry their own CUDA libraries (cuBLAS, cuDNN, NCCL), so runtime/devel layers would only add size")
    for cc in archs:
        if c.variant is not None and c.cuda is not None:
            reasons.append(f"GPU compute capability {cc}: {c.variant.name} has kernels ({kernel_coverage(cc, c.variant)})")
        elif c.cuda is not None:
            reasons.append(f"GPU compute capability {cc}: supported by CUDA {c.release.minor}")
    reasons.append(f"Python {c.python}: " + ("requested with --python" if python else f"the newest Python {name} {c.framework_version} publishes wheels for"))

    if framework == "torch":
        variant = c.variant
        assert variant is not None
        local = variant.name
        requirement = f"torch=={c.framework_version}+{local}"
        index_url = TORCH_INDEX.format(variant=local)
        wheel_variant = local
        gpu_archs = variant.archs
        cudnn = None
    else:
        assert c.tf is not None
        requirement = f"tensorflow[and-cuda]=={c.framework_version}" if c.cuda else f"tensorflow-cpu=={c.framework_version}"
        index_url = None
        wheel_variant = None
        gpu_archs = ()
        cudnn = c.tf.cudnn if c.cuda else None
        if c.cuda:
            reasons.append(f"cuDNN {c.tf.cudnn}: TensorFlow {c.tf.series}'s tested build configuration (installed by tensorflow[and-cuda])")
    base = _image_tag(c.image) if c.image else matrix.cpu_base_image
    return Stack(
        cuda=c.release.minor if c.cuda else CPU,
        cuda_version=c.cuda.latest_patch if c.cuda else None,
        min_driver=c.release.min_driver if c.cuda else None,
        base_image=base,
        python=c.python,
        framework=framework,
        framework_version=c.framework_version,
        wheel_variant=wheel_variant,
        index_url=index_url,
        pip_requirement=requirement,
        cudnn=cudnn,
        require_cuda=c.image.require_cuda if c.image else None,
        gpu_archs=tuple(gpu_archs),
        reasons=tuple(reasons),
    )
