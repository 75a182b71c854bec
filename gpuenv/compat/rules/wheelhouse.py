"""The wheelhouse rule: with a folder of wheels, only the builds its framework wheels serve.

The wheels' names are read into builds by gpuenv.compat.rules.wheels, imported only when a
wheelhouse is given (its dataclass and patterns are not made at every resolve)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.rules.frameworks import Candidate, version_list
from gpuenv.compat.rules.wishes import Wishes
from gpuenv.errors import NoCompatibleStack

if TYPE_CHECKING:
    from gpuenv.compat.rules.wheels import WheelBuild


def _wheel_serves(w: WheelBuild, c: Candidate, framework: str) -> bool:
    if not w.linux_x86_64 or w.version != c.framework_version:
        return False
    if w.python is not None and w.python != c.python:
        return False
    if framework == "torch":
        assert c.variant is not None
        return w.local == c.variant.name
    return (w.framework == "tensorflow-cpu") == (c.cuda is None)


def _pypi_torch_candidates(
    matrix: Matrix, c: Candidate, wheels: list[WheelBuild]
) -> list[Candidate]:
    """A PyPI torch wheel (no +local) is the build of its release's pypi_default_cuda."""
    out = []
    for w in wheels:
        if (
            w.local is None
            and w.linux_x86_64
            and w.version == c.framework_version
            and (w.python in (None, c.python))
        ):
            release = next(t for t in matrix.torch_releases if c.framework_version in t.patches)
            if c.variant is not None and release.pypi_default_cuda == c.variant.cuda:
                out.append(replace(c, from_pypi=True))
    return out


def narrow_to_wheelhouse(cands: list[Candidate], w: Wishes) -> list[Candidate]:
    """With a wheelhouse that holds the framework, only the releases, builds and Pythons it holds;
    a note for the reasons either way."""
    if w.request.wheelhouse is None:
        return cands
    from gpuenv.compat.rules.wheels import framework_wheels

    folder = w.request.wheelhouse_dir or "the wheelhouse"
    wheels = framework_wheels(w.request.wheelhouse or (), w.framework)
    if not wheels:
        w.notes.append(
            f"wheelhouse {folder} holds no {w.name} wheel: the framework comes from its index"
        )
        return cands
    if w.python:
        cands = [c for c in cands if c.python == w.python] or cands
    kept = [c for c in cands if any(_wheel_serves(wheel, c, w.framework) for wheel in wheels)]
    if w.framework == "torch":
        kept += [p for c in cands for p in _pypi_torch_candidates(w.matrix, c, wheels)]
    if not kept:
        holds = "; ".join(wheel.describe() for wheel in wheels)
        wanted = version_list(c.python for c in cands)
        versions = version_list(c.framework_version for c in cands)
        raise NoCompatibleStack(
            f"wheelhouse {folder} holds {holds}, but {w.what} needs one of {versions} for Python "
            f"{wanted} on Linux x86_64",
            fix="add the wheel, or pin the release and Python the folder holds "
            "(--torch/--tensorflow, --python)",
        )
    held = ", ".join(sorted({wheel.describe() for wheel in wheels}))
    w.notes.append(
        f"wheelhouse {folder}: only the {w.name} builds it holds ({held}) are considered"
    )
    return kept
