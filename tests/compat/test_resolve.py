"""Table-driven resolver tests against the real compatibility data (facts cited in
envs/compat.yaml).

One table per rule (README "How the stack is chosen"). `today` is fixed so the default-Python
rule does not move with the calendar.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest
from resolvecases import TODAY, failure, resolve

from gpuenv.compat.matrix import TorchVariant, load_matrix
from gpuenv.compat.matrix import version_key as V
from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.gpus import kernel_coverage
from gpuenv.compat.rules.python import default_python
from gpuenv.compat.rules.request import Request
from gpuenv.compat.rules.wheels import framework_wheels
from gpuenv.errors import BadInput, NoCompatibleStack
from gpuenv.stack import Stack


def check(stack: Stack, expected: dict) -> None:
    got = stack.to_dict()
    for key, value in expected.items():
        assert got[key] == value, f"{key}: {got[key]!r} != {value!r} ({stack.stack_id})"
    assert stack.reasons, "every stack explains its choices"


# ---------------------------------------------------------------- pinned stacks (unchanged
# contract)

EXACT = [
    (
        dict(cuda="12.1", torch="2.1", python="3.11"),
        dict(
            framework_version="2.1.2",
            wheel_variant="cu121",
            cuda="12.1",
            cuda_version="12.1.1",
            framework_cuda="12.1",
            min_driver="530.30.02",
            base_image="nvidia/cuda:12.1.1-base-ubuntu22.04",
            index_url="https://download.pytorch.org/whl/cu121",
            pip_requirement="torch==2.1.2+cu121",
        ),
    ),
    (
        dict(cuda="11.8", torch="2.3.1", python="3.10"),
        dict(
            framework_version="2.3.1",
            wheel_variant="cu118",
            cuda_version="11.8.0",
            min_driver="520.61.05",
            base_image="nvidia/cuda:11.8.0-base-ubuntu22.04",
            python="3.10",
        ),
    ),
    (
        dict(cuda="cpu", torch="2.13.0", python="3.11"),
        dict(
            cuda="cpu",
            cuda_version=None,
            framework_cuda=None,
            min_driver=None,
            wheel_variant="cpu",
            pip_requirement="torch==2.13.0+cpu",
            index_url="https://download.pytorch.org/whl/cpu",
            require_cuda=None,
        ),
    ),
    (
        dict(framework="tensorflow", tensorflow="2.15", python="3.11"),
        dict(
            framework="tensorflow",
            framework_version="2.15.1",
            cuda="12.2",
            cudnn="8.9",
            wheel_variant=None,
            index_url=None,
            pip_requirement="tensorflow[and-cuda]==2.15.1",
        ),
    ),
    (
        dict(framework="tf", cuda="cpu", tensorflow="2.16.1"),
        dict(
            framework="tensorflow",
            cuda="cpu",
            pip_requirement="tensorflow-cpu==2.16.1",
            base_image="ubuntu:22.04",
        ),
    ),
    (
        dict(cuda="12.1.1", torch="2.2", driver="535.104.05", gpu_archs=("sm_86",)),
        dict(cuda="12.1", framework_version="2.2.2", wheel_variant="cu121"),
    ),
    # TF 2.12/2.13 have no and-cuda extra: cuDNN from the image (older servers: Python 3.8, CUDA
    # 11.8)
    (
        dict(framework="tf", tensorflow="2.13", python="3.8"),
        dict(
            cuda="11.8",
            framework_version="2.13.1",
            pip_requirement="tensorflow==2.13.1",
            cudnn="8.6",
            base_image="nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04",
        ),
    ),
    (
        dict(cuda="11.8", python="3.8"),
        dict(
            cuda="11.8",
            framework_cuda="11.8",
            python="3.8",
            wheel_variant="cu118",
            framework_version="2.4.1",
        ),
    ),
    (
        dict(torch="2.0", cuda="11.8"),
        dict(framework_version="2.0.1", wheel_variant="cu118", python="3.11"),
    ),
]


@pytest.mark.parametrize("wishes, expected", EXACT, ids=[str(w) for w, _ in EXACT])
def test_exact_stacks(wishes, expected):
    check(resolve(**wishes), expected)


# ---------------------------------------------------------------- 1. the CUDA rule

CUDA_RULE = [
    # --cuda as nvidia-smi prints it: the container's CUDA; the build is the newest <= it within the
    # major
    (
        dict(cuda="12.2", framework="torch"),
        dict(
            cuda="12.2",
            cuda_version="12.2.2",
            framework_cuda="12.1",
            wheel_variant="cu121",
            framework_version="2.5.1",
            min_driver="535.104.05",
            base_image="nvidia/cuda:12.2.2-base-ubuntu22.04",
        ),
    ),
    (
        dict(cuda="12.3"),
        dict(cuda="12.3", cuda_version="12.3.2", framework_cuda="12.1", min_driver="545.23.08"),
    ),
    (
        dict(cuda="12.5"),
        dict(
            cuda="12.5",
            cuda_version="12.5.1",
            framework_cuda="12.4",
            wheel_variant="cu124",
            framework_version="2.6.0",
        ),
    ),
    (
        dict(cuda="13.1"),
        dict(
            cuda="13.1",
            cuda_version="13.1.2",
            framework_cuda="13.0",
            wheel_variant="cu130",
            framework_version="2.15.0",
            min_driver="590.48.01",
        ),
    ),
    (
        dict(cuda="12.6"),
        dict(cuda="12.6", framework_cuda="12.6", wheel_variant="cu126", framework_version="2.14.1"),
    ),
    (
        dict(cuda="12.2", torch="2.1"),
        dict(
            framework_cuda="12.1",
            wheel_variant="cu121",
            framework_version="2.1.2",
            cuda_version="12.2.2",
        ),
    ),
    # 12.0: no build at most 12.0 in CUDA 12 -> the lowest above it (cu121) by minor-version
    # compatibility, its newest release
    (
        dict(cuda="12.0"),
        dict(
            cuda="12.0",
            cuda_version="12.0.1",
            framework_cuda="12.1",
            wheel_variant="cu121",
            framework_version="2.5.1",
            min_driver="525.85.12",
        ),
    ),
    # 12.8: the cu128 build the user asked for (2.11.0 is the newest release that has it), not
    # 2.14.1 cu126
    (
        dict(cuda="12.8"),
        dict(cuda="12.8", framework_cuda="12.8", wheel_variant="cu128", framework_version="2.11.0"),
    ),
    # TensorFlow follows the same rule: 2.21 is built for 12.5
    (
        dict(framework="tf", cuda="12.8"),
        dict(
            cuda="12.8",
            framework_cuda="12.5",
            framework_version="2.21.0",
            pip_requirement="tensorflow[and-cuda]==2.21.0",
        ),
    ),
    (
        dict(framework="tf", cuda="12.4"),
        dict(cuda="12.4", framework_cuda="12.3", framework_version="2.17.1"),
    ),
]


@pytest.mark.parametrize("wishes, expected", CUDA_RULE, ids=[str(w) for w, _ in CUDA_RULE])
def test_cuda_rule(wishes, expected):
    stack = resolve(**wishes)
    check(stack, expected)
    assert V(stack.min_driver) >= V(load_matrix().cuda_release(stack.cuda).floor)
    assert stack.framework_cuda.split(".")[0] == stack.cuda.split(".")[0], (
        "never crosses a CUDA major"
    )
    if stack.framework_cuda != stack.cuda:
        assert any(
            "Cog's rule" in r or "minor-version compatibility" in r for r in stack.reasons
        ), stack.reasons


def test_cuda_rule_says_what_newer_releases_need():
    stack = resolve(cuda="12.2", driver="550.54.15")
    assert any(
        r.startswith(
            "newer PyTorch releases need a newer CUDA 12.x build: use --cuda 12.4 (gives "
            "PyTorch 2.6.0 cu124"
        )
        for r in stack.reasons
    ), stack.reasons
    # the driver rule would give a newer release on this host: the reason names the exact command,
    # without --cuda
    assert any(
        "without --cuda the driver rule gives a newer release on driver 550.54.15: `invoke "
        "resolve --driver 550.54.15` gives PyTorch 2.14.1 cu126" in r
        for r in stack.reasons
    ), stack.reasons
    assert not any(r.startswith("newer PyTorch") for r in resolve(cuda="13.2").reasons)


def test_min_driver_is_the_higher_of_image_and_build():
    m = load_matrix()
    for cuda in ("12.2", "12.3", "12.5", "12.8", "13.1"):
        stack = resolve(cuda=cuda)
        image_floor = m.cuda_release(stack.cuda).update(stack.cuda_version).min_driver
        build_floor = m.cuda_release(stack.framework_cuda).floor
        assert stack.min_driver == max(image_floor, build_floor, key=V), cuda


def test_never_crosses_a_major():
    # torch 2.1 has only 11.8 and 12.1 builds: a CUDA 13 container gets no CUDA 12 build
    text = failure(cuda="13.0", torch="2.1")
    assert "no CUDA 13.x build" in text and "never crosses a CUDA major" in text
    assert "--cuda 12.1" in text  # a concrete value that works


def test_strict_driver_keeps_exact_cuda_when_no_older_build():
    text = failure(cuda="12.0", strict_driver=True)
    assert "no build for CUDA 12.0 or an older CUDA 12.x" in text
    assert "use --cuda 12.1 (gives PyTorch 2.5.1 cu121" in text


def test_json_keeps_image_cuda_and_adds_framework_cuda():
    data = resolve(cuda="12.2").to_dict()
    assert (data["cuda"], data["cuda_version"], data["framework_cuda"]) == (
        "12.2",
        "12.2.2",
        "12.1",
    )


def test_stack_json_without_framework_cuda_still_loads():
    old = resolve(cuda="12.1", torch="2.1").to_dict()
    old.pop("framework_cuda")
    old["some_future_field"] = 1
    stack = Stack.from_dict(old)
    assert stack.framework_cuda == "12.1" and stack.stack_id == "torch2.1.2-cu121-py3.11"


# ---------------------------------------------------------------- 7. the driver rule (minor-version
# compatibility)

DRIVER_RULE = [
    # H100 on 550.54.15: image 12.4.1 (its floor), the newest 12.x build (cu126) by minor-version
    # compatibility
    (
        dict(driver="550.54.15", gpu_archs=("9.0",)),
        dict(
            cuda="12.4",
            cuda_version="12.4.1",
            framework_cuda="12.6",
            wheel_variant="cu126",
            framework_version="2.14.1",
            min_driver="550.54.15",
        ),
    ),
    # A100 on 535.104.05
    (
        dict(driver="535.104.05", gpu_archs=("8.0",)),
        dict(
            cuda="12.2",
            cuda_version="12.2.2",
            framework_cuda="12.6",
            wheel_variant="cu126",
            min_driver="535.104.05",
        ),
    ),
    # RTX 5090 (sm_120) on 570.86.10: 12.8.0 needs only 570.26, and cu128 has sm_120 kernels
    (
        dict(driver="570.86.10", gpu_archs=("12.0",)),
        dict(
            cuda="12.8",
            cuda_version="12.8.0",
            framework_cuda="12.8",
            wheel_variant="cu128",
            framework_version="2.11.0",
            min_driver="570.26",
        ),
    ),
    # 13.0.0 needs 580.65.06 (13.0.2 needs 580.95.05)
    (
        dict(driver="580.65.06", gpu_archs=("10.0",)),
        dict(
            cuda="13.0",
            cuda_version="13.0.0",
            framework_cuda="13.2",
            wheel_variant="cu132",
            framework_version="2.15.0",
            min_driver="580.65.06",
        ),
    ),
    (dict(driver="999.99"), dict(framework_version="2.15.0", wheel_variant="cu132", cuda="13.2")),
    # a 525.60.x driver runs CUDA 12.0.0's image: a CUDA 12 build, never the cu118 one
    (
        dict(driver="525.60.13"),
        dict(cuda="12.0", cuda_version="12.0.0", framework_cuda="12.6", min_driver="525.60.13"),
    ),
    # TensorFlow follows the same rule: 2.21 (CUDA 12.5 and-cuda libraries) on the 12.2 image of a
    # 535 driver
    (
        dict(driver="535.104.05", framework="tf"),
        dict(
            cuda="12.2", framework_cuda="12.5", framework_version="2.21.0", min_driver="535.104.05"
        ),
    ),
]


@pytest.mark.parametrize("wishes, expected", DRIVER_RULE, ids=[str(w) for w, _ in DRIVER_RULE])
def test_driver_rule(wishes, expected):
    stack = resolve(**wishes)
    check(stack, expected)
    assert V(stack.min_driver) <= V(wishes["driver"])
    if stack.framework_cuda != stack.cuda:
        assert any(
            "minor-version compatibility" in r and "cannot JIT-compile PTX" in r
            for r in stack.reasons
        ), stack.reasons


STRICT = [
    # today's rule: the build's own CUDA image, which the driver runs natively; still never CUDA 11
    # over 12
    (
        dict(driver="535.104.05", gpu_archs=("8.0",), strict_driver=True),
        dict(cuda="12.1", framework_cuda="12.1", wheel_variant="cu121", framework_version="2.5.1"),
    ),
    (
        dict(driver="550.54.15", gpu_archs=("9.0",), strict_driver=True),
        dict(cuda="12.4", framework_cuda="12.4", wheel_variant="cu124", framework_version="2.6.0"),
    ),
    (
        dict(driver="570.86.10", gpu_archs=("12.0",), strict_driver=True),
        dict(cuda="12.8", cuda_version="12.8.0", wheel_variant="cu128"),
    ),
]


@pytest.mark.parametrize("wishes, expected", STRICT, ids=[str(w) for w, _ in STRICT])
def test_strict_driver(wishes, expected):
    stack = resolve(**wishes)
    check(stack, expected)
    assert stack.framework_cuda == stack.cuda


@pytest.mark.parametrize(
    "driver", ["450.80.02", "525.60.13", "535.104.05", "550.54.15", "570.86.10", "580.65.06"]
)
def test_never_a_cuda11_build_when_the_driver_runs_cuda12(driver):
    m = load_matrix()
    try:
        stack = resolve(driver=driver)
    except NoCompatibleStack:
        assert all(c.floor is None or V(c.floor) > V(driver) for c in m.cuda_releases)
        return
    assert V(stack.min_driver) <= V(driver)
    runs12 = V(driver) >= V(m.cuda_major(12).minor_compat_min_driver) and any(
        i
        for c in m.cuda_releases
        if c.major == 12
        for i in m.images_of(c.minor)
        if V(c.update(i.version).min_driver) <= V(driver)
    )
    if runs12:
        assert V(stack.framework_cuda) >= V("12.0"), stack.stack_id


def test_kernels_under_minor_compat_must_be_native():
    # A PTX-only build cannot JIT newer-toolkit PTX on an older driver: minor-version compat needs
    # SASS.
    variant = TorchVariant("cu126", "12.6", ("8.0",), "8.0")
    assert kernel_coverage("9.0", variant) == "PTX JIT from compute_80"
    stack = resolve(driver="550.54.15", gpu_archs=("9.0",))
    assert any("sm_90" in r for r in stack.reasons)


# ---------------------------------------------------------------- 8. fixes that are right


def test_volta_asked_for_cuda13_is_told_cuda13_dropped_volta_with_working_values():
    text = failure(cuda="13.0", gpu_archs=("7.0",))
    assert "CUDA 13 dropped Volta (compute capability 7.0)" in text
    # --cuda 12.9: the newest build at most 12.9 with sm_70 is 2.8.0's cu129
    assert "use --cuda 12.9 (gives PyTorch 2.8.0 cu129" in text
    assert "--cuda 13.0" not in text
    # and the suggestion really works
    check(
        resolve(cuda="12.9", gpu_archs=("7.0",)),
        dict(wheel_variant="cu129", framework_version="2.8.0"),
    )


def test_no_kernels_names_a_release_that_has_them():
    text = failure(cuda="12.1", gpu_archs=("10.0",))
    assert "kernels for compute capability 10.0" in text
    assert "CUDA 12.1 predates Blackwell" in text
    fix = text.split(": use ", 1)[1]
    cuda = fix.split()[1]
    stack = resolve(cuda=cuda, gpu_archs=("10.0",))  # the named values work
    assert f"PyTorch {stack.framework_version} {stack.wheel_variant}" in text


def test_driver_too_old_names_the_needed_driver_and_a_stack_that_fits():
    text = failure(driver="525.60.13", cuda="12.1")
    assert "driver 525.60.13 is older than 530.30.02 needed by CUDA 12.1" in text
    assert "upgrade the driver to >= 530.30.02" in text
    # 12.0.0's image needs only 525.60.13, and a cu126 build runs on it by minor-version
    # compatibility
    assert "use --cuda 12.0 (gives PyTorch 2.5.1 cu121" in text
    assert "minor-version compatibility" in text
    check(
        resolve(driver="525.60.13", cuda="12.0"),
        dict(cuda_version="12.0.0", min_driver="525.60.13", wheel_variant="cu121"),
    )


def test_driver_too_old_for_the_wished_cuda_gets_the_newest_cuda_it_runs():
    text = failure(driver="570.86.10", cuda="12.9")
    assert (
        "driver 570.86.10 is older than 575.57.08 needed by CUDA 12.9" in text
    )  # its only image, 12.9.1
    assert (
        "use --cuda 12.8 (gives PyTorch 2.11.0 cu128, Python 3.14 on nvidia/cuda 12.8.0, driver "
        ">= 570.26)" in text
    )


def test_forward_compat_branch_is_mentioned():
    # 470 is a long-term branch that the 12.x images list in NVIDIA_REQUIRE_CUDA
    # (brand=tesla,driver>=470,driver<471).
    assert "forward compatibility" in failure(driver="470.239.06", cuda="12.1")


def test_pinned_release_with_only_a_cpu_build_is_one_line(monkeypatch):
    m = load_matrix()
    cpu_only = tuple(
        replace(t, variants=tuple(v for v in t.variants if v.cuda is None))
        if t.series == "2.15"
        else t
        for t in m.torch_releases
    )
    matrix = replace(m, torch_releases=cpu_only)
    with pytest.raises(NoCompatibleStack) as err:
        resolve_stack(Request(torch="2.15", today=TODAY), matrix)
    text = err.value.render()
    assert (
        "PyTorch 2.15 has only a CPU build in the data" in text
        and "--cuda cpu" in text
        and "2.14.1" in text
    )


def test_pinned_release_without_that_cuda_major():
    text = failure(torch="2.1", cuda="13.2")
    assert "PyTorch 2.1 has no CUDA 13.x build (it has CUDA 11.8, 12.1)" in text


def test_cuda_without_a_known_driver_floor_or_image():
    text = failure(cuda="13.5")
    assert "no nvidia/cuda image with a known driver floor is in the data for CUDA 13.5" in text
    assert "use --cuda 13.3 (gives PyTorch 2.15.0 cu132" in text


def test_python_not_supported():
    text = failure(torch="2.3", python="3.7")
    assert (
        "Python 3.7 is not supported by PyTorch 2.3 (supported: 3.8, 3.9, 3.10, 3.11, 3.12)" in text
    )


@pytest.mark.parametrize(
    "wishes, fragment",
    [
        (dict(cuda="12.7"), "--cuda 12.7: no CUDA 12.7 release is known"),
        (dict(cuda="abc"), "--cuda 'abc' is not a CUDA version"),
        (dict(driver="x.y"), "--driver 'x.y' is not an NVIDIA driver version"),
        (dict(framework="jax"), "--framework 'jax' is not supported"),
        (dict(torch="1.13"), "--torch 1.13: no PyTorch release 1.13 is known"),
        (dict(torch="2.3", tensorflow="2.15"), "--torch and --tensorflow were both given"),
        (dict(python="three"), "--python 'three' is not a Python version"),
        (dict(gpu_archs=("sm_99",)), "compute capability 9.9 is not known"),
    ],
)
def test_bad_input(wishes, fragment):
    with pytest.raises(BadInput) as err:
        resolve(**wishes)
    assert fragment in err.value.render()


# ---------------------------------------------------------------- 4. the default Python

PYTHON_RULE = [
    # (offered, today, expected): the newest whose X.Y.0 is at least six months old
    (
        ("3.11", "3.12", "3.13", "3.14", "3.15"),
        date(2026, 11, 23),
        "3.14",
    ),  # 3.15.0 is under two months old
    (
        ("3.11", "3.12", "3.13", "3.14", "3.15"),
        date(2027, 4, 1),
        "3.15",
    ),  # exactly six months after 2026-10-01
    (("3.11", "3.12", "3.13", "3.14", "3.15"), date(2027, 3, 31), "3.14"),
    (("3.10", "3.11", "3.12", "3.13", "3.14"), date(2026, 11, 23), "3.14"),
    (("3.9", "3.10", "3.11"), date(2026, 11, 23), "3.11"),
    (
        ("3.15",),
        date(2026, 11, 23),
        "3.15",
    ),  # nothing old enough: the oldest offered, and it says so
]


@pytest.mark.parametrize("offered, today, expected", PYTHON_RULE)
def test_default_python_rule(offered, today, expected):
    py, why = default_python(load_matrix(), offered, today)
    assert py == expected, why


def test_default_python_in_the_stack_and_python_overrides():
    stack = resolve(cuda="cpu")
    assert (stack.framework_version, stack.python) == ("2.15.0", "3.14")
    assert any("at least 6 months old" in r and "3.15 is newer" in r for r in stack.reasons)
    pinned = resolve(cuda="cpu", python="3.15")
    assert pinned.python == "3.15" and any("requested with --python" in r for r in pinned.reasons)


# ---------------------------------------------------------------- 5. the wheelhouse

WHEELS = (
    "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    "torch-2.13.0+cu126-cp310-cp310-manylinux_2_28_x86_64.whl",
    "torch-2.12.1+cpu-cp312-cp312-macosx_14_0_arm64.whl",
    "numpy-2.3.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "tensorflow_cpu-2.20.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "not-a-wheel.txt",
)

WHEELHOUSE_RULE = [
    (dict(cuda="cpu"), dict(framework_version="2.13.0", wheel_variant="cpu", python="3.11")),
    (dict(), dict(framework_version="2.13.0", wheel_variant="cu126", python="3.10", cuda="12.6")),
    (
        dict(driver="550.54.15"),
        dict(framework_version="2.13.0", wheel_variant="cu126", python="3.10", cuda="12.4"),
    ),
    (
        dict(framework="tf", cuda="cpu"),
        dict(framework_version="2.20.0", pip_requirement="tensorflow-cpu==2.20.0", python="3.12"),
    ),
    # a PyPI torch wheel (no +local) is its release's PyPI-default CUDA build, installed from PyPI's
    # name
    (
        dict(wheelhouse=("torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl",)),
        dict(
            framework_version="2.15.0",
            wheel_variant="cu132",
            pip_requirement="torch==2.15.0",
            index_url=None,
            python="3.12",
        ),
    ),
]


@pytest.mark.parametrize(
    "wishes, expected", WHEELHOUSE_RULE, ids=[str(w) for w, _ in WHEELHOUSE_RULE]
)
def test_wheelhouse_rule(wishes, expected):
    wishes = {"wheelhouse": WHEELS, "wheelhouse_dir": "/srv/wheels", **wishes}
    stack = resolve(**wishes)
    check(stack, expected)
    assert any("wheelhouse /srv/wheels" in r for r in stack.reasons)


def test_wheelhouse_without_the_framework_does_not_restrict():
    stack = resolve(
        cuda="cpu",
        wheelhouse=("numpy-2.3.0-cp311-cp311-manylinux_2_28_x86_64.whl",),
        wheelhouse_dir="/srv/w",
    )
    assert stack.framework_version == "2.15.0"
    assert any("holds no PyTorch wheel" in r for r in stack.reasons)


def test_wheelhouse_failure_says_what_it_holds_against_what_is_needed():
    text = failure(cuda="cpu", python="3.12", wheelhouse=WHEELS, wheelhouse_dir="/srv/wheels")
    assert "wheelhouse /srv/wheels holds" in text
    assert (
        "torch 2.13.0+cpu (cp311, manylinux_2_28_x86_64)" in text
        and "torch 2.12.1+cpu (cp312, macosx_14_0_arm64)" in text
    )
    assert "Python 3.12" in text and "Linux x86_64" in text


def test_framework_wheels_reads_names_with_packaging():
    wheels = framework_wheels(WHEELS, "torch")
    assert [(w.version, w.local, w.python, w.linux_x86_64) for w in wheels] == [
        ("2.13.0", "cpu", "3.11", True),
        ("2.13.0", "cu126", "3.10", True),
        ("2.12.1", "cpu", "3.12", False),
    ]


def test_real_wheel_in_opt_wheels():
    from pathlib import Path

    from gpuenv.envs.wheelhouse import wheel_names

    folder = Path("/opt/wheels")
    if not any(folder.glob("torch-2.13.0+cpu-cp311-*.whl")):
        pytest.skip("/opt/wheels holds no torch-2.13.0+cpu cp311 wheel on this machine")
    stack = resolve(cuda="cpu", wheelhouse=wheel_names(folder), wheelhouse_dir=str(folder))
    assert (stack.framework_version, stack.python, stack.wheel_variant) == ("2.13.0", "3.11", "cpu")


def test_missing_wheelhouse_folder_is_bad_input(tmp_path):
    from gpuenv.envs.wheelhouse import wheel_names

    with pytest.raises(BadInput, match="--wheelhouse .*nope: no such folder"):
        wheel_names(tmp_path / "nope")


# ---------------------------------------------------------------- kernels


@pytest.mark.parametrize(
    "cc, archs, ptx, expected",
    [
        ("8.6", ("8.0", "8.6"), None, "sm_86"),
        ("8.9", ("8.0", "8.6"), None, "sm_86"),  # same major, newer minor: binary compatible
        ("9.0", ("8.0", "8.6"), "8.6", "PTX JIT from compute_86"),
        ("9.0", ("8.0", "8.6"), None, None),  # a new major needs its own cubin or PTX
        ("7.5", ("8.0", "9.0"), "9.0", None),  # PTX only runs forward
    ],
)
def test_kernel_coverage(cc, archs, ptx, expected):
    assert kernel_coverage(cc, TorchVariant("cuXY", "12.1", archs, ptx)) == expected
