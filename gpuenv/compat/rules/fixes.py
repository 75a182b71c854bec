"""The fixes a refusal offers: the exact options to change, each re-resolved before it is printed,
and the `invoke resolve` command line of a request."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

from gpuenv.compat.matrix import Matrix
from gpuenv.compat.rules.request import FRAMEWORK_NAMES, Request
from gpuenv.errors import GpuenvError
from gpuenv.stack import Stack


def describe(stack: Stack) -> str:
    """The one-line summary of a stack a fix prints after "gives"."""
    name = FRAMEWORK_NAMES[stack.framework]
    build = stack.wheel_variant or ("CPU" if stack.is_cpu else f"CUDA {stack.framework_cuda}")
    where = (
        ""
        if stack.is_cpu
        else f" on nvidia/cuda {stack.cuda_version}, driver >= {stack.min_driver}"
    )
    return f"{name} {stack.framework_version} {build}, Python {stack.python}{where}"


#: The whole resolver, which a fix re-runs with some wishes changed. Its caller passes it in
#: (gpuenv.compat.resolve gives resolve_stack), so the rules never import it: no cycle.
Resolver = Callable[[Request, Matrix], Stack]


@dataclass(frozen=True)
class FixSearch:
    """The fixes a refusal of `request` can offer, each re-resolved by `resolve` before it is
    printed, so a fix is never a guess."""

    request: Request
    matrix: Matrix
    resolve: Resolver

    def suggest(self, **changes: object) -> Stack | None:
        """The stack that the request gives with some wishes changed, or None."""
        try:
            return self.resolve(replace(self.request, explain=False, **changes), self.matrix)  # type: ignore[arg-type]
        except GpuenvError:
            return None

    def fix(self, **changes: object) -> tuple[str, Stack] | None:
        """A fix as the exact options to change and what resolving exactly those gives, or None
        when they fail too. Only for the user's own request: the re-resolutions behind a fix
        (explain=False) suggest nothing themselves, so fixes never recurse."""
        if not self.request.explain:
            return None
        stack = self.suggest(**changes)
        if stack is None:
            return None
        return f"{_options_text(changes, self.request)} (gives {describe(stack)})", stack

    def first(self, tries: Iterable[dict[str, object]]) -> tuple[str, Stack] | None:
        """The first of `tries` that gives a stack, as a fix."""
        for changes in tries:
            found = self.fix(**changes)
            if found is not None:
                return found
        return None


_OPTION_NAMES = {"gpu_archs": "--gpu-arch", "strict_driver": "--strict-driver"}


def drop_pin(request: Request) -> dict[str, object]:
    """Changes that drop the --torch/--tensorflow pin and keep its framework (else it would fall
    back to PyTorch)."""
    pinned = "torch" if request.torch else "tensorflow" if request.tensorflow else None
    if pinned is None:
        return {}
    return (
        {pinned: None}
        if request.framework or pinned == "torch"
        else {"framework": pinned, pinned: None}
    )


def _options_text(changes: dict[str, object], request: Request | None = None) -> str:
    """'use --cuda 12.2', 'drop --cuda', 'use --framework tensorflow and drop --tensorflow': exactly
    the options a fix changes. A value that came from a config file, a variable or a capture is
    changed there instead ('set gpuenv.python: "3.11" in invoke.yaml', 'remove gpuenv.torch from
    invoke.yaml'): a fix never names an option nobody typed."""
    elsewhere = [
        text
        for key, value in sorted(changes.items())
        if request and (text := request.change(key, value))
    ]
    changes = {k: v for k, v in changes.items() if not (request and request.change(k, v))}
    options = _flags_text(changes) if changes else ""
    return " and ".join(([options] if options else []) + elsewhere)


def _flags_text(changes: dict[str, object]) -> str:
    """The command-line part of a fix: 'use --cuda 12.2 and --python 3.11', 'drop --torch'."""
    parts = []
    dropped = lambda kv: kv[1] is None or kv[1] is False or kv[1] == ()  # noqa: E731
    for key, value in sorted(changes.items(), key=dropped):  # what to use first, then what to drop
        flag = _OPTION_NAMES.get(key, "--" + key.replace("_", "-"))
        if value is None or value is False or value == ():
            parts.append(f"drop {flag}")
        elif value is True:
            parts.append(flag)
        else:
            parts.append(f"{flag} {','.join(value) if isinstance(value, tuple) else value}")
    text = " and ".join(parts)
    return text if text.startswith("drop ") else "use " + text


def join_fixes(fixes: Iterable[tuple[str, Stack] | None], fallback: str) -> str:
    """Up to two distinct re-resolved fixes joined with 'or' (a second one only when it gives
    another stack)."""
    out: list[tuple[str, Stack]] = []
    for found in fixes:
        if found is not None and all(found[1] != s for _, s in out):
            out.append(found)
    return ", or ".join(text for text, _ in out[:2]) if out else fallback


def cuda_tries(minors: Iterable[str]) -> list[dict[str, object]]:
    return [{"cuda": m} for m in minors]


def command_for(request: Request) -> str:
    """The `invoke resolve` command line that asks exactly for this request (for reasons that name a
    command)."""
    parts = ["invoke resolve"]
    if request.driver:
        parts.append(f"--driver {request.driver}")
    for key in ("cuda", "framework", "torch", "tensorflow", "python"):
        value = getattr(request, key)
        if value:
            parts.append(f"--{key} {value}")
    if request.gpu_archs:
        parts.append(f"--gpu-arch {','.join(request.gpu_archs)}")
    if request.platform and request.platform != "linux-64":
        parts.append(f"--platform {request.platform}")
    if request.strict_driver:
        parts.append("--strict-driver")
    if request.wheelhouse_dir:
        parts.append(f"--wheelhouse {request.wheelhouse_dir}")
    return " ".join(parts)
