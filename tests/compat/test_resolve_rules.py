"""The second round of resolver rules (issue 18), table-driven on the real data, plus properties
over all of it.

- TensorFlow's kernels are data (each wheel's build_info.py): SASS of the GPU's major at or below
  its minor, or PTX that the driver can JIT, which needs a driver that runs the build's CUDA
  natively.
- CUDA 11 hosts run CUDA 11.x builds on the 11.8 image by minor-version compatibility (>=
  450.80.02).
- Each GPU needs a driver branch that knows it, under every rule.
- Jetson is refused with a pointer to JetPack.
- --cuda X.Y picks the build CUDA first (newest at or below X.Y in X's major, else the lowest
  above), then the newest release that has that build.
- Every suggested fix is the exact options re-resolved.
"""

from __future__ import annotations

import itertools
import re

import pytest
from resolvecases import failure, resolve  # a resolve on a fixed day, a one-line failure

from gpuenv.compat.matrix import load_matrix
from gpuenv.compat.matrix import version_key as V
from gpuenv.compat.rules.fixes import command_for, describe
from gpuenv.compat.rules.request import Request
from gpuenv.errors import GpuenvError, NoCompatibleStack
from gpuenv.images.plan import require_cuda
from gpuenv.stack import Stack

T4, H100, B200, RTX5090, MAXWELL, A100, V100 = (
    ("7.5",),
    ("9.0",),
    ("10.0",),
    ("12.0",),
    ("5.2",),
    ("8.0",),
    ("7.0",),
)


def check(stack: Stack, expected: dict) -> None:
    got = stack.to_dict()
    for key, value in expected.items():
        assert got[key] == value, f"{key}: {got[key]!r} != {value!r} ({stack.stack_id})"


# ---------------------------------------------------------------- the scenarios

SCENARIOS = [
    # CUDA 11 host: T4 on 470.82.01 gets a CUDA 11 stack on the 11.8 image by minor-version
    # compatibility
    (
        dict(driver="470.82.01", gpu_archs=T4),
        dict(
            framework_version="2.7.1",
            wheel_variant="cu118",
            cuda="11.8",
            cuda_version="11.8.0",
            min_driver="450.80.02",
            base_image="nvidia/cuda:11.8.0-base-ubuntu22.04",
            require_cuda="cuda>=11.0,driver>=450.80.02",
        ),
    ),
    (
        dict(driver="470.82.01", gpu_archs=T4, framework="tf"),
        dict(
            framework_version="2.14.1",
            framework_cuda="11.8",
            min_driver="450.80.02",
            pip_requirement="tensorflow[and-cuda]==2.14.1",
        ),
    ),
    (
        dict(driver="470.82.01", gpu_archs=T4, tensorflow="2.12"),
        dict(
            framework_version="2.12.1",
            base_image="nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04",
            min_driver="450.80.02",
            pip_requirement="tensorflow==2.12.1",
        ),
    ),
    (dict(driver="450.80.02", gpu_archs=T4), dict(wheel_variant="cu118", min_driver="450.80.02")),
    (
        dict(driver="470.82.01", gpu_archs=T4, cuda="11.8"),
        dict(wheel_variant="cu118", cuda_version="11.8.0", min_driver="450.80.02"),
    ),
    # H100: PyTorch has SASS for it; TensorFlow only PTX, which a 550 driver can JIT for 12.3 builds
    # but not for 12.5 ones
    (
        dict(driver="550.54.15", gpu_archs=H100),
        dict(framework_version="2.14.1", wheel_variant="cu126", cuda_version="12.4.1"),
    ),
    (
        dict(driver="550.54.15", gpu_archs=H100, framework="tf"),
        dict(
            framework_version="2.17.1", framework_cuda="12.3", cuda="12.3", min_driver="545.23.08"
        ),
    ),
    (
        dict(driver="535.104.05", gpu_archs=H100, framework="tf"),
        dict(framework_version="2.15.1", framework_cuda="12.2", cuda="12.2"),
    ),
    # no driver given: the PTX build is kept, and the server needs the build CUDA's own floor
    (
        dict(gpu_archs=H100, framework="tf"),
        dict(framework_version="2.21.0", min_driver="555.42.06"),
    ),
    # Maxwell 5.2: no TensorFlow from 2.17 has sm_5x; 2.16 has sm_50
    (
        dict(driver="535.104.05", gpu_archs=MAXWELL, framework="tf"),
        dict(framework_version="2.16.2"),
    ),
    # Blackwell on a 570 driver
    (
        dict(driver="570.86.10", gpu_archs=RTX5090),
        dict(
            framework_version="2.11.0",
            wheel_variant="cu128",
            cuda_version="12.8.0",
            min_driver="570.26",
        ),
    ),
    (
        dict(driver="580.65.06", gpu_archs=B200),
        dict(framework_version="2.15.0", wheel_variant="cu132", cuda_version="13.0.0"),
    ),
    # --cuda asks for a CUDA: the build CUDA first, then the newest release with it
    (dict(cuda="12.0"), dict(framework_version="2.5.1", wheel_variant="cu121", cuda="12.0")),
    (dict(cuda="12.2"), dict(framework_version="2.5.1", wheel_variant="cu121", cuda="12.2")),
    (dict(cuda="12.6"), dict(framework_version="2.14.1", wheel_variant="cu126", cuda="12.6")),
    (dict(cuda="12.8"), dict(framework_version="2.11.0", wheel_variant="cu128", cuda="12.8")),
    (dict(cuda="12.9"), dict(framework_version="2.11.0", wheel_variant="cu129", cuda="12.9")),
    (
        dict(cuda="12.8", gpu_archs=V100),
        dict(framework_version="2.10.0", wheel_variant="cu128"),
    ),  # 2.11 dropped sm_70 from cu128
    (
        dict(cuda="12.8", gpu_archs=("5.0",)),
        dict(framework_version="2.14.1", wheel_variant="cu126"),
    ),  # no cu128 has sm_50
]


