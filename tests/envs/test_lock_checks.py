"""Checks on a finished lock, fed with recorded lock contents: hashes on every line, no CPU
fallback."""

from __future__ import annotations

import dataclasses

import pytest
from lockcases import CPU_TORCH_WHEEL, TF_CPU, TF_CUDA, TORCH_CPU, TORCH_CU121

from gpuenv.envs.locking import (
    LockedPackage,
    cpu_only_problem,
    read_requirements_lock,
    wheelhouse_has_framework,
)
from gpuenv.errors import DataError


def pip(name: str, version: str, platform: str = "linux-64") -> LockedPackage:
    return LockedPackage(name=name, version=version, manager="pip", platform=platform)


CASES = [
    # (stack, lock entries, expected problem fragment or None)
    (TORCH_CU121, [pip("torch", "2.5.1+cu121"), pip("nvidia-cudnn-cu12", "9.1.0.70")], None),
    (
        TORCH_CU121,
        [pip("torch", "2.5.1+cu121")],
        None,
    ),  # the +cu121 build bundles its CUDA libraries
    (TORCH_CU121, [pip("torch", "2.5.1+cpu")], "is the CPU build"),
    (TORCH_CU121, [pip("torch", "2.5.1+cu118")], "is not the cu121 build"),
    (
        TORCH_CU121,
        [pip("torch", "2.5.1"), pip("filelock", "3.16.1")],
        "comes without CUDA libraries",
    ),
    (TORCH_CU121, [pip("filelock", "3.16.1")], "torch is not in the lock"),
    (
        TORCH_CU121,
        [pip("torch", "2.5.1+cu121", "linux-64"), pip("torch", "2.5.1", "linux-aarch64")],
        "linux-aarch64",
    ),
    (TF_CUDA, [pip("tensorflow", "2.15.1"), pip("nvidia-cublas-cu12", "12.2.5.6")], None),
    (TF_CUDA, [pip("tensorflow", "2.15.1")], "comes without CUDA libraries"),
    # NVML's bindings (locked for the validation suite) are not CUDA libraries
    (
        TF_CUDA,
        [pip("tensorflow", "2.15.1"), pip("nvidia-ml-py", "13.615.71")],
        "comes without CUDA libraries",
    ),
    (
        TF_CUDA,
        [pip("tensorflow-cpu", "2.15.1"), pip("tensorflow", "2.15.1")],
        "tensorflow-cpu is in the lock",
    ),
    (
        TF_CUDA,
        [
            pip("tensorflow", "2.15.1"),
            LockedPackage("cuda-cudart", "12.2.140", "conda", "linux-64"),
        ],
        None,
    ),
    (TORCH_CPU, [pip("torch", "2.13.0+cpu")], None),
    (TF_CPU, [pip("tensorflow-cpu", "2.15.1")], None),
]


@pytest.mark.parametrize("stack, packages, fragment", CASES)
def test_cpu_only_problem(stack, packages, fragment):
    platforms = sorted({p.platform for p in packages})
    problem = cpu_only_problem(stack, packages, platforms)
    if fragment is None:
        assert problem is None
    else:
        assert problem is not None and fragment in problem


def test_requirements_lock_without_a_hash_is_refused(tmp_path):
    lock = tmp_path / "requirements.lock.txt"
    lock.write_text(
        "--index-url https://pypi.org/simple\n\nfilelock==3.16.1 \\\n    "
        "--hash=sha256:2082e5703d51fbf98ea75855d9d5527e33d8ff23099bec374a134febee6946b0\n    # "
        "via torch\ntorch==2.13.0+cpu\n    # via -r requirements.in\n"
    )
    with pytest.raises(DataError, match="torch==2.13.0\\+cpu has no hash"):
        read_requirements_lock(lock)


def test_requirements_lock_is_read_with_versions(tmp_path):
    lock = tmp_path / "requirements.lock.txt"
    lock.write_text(
        "--extra-index-url https://download.pytorch.org/whl/cpu\n"
        "Jinja2==3.1.6 \\\n    "
        "--hash=sha256:85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67\n"
        "torch==2.13.0+cpu \\\n    "
        "--hash=sha256:6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b\n    # "
        "via -r requirements.in\n"
    )
    assert [(p.name, p.version) for p in read_requirements_lock(lock)] == [
        ("jinja2", "3.1.6"),
        ("torch", "2.13.0+cpu"),
    ]


def test_wheelhouse_has_framework_matches_exact_build_python_and_platform(tmp_path):
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    (tmp_path / "not-a-wheel.txt").write_bytes(b"")
    assert wheelhouse_has_framework(tmp_path, TORCH_CPU, ["linux-64"])
    assert not wheelhouse_has_framework(tmp_path, TORCH_CPU, ["linux-64", "linux-aarch64"])
    assert not wheelhouse_has_framework(
        tmp_path, dataclasses.replace(TORCH_CPU, python="3.12"), ["linux-64"]
    )
    assert not wheelhouse_has_framework(tmp_path, TORCH_CU121, ["linux-64"])
    assert not wheelhouse_has_framework(None, TORCH_CPU, ["linux-64"])


def test_the_machines_wheelhouse_holds_the_cpu_build():
    if not CPU_TORCH_WHEEL.is_file():
        pytest.skip(f"{CPU_TORCH_WHEEL} is not on this machine")
    assert wheelhouse_has_framework(CPU_TORCH_WHEEL.parent, TORCH_CPU, ["linux-64"])


@pytest.mark.parametrize(
    ("stack", "backend"),
    [
        (TORCH_CU121, "conda-lock"),
        (TF_CUDA, "conda-lock"),
        (TORCH_CPU, "conda-lock"),
        (TORCH_CU121, "uv"),
    ],
)
def test_gpu_stacks_lock_for_aarch64_too_on_both_backends(stack, backend, tmp_path):
    """The pip part of a conda lock is locked by uv per platform (with its platform_machine
    markers), so x86_64-only nvidia-* wheels cannot enter an aarch64 lock: no backend refuses it."""
    from gpuenv.envs.locking import plan_lock

    team = tmp_path / "team.yml"
    team.write_text("pip: []\n")
    platforms = ["linux-64", "linux-aarch64"]
    assert plan_lock(
        stack, backend=backend, platforms=platforms, team_file=team
    ).platforms == tuple(platforms)
