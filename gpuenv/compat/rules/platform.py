"""The platform rule: a server's CPU architecture decides which framework builds exist for it.

Grace servers (GH200, GB200, GB300, GB10) are aarch64: PyTorch's aarch64 CUDA builds are not the
x86_64 ones (fewer CUDA variants, narrower architecture lists, a different PyPI file) and
TensorFlow publishes no aarch64 CUDA build. The candidates are already the platform's builds
(gpuenv.compat.rules.frameworks.framework_candidates); this step says, in the platform's words,
why none fits when none does, and the reasons say why the chosen one is the platform's.
"""

from __future__ import annotations

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.matrix import version_key as V
from gpuenv.compat.rules.fixes import drop_pin, join_fixes
from gpuenv.compat.rules.frameworks import (
    Candidate,
    framework_candidates,
    platform_variants,
    version_list,
)
from gpuenv.compat.rules.gpus import kernel_coverage
from gpuenv.compat.rules.wishes import Wishes
from gpuenv.errors import NoCompatibleStack
from gpuenv.stack import CPU, LINUX_64


def keep_platform_builds(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """Only builds made for the server's platform are candidates; on aarch64 a request that none
    of them meets is refused here, naming what exists there (never an x86_64 build instead)."""
    if w.platform == LINUX_64:
        return cands
    wanted = [c for c in cands if (c.cuda is not None) == w.gpu]
    if wanted:
        return cands
    if w.framework == "tensorflow" and w.gpu:
        assert w.matrix.aarch64 is not None
        torch = {"framework": "torch", **({"tensorflow": None} if w.request.tensorflow else {})}
        fix = join_fixes([w.fixes.fix(cuda=CPU), w.fixes.fix(**torch)], "use --cuda cpu")
        raise NoCompatibleStack(
            f"TensorFlow has no {w.platform} GPU build: PyPI's aarch64 tensorflow wheel is a CPU "
            f"build and TensorFlow publishes no aarch64 CUDA wheel; for the GPUs use "
            f"{w.matrix.aarch64.tf_gpu_use}",
            fix=fix,
        )
    every = framework_candidates(w.matrix, w.framework, None, w.platform)
    kind = "GPU" if w.gpu else "CPU"
    have = version_list(
        c.framework_version.rsplit(".", 1)[0] for c in every if (c.cuda is not None) == w.gpu
    )
    tries: list[dict[str, object]] = [drop_pin(w.request)] if w.pin else []
    tries.append({"cuda": None} if not w.gpu else {"cuda": CPU})
    fix = join_fixes(
        (w.fixes.fix(**t) for t in tries if t), "see envs/compat.yaml's aarch64 section"
    )
    raise NoCompatibleStack(
        f"{w.what} has no {w.platform} {kind} build in the data ({w.platform} {kind} builds of "
        f"{w.name}: {have})",
        fix=fix,
    )


def platform_reasons(c: Candidate, w: Wishes) -> list[str]:
    """Why the build is the platform's (none on linux-64): how the platform was known, which
    aarch64 file the build is, and per GPU the first aarch64 build with SASS for it."""
    if c.platform == LINUX_64:
        return []
    matrix, request = w.matrix, w.request
    assert matrix.aarch64 is not None
    out = [
        f"platform {c.platform} ({request.platform_source}): only builds made for aarch64 are "
        "considered; the nvidia/cuda and ubuntu base images are multi-architecture (arm64)"
    ]
    if c.tf is not None:
        out.append(
            f"TensorFlow {c.framework_version} on {c.platform}: PyPI's aarch64 tensorflow "
            "wheel is a CPU build (tensorflow-cpu has no aarch64 file); for the GPUs use "
            f"{matrix.aarch64.tf_gpu_use}"
        )
        return out
    variant = c.variant
    assert variant is not None
    if variant.cuda is None:
        out.append(f"cpu: PyPI's aarch64 torch {c.framework_version} wheel is a CPU build")
        return out
    builds = _series_variants(matrix, c.framework_version, c.platform)
    pypi = next((v for v in builds if v.pypi), None)
    pypi_is = "a CPU build" if pypi is None or pypi.cuda is None else f"its {pypi.name} build"
    where = (
        "PyPI's aarch64 file of this release is this CUDA build"
        if variant.pypi
        else f"from download.pytorch.org/whl/{variant.name}: PyPI's aarch64 torch "
        f"{c.framework_version} is {pypi_is}"
    )
    sass = ", ".join("sm_" + a.replace(".", "") for a in variant.archs)
    out.append(
        f"{variant.name}: the aarch64 build of PyTorch {c.framework_version} for CUDA "
        f"{variant.cuda} ({where}), SASS for {sass}"
    )
    out.append(
        f"min driver on {c.platform}: CUDA {variant.cuda}'s Linux floor, unconfirmed for arm64: "
        "NVIDIA's table of CUDA releases and their drivers names Linux x86_64 only "
        "(docs.nvidia.com/cuda/cuda-toolkit-release-notes), and gpuenv takes the same floor for "
        "arm64 (SBSA) servers"
    )
    for cc in w.archs:
        first = first_build_with_sass(matrix, cc, c.platform)
        if first is not None:
            sm = "sm_" + cc.replace(".", "")
            out.append(
                f"{first[1]}: the first aarch64 build with SASS for {sm} (PyTorch {first[0]})"
            )
    return out


def _series_variants(matrix: Matrix, version: str, platform: str) -> tuple:
    """The builds for `platform` of the torch release that patch `version` belongs to."""
    release = next((r for r in matrix.torch_releases if version in r.patches), None)
    return platform_variants(matrix, release, platform) if release else ()


def first_build_with_sass(matrix: Matrix, cc: str, platform: str) -> tuple[str, str] | None:
    """(series, variant) of the oldest torch build for `platform` with SASS that runs on `cc`."""
    for release in sorted(matrix.torch_releases, key=lambda r: V(r.series)):
        builds = [v for v in platform_variants(matrix, release, platform) if v.cuda]
        for v in sorted(builds, key=lambda v: V(v.cuda or "0")):
            how = kernel_coverage(cc, v)
            if how is not None and not how.startswith("PTX"):
                return release.series, v.name
    return None