@pytest.mark.parametrize("wishes, expected", SCENARIOS, ids=[str(w) for w, _ in SCENARIOS])
def test_scenarios(wishes, expected):
    stack = resolve(**wishes)
    check(stack, expected)
    if wishes.get("driver"):
        assert V(stack.min_driver) <= V(wishes["driver"])


REFUSED = [
    # a GPU the driver predates, under every rule: the error names the branch
    (dict(driver="560.35.03", gpu_archs=B200), "predates Blackwell", "R570"),
    (dict(driver="560.35.03", gpu_archs=RTX5090), "predates Blackwell", "R570"),
    (dict(driver="560.35.03", gpu_archs=RTX5090, cuda="12.6"), "predates Blackwell", "R570"),
    (dict(driver="560.35.03", gpu_archs=B200, strict_driver=True), "predates Blackwell", "R570"),
    (dict(driver="560.35.03", gpu_archs=B200, framework="tf"), "predates Blackwell", "R570"),
    (dict(driver="470.82.01", gpu_archs=H100), "predates Hopper", "R520"),
    # Jetson is not a server
    (dict(driver="540.4.0", gpu_archs=("8.7",)), "Jetson AGX Orin", "JetPack"),
    (dict(gpu_archs=("5.3",)), "Jetson Nano", "l4t-jetpack"),
    (dict(gpu_archs=("7.2",), framework="tf"), "Jetson AGX Xavier", "Jetson wheels"),
    (dict(gpu_archs=("6.2",)), "Jetson TX2", "JetPack"),
    (dict(gpu_archs=("11.0",)), "Jetson Thor", "JetPack"),
    (dict(gpu_archs=("10.1",), cuda="12.9"), "Jetson Thor", "JetPack"),
    # Maxwell with a TensorFlow that has no kernels for it
    (
        dict(driver="535.104.05", gpu_archs=MAXWELL, tensorflow="2.17"),
        "no TensorFlow 2.17 build has kernels for compute capability 5.2",
        "--tensorflow",
    ),
    # H100 on 535 cannot JIT 2.21's CUDA 12.5 PTX
    (
        dict(driver="535.104.05", gpu_archs=H100, tensorflow="2.21"),
        "PTX is JIT-compiled only by a driver that runs the build's CUDA natively",
        "drop --tensorflow",
    ),
    # a driver below CUDA 11's minor-version floor
    (
        dict(driver="450.36.06", gpu_archs=T4),
        "older than 520.61.05 needed by CUDA 11.8",
        "upgrade the driver",
    ),
]


@pytest.mark.parametrize("wishes, fragment, fix", REFUSED, ids=[str(w) for w, _, _ in REFUSED])
def test_refused(wishes, fragment, fix):
    text = failure(**wishes)
    assert fragment in text and fix in text, text


