"""Table-driven resolver tests against the real compatibility data (facts cited in envs/compat.yaml)."""

from __future__ import annotations

import pytest

from gpuenv.compat import load_matrix, version_key as V
from gpuenv.errors import BadInput, NoCompatibleStack
from gpuenv.resolve import Request, kernel_coverage, resolve_stack
from gpuenv.compat import TorchVariant

EXACT = [
    # (request, expected fields)
    (
        Request(cuda="12.1", torch="2.1", python="3.11"),
        dict(framework_version="2.1.2", wheel_variant="cu121", cuda="12.1", cuda_version="12.1.1",
             min_driver="530.30.02", base_image="nvidia/cuda:12.1.1-base-ubuntu22.04",
             index_url="https://download.pytorch.org/whl/cu121", pip_requirement="torch==2.1.2+cu121"),
    ),
    (
        Request(cuda="11.8", torch="2.3.1", python="3.10"),
        dict(framework_version="2.3.1", wheel_variant="cu118", cuda_version="11.8.0", min_driver="520.61.05",
             base_image="nvidia/cuda:11.8.0-base-ubuntu22.04", python="3.10"),
    ),
    (
        Request(cuda="cpu", torch="2.13.0", python="3.11"),
        dict(cuda="cpu", cuda_version=None, min_driver=None, wheel_variant="cpu", pip_requirement="torch==2.13.0+cpu",
             index_url="https://download.pytorch.org/whl/cpu", require_cuda=None),
    ),
    (
        Request(framework="tensorflow", tensorflow="2.15", python="3.11"),
        dict(framework="tensorflow", framework_version="2.15.1", cuda="12.2", cudnn="8.9", wheel_variant=None,
             index_url=None, pip_requirement="tensorflow[and-cuda]==2.15.1"),
    ),
    (
        Request(framework="tf", cuda="cpu", tensorflow="2.16.1"),
        dict(framework="tensorflow", cuda="cpu", pip_requirement="tensorflow-cpu==2.16.1", base_image=None),
    ),
    (
        Request(cuda="12.1.1", torch="2.2", driver="535.104.05", gpu_archs=("sm_86",)),
        dict(cuda="12.1", framework_version="2.2.2", wheel_variant="cu121"),
    ),
]


@pytest.mark.parametrize("request_, expected", EXACT, ids=[str(r) for r, _ in EXACT])
def test_exact_stacks(request_, expected):
    stack = resolve_stack(request_)
    got = stack.to_dict()
    if expected.get("base_image", "x") is None:
        expected = {k: v for k, v in expected.items() if k != "base_image"}
        assert got["base_image"] == load_matrix().cpu_base_image
    for key, value in expected.items():
        assert got[key] == value, f"{key}: {got[key]!r} != {value!r}"
    assert stack.reasons, "every stack explains its choices"


def test_newest_that_fits_with_no_wishes():
    m = load_matrix()
    stack = resolve_stack(Request(driver="999.99"))
    with_gpu = [t for t in m.torch_releases if any(v.cuda for v in t.variants)]
    newest = max(with_gpu, key=lambda t: V(t.series))
    assert stack.framework_version == max(newest.patches, key=V)
    newest_cuda = max((v.cuda for v in newest.variants if v.cuda), key=V)
    assert stack.cuda == newest_cuda
    assert stack.python == max(newest.python, key=V)


@pytest.mark.parametrize("driver", ["450.80.02", "525.60.13", "535.104.05", "550.54.15", "570.86.10"])
def test_never_picks_cuda_newer_than_the_driver_runs(driver):
    m = load_matrix()
    try:
        stack = resolve_stack(Request(driver=driver))
    except NoCompatibleStack as err:
        # only acceptable when no CUDA in the data runs on this driver
        assert all(V(c.min_driver) > V(driver) for c in m.cuda_releases), err
        return
    assert V(stack.min_driver) <= V(driver)
    # and no newer PyTorch release has a build this driver runs
    for t in m.torch_releases:
        if V(t.series) > V(stack.framework_version):
            assert all(V(m.cuda_release(v.cuda).min_driver) > V(driver) for v in t.variants if v.cuda), t.series


