"""The resolver shares work that cannot differ: a matrix's candidate builds are made once and
shared by the re-resolved fixes, and a build whose driver floor the GPUs do not raise keeps its
placement (no copy). The stacks are the ones the rules give (test_resolve*.py); these tests say
the work is shared, and only where it may be."""

from __future__ import annotations

import dataclasses

from gpuenv.compat.matrix import load_matrix
from gpuenv.compat.resolve import Request, resolve_stack
from gpuenv.compat.rules.cuda import apply_cuda_rule, keep_cpu_or_gpu, place_on_driver
from gpuenv.compat.rules.frameworks import Candidate, framework_candidates
from gpuenv.compat.rules.gpus import check_kernels
from gpuenv.compat.rules.wishes import read_wishes


def test_a_matrix_candidates_are_made_once_and_shared():
    matrix = load_matrix()
    first = framework_candidates(matrix, "torch", None)
    second = framework_candidates(matrix, "torch", None)
    assert first == second and first is not second
    assert all(a is b for a, b in zip(first, second))  # the same frozen builds
    first.clear()  # a caller's list is its own
    assert framework_candidates(matrix, "torch", None) == second


def test_another_matrix_or_wish_has_its_own_candidates():
    matrix = load_matrix()
    fewer = dataclasses.replace(matrix, torch_releases=matrix.torch_releases[:1])
    everything = framework_candidates(matrix, "torch", None)
    one_release = framework_candidates(fewer, "torch", None)
    assert 0 < len(one_release) < len(everything)
    assert {c.framework_version for c in one_release} == {matrix.torch_releases[0].patches[-1]}
    series = matrix.torch_releases[-1].series
    pinned = framework_candidates(matrix, "torch", series)
    assert pinned and {c.framework_version.rsplit(".", 1)[0] for c in pinned} == {series}
    assert framework_candidates(matrix, "tensorflow", None)[0].tf is not None


def placed(request: Request):
    """The candidates and wishes of `request` up to the kernel rule."""
    matrix = load_matrix()
    w = read_wishes(request, matrix, resolve=resolve_stack)
    cands = framework_candidates(matrix, w.framework, w.pin, w.platform)
    for step in (keep_cpu_or_gpu, apply_cuda_rule, place_on_driver):
        cands = step(cands, w)
    return cands, w


def test_builds_the_gpus_do_not_raise_keep_their_placement():
    cands, w = placed(Request(driver="575.51.03", cuda="12.8", gpu_archs=("8.0",)))
    kept = check_kernels(cands, w)
    assert kept and all(any(k is c for c in cands) for k in kept)


def test_a_raised_driver_floor_is_a_new_placement():
    """A Blackwell Ultra GPU (10.3) raises CUDA 12.8 builds' floor (its driver branch, PTX JIT)."""
    cands, w = placed(Request(cuda="12.8", gpu_archs=("10.3",)))
    kept = check_kernels(cands, w)
    raised = [k for k in kept if k.placement.min_driver != _floor(cands, k)]
    assert raised, "expected a floor above the image's"
    assert all(not any(r is c for c in cands) for r in raised)


def _floor(cands, k) -> str:
    (same,) = {
        c.placement.min_driver
        for c in cands
        if (c.framework_version, c.python, c.variant) == (k.framework_version, k.python, k.variant)
    }
    return same


def test_placed_is_replace_for_every_field():
    """Candidate.placed spells out dataclasses.replace (for speed): each field of a build with no
    default value left is carried over, and a field added to Candidate must be added here."""
    matrix = load_matrix()
    torch_build = next(c for c in framework_candidates(matrix, "torch", None) if c.cuda)
    tf_release = matrix.tensorflow_releases[0]
    values = {
        "framework_version": "9.9.9",
        "python": "3.99",
        "cuda": torch_build.cuda,
        "variant": torch_build.variant,
        "tf": tf_release,
        "from_pypi": True,
        "placement": object(),
        "platform": "linux-aarch64",
    }
    assert set(values) == {f.name for f in dataclasses.fields(Candidate)}
    build = Candidate(**values)
    for f in dataclasses.fields(Candidate):  # none is its default: a field left out would show
        assert getattr(build, f.name) != f.default
    placement = placed(Request(cuda="12.8"))[0][0].placement
    assert build.placed(placement) == dataclasses.replace(build, placement=placement)
    assert build.placed(placement).placement is placement
