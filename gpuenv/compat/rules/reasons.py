"""What the resolver says: the reasons a chosen stack gives for each of its parts, and the message
and fixes when nothing fits (the GPUs, the driver, a newer CUDA)."""
from __future__ import annotations

import re
from dataclasses import replace

from gpuenv.compat.legacy import last_served
from gpuenv.compat.matrix import CudaImage, Matrix, version_key as V
from gpuenv.compat.rules.cuda import _image_floor, _image_minors, _runnable_images
from gpuenv.compat.rules.fixes import _cuda_tries, _describe, _drop_pin, _first_fix, _fix, _join_fixes, _suggest, command_for
from gpuenv.compat.rules.frameworks import _Candidate, _build_name
from gpuenv.compat.rules.gpus import kernel_coverage
from gpuenv.compat.rules.request import Request, _NAMES
from gpuenv.stack import CPU, Stack

TORCH_INDEX = "https://download.pytorch.org/whl/{variant}"


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


def _driver_failure(matrix: Matrix, request: Request, cands: list[_Candidate], driver: str, cuda_wish: str | None, strict: bool,
                    archs: list[str]) -> tuple[str, str]:
    """The message when the driver is too old: which CUDA it needed, and the nearest re-resolved fixes
    (never a driver past a legacy GPU's last branch: that GPU's last branch instead)."""
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
    for cc in archs:
        arch = matrix.architecture_of(cc)
        if arch is None or arch.last_driver_branch is None or int(needed.split(".")[0]) <= int(arch.last_driver_branch):
            continue
        last = arch.last_driver_branch
        message += f"; {last_served(arch, cc)}, so no driver that runs it reaches {needed}"
        options[0] = f"install an R{last} driver"
        if request.explain:  # a re-resolution behind a suggestion suggests nothing (fixes never recurse)
            # the lowest driver of the last branch: if it gives a stack, every driver of that branch does
            on_last = _suggest(request, matrix, driver=f"{last}.0")
            if on_last is not None:
                options[0] += f" (gives {_describe(on_last)})"
            else:
                message += f", and no stack gpuenv knows with these options runs on it on R{last}"
                options.pop(0)
        break
    major_no = int((cuda_wish or cands[0].release.minor).split(".")[0])
    major = matrix.cuda_major(major_no)
    if major and V(driver) >= V(major.minor_compat_min_driver):
        message += f" (CUDA {major_no}.x wheels run on it by minor-version compatibility, from {major.minor_compat_min_driver}, but the CUDA {cuda_wish or cands[0].release.minor} image needs its own driver floor)"
    branch = driver.split(".")[0]
    images = matrix.images_of(cuda_wish) if cuda_wish else []
    if images and images[-1].require_cuda and re.search(rf"driver>={branch},driver<{int(branch) + 1}\b", images[-1].require_cuda):
        message += f"; on a data-center GPU, CUDA forward compatibility (the cuda-compat package) supports the {branch} branch for this image"
    return message, " or ".join(options)


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
        # a value pinned in invoke.yaml or a variable is named there, not as an option nobody typed
        reasons=tuple(re.sub(r"--(python|cuda|torch|tensorflow)\b", lambda m: request.blame(m.group(1)), r)
                      for r in reasons),
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