def test_driver_too_old_names_the_needed_driver_and_a_cuda_that_fits():
    with pytest.raises(NoCompatibleStack) as err:
        resolve_stack(Request(driver="525.60.13", cuda="12.1"))
    text = err.value.render()
    assert "driver 525.60.13 is older than 530.30.02 needed by CUDA 12.1" in text
    assert "upgrade the driver to >= 530.30.02" in text
    assert "--cuda 11.8" in text
    assert "minor-version compatibility" in text  # 525.60.13 is the 12.x floor: say why gpuenv does not lean on it


def test_forward_compat_branch_is_mentioned():
    # 470 is a long-term branch that the 12.x images list in NVIDIA_REQUIRE_CUDA (brand=tesla,driver>=470,driver<471).
    with pytest.raises(NoCompatibleStack, match="forward compatibility"):
        resolve_stack(Request(driver="470.239.06", cuda="12.1"))


def test_no_kernels_for_the_gpu():
    with pytest.raises(NoCompatibleStack) as err:
        resolve_stack(Request(cuda="12.1", gpu_archs=("10.0",)))
    assert "kernels for compute capability 10.0" in err.value.render()
    assert "--cuda 12.8 or newer" in err.value.render()


def test_blackwell_gets_a_cu128_or_newer_build():
    stack = resolve_stack(Request(gpu_archs=("sm_100",), driver="580.65.06"))
    assert V(stack.cuda) >= V("12.8")
    assert any(a.startswith("10.") for a in stack.gpu_archs)


def test_pinned_release_without_that_cuda():
    with pytest.raises(NoCompatibleStack, match=r"PyTorch 2.1 has no build for CUDA 12.4 \(it has CUDA 11.8, 12.1\)"):
        resolve_stack(Request(torch="2.1", cuda="12.4"))


def test_python_not_supported():
    with pytest.raises(NoCompatibleStack, match=r"Python 3.7 is not supported by PyTorch 2.3"):
        resolve_stack(Request(torch="2.3", python="3.7"))


@pytest.mark.parametrize(
    "request_, fragment",
    [
        (Request(cuda="12.7"), "--cuda 12.7: no CUDA 12.7 release is known"),
        (Request(cuda="abc"), "--cuda 'abc' is not a CUDA version"),
        (Request(driver="x.y"), "--driver 'x.y' is not an NVIDIA driver version"),
        (Request(framework="jax"), "--framework 'jax' is not supported"),
        (Request(torch="1.13"), "--torch 1.13: no PyTorch release 1.13 is known"),
        (Request(torch="2.3", tensorflow="2.15"), "--torch and --tensorflow were both given"),
        (Request(python="three"), "--python 'three' is not a Python version"),
        (Request(gpu_archs=("sm_99",)), "compute capability 9.9 is not known"),
    ],
)
def test_bad_input(request_, fragment):
    with pytest.raises(BadInput) as err:
        resolve_stack(request_)
    assert fragment in err.value.render()


@pytest.mark.parametrize(
    "cc, archs, ptx, expected",
    [
        ("8.6", ("8.0", "8.6"), None, "sm_86"),
        ("8.9", ("8.0", "8.6"), None, "sm_86"),      # same major, newer minor: binary compatible
        ("9.0", ("8.0", "8.6"), "8.6", "PTX JIT from compute_86"),
        ("9.0", ("8.0", "8.6"), None, None),          # a new major needs its own cubin or PTX
        ("7.5", ("8.0", "9.0"), "9.0", None),         # PTX only runs forward
    ],
)
def test_kernel_coverage(cc, archs, ptx, expected):
    assert kernel_coverage(cc, TorchVariant("cuXY", "12.1", archs, ptx)) == expected