def test_jit_only_gpus_are_said_so_and_never_claim_sass():
    stack = resolve(driver="550.54.15", gpu_archs=H100, framework="tf")
    line = next(r for r in stack.reasons if r.startswith("GPU compute capability 9.0"))
    assert "has no SASS for it and runs only by JIT-compiling its compute_90 PTX" in line
    assert "first start compiles kernels for minutes" in line
    assert "has SASS" not in line
    assert not any("ship SASS" in r for r in stack.reasons)
    # torch on the same host has the real thing
    torch = resolve(driver="550.54.15", gpu_archs=H100)
    assert any(
        r.startswith("GPU compute capability 9.0") and "has SASS for it (sm_90)" in r
        for r in torch.reasons
    )


def test_cuda11_image_gate_and_nvidia_require_cuda_agree():
    stack = resolve(driver="470.82.01", gpu_archs=T4)
    assert stack.min_driver == load_matrix().cuda_major(11).minor_compat_min_driver
    # NVIDIA_REQUIRE_CUDA no longer demands CUDA 11.8 natively (which needs 520.61.05): the same
    # floor as the gate
    assert require_cuda(stack) == f"cuda>=11.0,driver>={stack.min_driver}"
    assert any(
        "minor-version compatibility" in r and "NVIDIA_REQUIRE_CUDA" in r for r in stack.reasons
    )
    # a CUDA 12 host keeps the image's own NVIDIA_REQUIRE_CUDA
    assert resolve(driver="550.54.15").require_cuda.startswith("cuda>=12.4 ")


def test_driver_branch_raises_min_driver_when_no_driver_is_given():
    stack = resolve(gpu_archs=B200, cuda="12.8")
    assert V(stack.min_driver) >= V("570.0")


def test_h100_535_cuda13_fix_is_the_exact_command_re_resolved():
    text = failure(driver="535.104.05", gpu_archs=H100, cuda="13.0")
    assert "driver 535.104.05 is older than 580.65.06 needed by CUDA 13.0" in text
    assert "use --cuda 12.2 (gives PyTorch 2.5.1 cu121" in text
    assert "drop --cuda (gives PyTorch 2.14.1 cu126" in text
    assert_fixes_reproduce(dict(driver="535.104.05", gpu_archs=H100, cuda="13.0"), text)


def test_cuda_reasons_name_the_driver_rule_command():
    stack = resolve(driver="535.104.05", gpu_archs=H100, cuda="12.2")
    assert (stack.framework_version, stack.wheel_variant) == ("2.5.1", "cu121")
    line = next(r for r in stack.reasons if r.startswith("without --cuda"))
    command = re.search(r"`(invoke resolve[^`]*)`", line)[1]
    assert (
        command == "invoke resolve --driver 535.104.05 --gpu-arch 9.0" and "--cuda" not in command
    )
    assert f"gives {describe(resolve(driver='535.104.05', gpu_archs=H100))}" in line


def test_command_for_names_every_option():
    request = Request(
        driver="535.104.05",
        cuda="12.2",
        tensorflow="2.15",
        python="3.11",
        gpu_archs=("9.0", "8.0"),
        strict_driver=True,
    )
    assert (
        command_for(request)
        == "invoke resolve --driver 535.104.05 --cuda 12.2 --tensorflow 2.15 --python 3.11 "
        "--gpu-arch 9.0,8.0 --strict-driver"
    )


# ---------------------------------------------------------------- properties over the whole data


_KEYS = {"--gpu-arch": "gpu_archs", "--strict-driver": "strict_driver"}


def _changes(verb: str, options: str) -> dict:
    """The resolver changes a fix names: 'use --cuda 12.6 and drop --torch', 'drop --cuda', 'drop
    --strict-driver'."""
    out: dict = {}
    for i, part in enumerate(options.split(" and ")):
        dropped = verb == "drop" if i == 0 else part.startswith("drop ")
        flag, _, value = part.removeprefix("drop ").partition(" ")
        key = _KEYS.get(flag, flag[2:].replace("-", "_"))
        if dropped:
            out[key] = False if key == "strict_driver" else None
        elif key == "strict_driver":
            out[key] = True
        else:
            out[key] = tuple(value.split(",")) if key == "gpu_archs" else value
    return out


