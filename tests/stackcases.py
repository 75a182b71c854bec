"""Stacks written out by hand, shared by the lock and image tests.

Hand-written on purpose: the lock and image tests must not move when the compatibility data
gains a release (the resolver has its own table-driven tests on the real data).
"""

from __future__ import annotations

from gpuenv.stack import Stack

TORCH_CU121 = Stack(
    cuda="12.1",
    cuda_version="12.1.1",
    min_driver="530.30.02",
    base_image="nvidia/cuda:12.1.1-base-ubuntu22.04",
    python="3.11",
    framework="torch",
    framework_version="2.5.1",
    wheel_variant="cu121",
    index_url="https://download.pytorch.org/whl/cu121",
    pip_requirement="torch==2.5.1+cu121",
)
TORCH_CPU = Stack(
    cuda="cpu",
    cuda_version=None,
    min_driver=None,
    base_image="ubuntu:22.04",
    python="3.11",
    framework="torch",
    framework_version="2.13.0",
    wheel_variant="cpu",
    index_url="https://download.pytorch.org/whl/cpu",
    pip_requirement="torch==2.13.0+cpu",
)
TF_CUDA = Stack(
    cuda="12.2",
    cuda_version="12.2.2",
    min_driver="535.104.05",
    base_image="nvidia/cuda:12.2.2-base-ubuntu22.04",
    python="3.11",
    framework="tensorflow",
    framework_version="2.15.1",
    wheel_variant=None,
    index_url=None,
    pip_requirement="tensorflow[and-cuda]==2.15.1",
)
TF_CPU = Stack(
    cuda="cpu",
    cuda_version=None,
    min_driver=None,
    base_image="ubuntu:22.04",
    python="3.11",
    framework="tensorflow",
    framework_version="2.15.1",
    wheel_variant=None,
    index_url=None,
    pip_requirement="tensorflow-cpu==2.15.1",
)
