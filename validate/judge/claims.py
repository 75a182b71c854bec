"""The stack rules: what the image's labels claim (framework, CUDA, cuDNN) against what is
installed, and whether the driver runs the framework's CUDA."""

from __future__ import annotations

import re

from validate.judge.verdict import FAIL, PASS, SKIP, Verdict


def _parts(version: str | None) -> tuple[int, ...] | None:
    """'9.3.0' -> (9, 3, 0); '9' -> (9,); None when it does not start with a number."""
    match = re.match(r"^(\d+(?:\.\d+)*)", (version or "").strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def versions_agree(claimed: str | None, installed: str | None, depth: int = 2) -> bool:
    """Compare only what both sides state, up to `depth` parts: TensorFlow's build info gives
    cuDNN as "9" while the image's label says "9.3" -- they agree; "8" and "9.3" do not."""
    want, have = _parts(claimed), _parts(installed)
    if want is None or have is None:
        return False
    common = min(len(want), len(have), depth)
    return want[:common] == have[:common]


def _major_minor(version: str | None) -> tuple[int, int] | None:
    if not version:
        return None
    match = re.match(r"^(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def driver_runs_runtime_verdict(driver_cuda: str | None, runtime_cuda: str | None) -> Verdict:
    """The driver must support the CUDA major the framework was built with (minor: forward
    compat)."""
    driver, runtime = _major_minor(driver_cuda), _major_minor(runtime_cuda)
    threshold = f"driver CUDA >= {runtime_cuda}"
    if driver is None or runtime is None:
        return Verdict(SKIP, threshold, "driver or framework CUDA version unknown")
    if driver >= runtime:
        return Verdict(PASS, threshold)
    if driver[0] == runtime[0]:
        return Verdict(
            PASS,
            threshold,
            "older driver minor: runs through CUDA minor-version compatibility (no PTX JIT)",
        )
    return Verdict(
        FAIL,
        threshold,
        f"the driver supports CUDA {driver_cuda}, the framework needs {runtime_cuda}: update the "
        "driver",
    )


def public_version(version: str) -> str:
    """'2.5.1+cu121' -> '2.5.1' (the local build tag is compared separately through the CUDA
    field)."""
    return version.split("+", 1)[0]


def cudnn_version_text(version: int | None) -> str | None:
    """torch.backends.cudnn.version() is an int: 8902 is cuDNN 8.9.2, 90100 is cuDNN 9.1.0."""
    if not version:
        return None
    if version >= 10000:
        return f"{version // 10000}.{(version % 10000) // 100}.{version % 100}"
    return f"{version // 1000}.{(version % 1000) // 100}.{version % 100}"


def claims_verdict(claimed: dict[str, str | None], installed: dict[str, str | None]) -> Verdict:
    """Compare what the image's labels claim (framework version, CUDA, cuDNN) with what is
    installed.

    CUDA and cuDNN compare on major.minor, or on what both state when one side says less
    (TensorFlow reports cuDNN "9"); a claim of "cpu" for CUDA means no CUDA build.
    """
    problems: list[str] = []
    want_version = claimed.get("framework_version")
    have_version = installed.get("framework_version")
    if want_version and (have_version is None or public_version(have_version) != want_version):
        problems.append(f"framework {have_version} installed, image claims {want_version}")
    want_cuda = claimed.get("cuda")
    have_cuda = installed.get("cuda")
    if want_cuda == "cpu":
        if have_cuda:
            problems.append(f"CUDA {have_cuda} build installed, image claims a CPU build")
    elif want_cuda and not versions_agree(want_cuda, have_cuda):
        problems.append(f"built for CUDA {have_cuda}, image claims {want_cuda}")
    want_cudnn = claimed.get("cudnn")
    have_cudnn = installed.get("cudnn")
    if want_cudnn and not versions_agree(want_cudnn, have_cudnn):
        problems.append(f"cuDNN {have_cudnn} loaded, image claims {want_cudnn}")
    threshold = ", ".join(f"{k}={v}" for k, v in claimed.items() if v) or "nothing claimed"
    if problems:
        return Verdict(FAIL, threshold, "; ".join(problems))
    return Verdict(PASS, threshold)