def assert_fixes_reproduce(wishes: dict, text: str) -> int:
    """Every 'use ... (gives X)' / 'drop ... (gives X)' in a message: resolving exactly those
    options gives X."""
    count = 0
    for match in re.finditer(r"(use|drop) (--[^()]*?) \(gives ([^()]*)\)", text):
        verb, options, gives = match.groups()
        stack = resolve(**{**wishes, **_changes(verb, options)})
        assert describe(stack) == gives, (wishes, match[0])
        count += 1
    return count


GRID_DRIVERS = [None, "470.82.01", "535.104.05", "560.35.03", "580.65.06"]
GRID_ARCHS = [T4, H100, B200, V100]
GRID_CUDA = [None, "11.8", "12.0", "12.2", "12.8", "13.0", "13.2"]


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_every_suggested_fix_reproduces(framework):
    """Over a grid of hosts and wishes: each fix a failure prints is exactly what its options
    give."""
    failures = fixes = 0
    for driver, archs, cuda in itertools.product(GRID_DRIVERS, GRID_ARCHS, GRID_CUDA):
        wishes = dict(driver=driver, gpu_archs=archs, cuda=cuda, framework=framework)
        try:
            resolve(**wishes)
        except NoCompatibleStack as err:
            failures += 1
            fixes += assert_fixes_reproduce(wishes, err.render())
    assert failures and fixes, (failures, fixes)


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
@pytest.mark.parametrize("driver", [None, "535.104.05", "580.65.06"])
@pytest.mark.parametrize("archs", [(), A100, H100, MAXWELL, B200])
def test_cuda_is_monotonic_over_every_cuda_in_the_data(framework, driver, archs):
    """Within a major, a higher --cuda never gives an older build CUDA; a major is never crossed."""
    m = load_matrix()
    for major in sorted({c.major for c in m.cuda_releases}):
        minors = sorted((c.minor for c in m.cuda_releases if c.major == major), key=V)
        picked = []
        for minor in minors:
            try:
                stack = resolve(cuda=minor, driver=driver, gpu_archs=archs, framework=framework)
            except GpuenvError:
                continue
            assert stack.cuda == minor and stack.framework_cuda.split(".")[0] == str(major)
            picked.append((minor, stack.framework_cuda))
        builds = [V(b) for _, b in picked]
        assert builds == sorted(builds), picked


def test_the_build_is_at_or_below_the_wish_when_one_exists():
    m = load_matrix()
    for c in m.cuda_releases:
        if not m.images_of(c.minor):
            continue
        stack = resolve(cuda=c.minor)
        builds = {
            v.cuda
            for t in m.torch_releases
            for v in t.variants
            if v.cuda and V(v.cuda).major == V(c.minor).major
        }
        below = [b for b in builds if V(b) <= V(c.minor)]
        expected = max(below, key=V) if below else min(builds, key=V)
        assert stack.framework_cuda == expected, c.minor
        newest = max(
            (
                p
                for t in m.torch_releases
                for v in t.variants
                if v.cuda == expected
                for p in t.patches
            ),
            key=V,
        )
        assert stack.framework_version == newest, c.minor


def test_dropping_a_pin_keeps_its_framework_and_reproduces():
    wishes = dict(driver="535.104.05", gpu_archs=H100, tensorflow="2.21")
    text = failure(**wishes)
    assert "use --framework tensorflow and drop --tensorflow (gives TensorFlow 2.15.1" in text
    assert assert_fixes_reproduce(wishes, text) >= 1


def test_the_upgrade_advice_names_the_minor_version_floor_doctor_names():
    """Below CUDA 11's minor-version floor: the advice names the image's own floor and the lower
    one the resolver accepts (doctor's "oldest branch that serves these GPUs" is R450), so the two
    lines never contradict each other; with --strict-driver only the image's floor is named."""
    text = failure(driver="418.67", gpu_archs=T4)
    assert (
        "upgrade the driver to >= 520.61.05 (the image's own floor; CUDA 11.x wheels run from "
        "450.80.02 by minor-version compatibility)"
    ) in text, text
    assert resolve(driver="450.80.02", gpu_archs=T4).cuda.startswith("11."), "the floor is real"
    strict = failure(driver="418.67", gpu_archs=T4, strict_driver=True)
    assert "450.80.02" not in strict, strict
