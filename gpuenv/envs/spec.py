"""Render the environment specs (environment.yml) from a stack: pure functions of their inputs.

Three texts come out of here, each tested on its output:
- `render_environment`: the spec conda-lock locks. conda-forge gives Python and pip; pip gives
  the framework build pinned by the stack. The framework's wheel index is declared under
  `pip-repositories`, the key conda-lock reads (an `--extra-index-url` line would not parse).
- `render_export`: the environment.yml a colleague runs with conda or mamba. conda ignores
  `pip-repositories`, so there the index goes into the pip section as `--extra-index-url`.
- `render_virtual_packages`: the virtual packages of the target machines, so a GPU-less host
  locks the CUDA builds of the stack.

The team file and a received environment.yml are parsed here too (`parse_team_file`,
`parse_environment_file`): every mistake is a one-line `BadInput` naming file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from gpuenv.errors import BadInput
from gpuenv.stack import Stack
from validate import REQUIREMENTS as VALIDATE_REQUIREMENTS

CHANNELS = ("conda-forge", "nodefaults")
#: conda subdirs gpuenv locks for (the images are Linux; aarch64 for Grace/Jetson-class servers).
PLATFORMS = ("linux-64", "linux-aarch64")
DEFAULT_PLATFORMS = ("linux-64",)
#: conda subdir -> CPU architecture name uv and the manylinux tags use.
PLATFORM_ARCH = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}

#: glibc of the base images' distributions (Ubuntu's libc6 package: focal 2.31, jammy 2.35,
#: noble 2.39). conda-lock's own default, 2.28, is the floor for anything else.
GLIBC_BY_DISTRO = {"ubuntu20.04": "2.31", "ubuntu22.04": "2.35", "ubuntu24.04": "2.39"}
DEFAULT_GLIBC = "2.28"

#: pip options that name a package source; in a spec for conda-lock they become pip-repositories.
_INDEX_OPTIONS = ("--extra-index-url", "--index-url", "-i")
#: conda MatchSpec in the forms environment.yml uses: "numpy", "numpy>=1.26,<2", "numpy 1.26.*",
#: "numpy=1.26=py311*", "conda-forge::numpy". conda-lock's parser checks the rest when locking.
_CONDA_SPEC = re.compile(
    r"^(?:[A-Za-z0-9_.-]+::)?[A-Za-z0-9_][A-Za-z0-9_.-]*"
    r"(?:\s*(?:==|=|>=|<=|!=|~=|>|<)?\s*[A-Za-z0-9_.*+!,|<>=~-]+(?:\s+[A-Za-z0-9_.*+-]+)?)?"
    r"(?:\[[^\]]+\])?$"
)
#: Returns why a conda spec is invalid, or None.
CondaCheck = Callable[[str], "str | None"]
_TEAM_KEYS = ("conda", "pip", "pip-repositories")
_ENV_KEYS = (
    "name",
    "channels",
    "dependencies",
    "platforms",
    "pip-repositories",
    "variables",
    "prefix",
    "category",
    "allow-pypi-requests",
)


@dataclass(frozen=True)
class Packages:
    """Package lines of a spec: conda MatchSpecs, pip requirements, and extra pip indexes."""

    conda: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    pip_repositories: tuple[str, ...] = ()
    #: entry -> "file:line" where it was written, for messages about it
    where: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class EnvironmentFile:
    """An environment.yml received from a colleague, normalised for conda-lock."""

    name: str | None
    channels: tuple[str, ...]
    packages: Packages
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class Pinned:
    """Exact versions read from a lock, for the export: conda `name=version=build`, pip
    `name==version`."""

    conda: tuple[str, ...] = ()
    pip: tuple[str, ...] = ()
    platform: str = "linux-64"


@dataclass
class _Source:
    """The file being parsed, for `file:line:` messages."""

    name: str
    conda_check: CondaCheck | None = None

    def fail(self, node: yaml.Node | None, message: str, fix: str) -> BadInput:
        line = node.start_mark.line + 1 if node is not None else 1
        return BadInput(f"{self.name}:{line}: {message}", fix=fix)


# ---------------------------------------------------------------- rendering


def glibc_for(stack: Stack) -> str:
    """The glibc of the stack's base image, which bounds the manylinux wheels it can install."""
    image = stack.base_image.replace(":", "").replace("-", "")
    for distro, glibc in GLIBC_BY_DISTRO.items():
        if distro in image:
            return glibc
    return DEFAULT_GLIBC


def environment_name(stack: Stack) -> str:
    return f"gpuenv-{stack.stack_id}"


def conda_name(line: str) -> str:
    """The package name of a conda spec line: "conda-forge::numpy >=1.26" -> "numpy"."""
    return re.split(r"[\s=<>!~\[]", line.split("::")[-1], maxsplit=1)[0]


def framework_packages(stack: Stack) -> set[str]:
    """The pip names that install the stack's framework, in any build: the team may not add
    these."""
    names: set[str] = {canonicalize_name(Requirement(stack.pip_requirement).name)}
    if stack.framework == "tensorflow":
        names |= {"tensorflow", "tensorflow-cpu", "tf-nightly"}
    else:
        names |= {"torch"}
    return names


#: Installed beside every framework build: torch does not depend on numpy, yet warns at every
#: import ("Failed to initialize NumPy") without it, and nearly every training script uses it.
FRAMEWORK_COMPANIONS = ("numpy",)

#: The validation suite runs inside every environment gpuenv renders (`invoke validate`).
SUITE_REQUIREMENTS = VALIDATE_REQUIREMENTS


def merge_packages(stack: Stack, team: Packages | None = None) -> Packages:
    """The stack's own lines plus the team's; the team may not re-pin what the stack decides."""
    team = team or Packages()
    for line in team.conda:
        if conda_name(line) in ("python", "pip"):
            raise BadInput(
                f"{team.where.get(line, 'team file')}: {line!r} pins {conda_name(line)}",
                fix="remove it: the stack decides Python and pip",
            )
    for line in team.pip:
        if canonicalize_name(Requirement(line).name) in framework_packages(stack):
            raise BadInput(
                f"{team.where.get(line, 'team file')}: {line!r} pins the framework",
                fix="remove it: the stack decides the framework build (use --torch/--tensorflow)",
            )
    conda = (f"python={stack.python}", "pip", *team.conda)
    named = {conda_name(c) for c in team.conda} | {
        canonicalize_name(Requirement(p).name) for p in team.pip
    }
    companions = tuple(c for c in FRAMEWORK_COMPANIONS if c not in named)  # the team's own pin wins
    pip = (stack.pip_requirement, *companions, *SUITE_REQUIREMENTS, *team.pip)
    repos = _unique(([stack.index_url] if stack.index_url else []) + list(team.pip_repositories))
    return Packages(conda=conda, pip=pip, pip_repositories=tuple(repos))


def render_environment(
    stack: Stack, team: Packages | None = None, platforms: Iterable[str] = DEFAULT_PLATFORMS
) -> str:
    """The environment.yml gpuenv locks for `stack` (conda part by py-rattler, pip part by uv), with
    the team's packages merged in."""
    packages = merge_packages(stack, team)
    header = (
        f"# Rendered by gpuenv for the stack {stack.stack_id} (CUDA {stack.cuda}, "
        f"{stack.framework} {stack.framework_version}).\n"
        "# Do not edit: change envs/team.yml and run `invoke lock`.\n"
    )
    return header + _dump_environment(environment_name(stack), CHANNELS, packages, tuple(platforms))


def render_environment_file(received: EnvironmentFile, platforms: Iterable[str]) -> str:
    """A received environment.yml in the form conda-lock reads (index options ->
    pip-repositories)."""
    header = "# Normalised by gpuenv from a received environment.yml for conda-lock.\n"
    channels = received.channels or CHANNELS
    return header + _dump_environment(
        received.name or "gpuenv", channels, received.packages, tuple(platforms)
    )


def render_export(
    stack: Stack, packages: Packages, pinned: Pinned | None = None, channels: Sequence[str] = ()
) -> str:
    """An environment.yml for `conda env create` / `mamba env create`: pinned when a lock exists.

    The pip section carries the index lines pip needs (conda passes them to pip as a
    requirements file); without a lock the spec's own lines are written unpinned.
    """
    if pinned is not None:
        conda = pinned.conda or tuple(packages.conda)
        pip = pinned.pip or tuple(packages.pip)
        origin = f"pinned from the gpuenv lock of {stack.stack_id} ({pinned.platform})"
    else:
        conda, pip = packages.conda, packages.pip
        origin = f"not pinned: no lock of {stack.stack_id} yet (run `invoke lock`)"
    index_lines = [f"--extra-index-url {url}" for url in packages.pip_repositories]
    data: dict[str, Any] = {
        "name": environment_name(stack),
        # the channels the lock was solved from (a file:// channel stays one), else conda-forge
        "channels": [*channels, "nodefaults"] if channels else list(CHANNELS),
        "dependencies": [*conda, {"pip": [*index_lines, *pip]}],
    }
    header = (
        f"# Exported by gpuenv: {origin}.\n# Use: conda env create -f THIS_FILE (or mamba env "
        "create -f THIS_FILE)\n"
    )
    return header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def render_virtual_packages(stack: Stack, platforms: Iterable[str]) -> str:
    """conda-lock's virtual-packages file for the machines the stack's image runs on.

    `__cuda` is the CUDA the driver must run (absent for a CPU stack, so no CUDA build is
    chosen); `__glibc` is the base image's, so no wheel needs a newer glibc than it has.
    """
    subdirs: dict[str, Any] = {}
    for platform in platforms:
        packages = {
            "__unix": "0",
            "__linux": "5.10",
            "__glibc": glibc_for(stack),
            "__archspec": f"1 {PLATFORM_ARCH[platform]}",
        }
        if not stack.is_cpu:
            packages["__cuda"] = stack.cuda
        subdirs[platform] = {"packages": packages}
    return yaml.safe_dump({"subdirs": subdirs}, sort_keys=False)


def _dump_environment(
    name: str, channels: Iterable[str], packages: Packages, platforms: tuple[str, ...]
) -> str:
    data: dict[str, Any] = {"name": name, "channels": list(channels), "platforms": list(platforms)}
    if packages.pip_repositories:
        data["pip-repositories"] = list(packages.pip_repositories)
    deps: list[Any] = list(packages.conda)
    if packages.pip:
        deps.append({"pip": list(packages.pip)})
    data["dependencies"] = deps
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# ---------------------------------------------------------------- parsing (with file and line)


def check_platforms(values: Iterable[str], source: str = "--platform") -> tuple[str, ...]:
    """Known conda subdirs only, in the order given; the default when none are given."""
    out = []
    for value in values:
        if value not in PLATFORMS:
            raise BadInput(
                f"{source}: unknown platform {value!r}", fix=f"use one of {', '.join(PLATFORMS)}"
            )
        out.append(value)
    return tuple(_unique(out)) or DEFAULT_PLATFORMS


def parse_team_file(text: str, name: str, conda_check: CondaCheck | None = None) -> Packages:
    """The team's extra packages: `conda:` MatchSpecs, `pip:` requirements, `pip-repositories:`
    URLs.

    `conda_check` is conda-lock's MatchSpec check (`condalock.conda_spec_problem`), passed in so
    this module stays free of conda-lock; without it a syntax check catches the gross mistakes.
    """
    src = _Source(name, conda_check)
    root = _compose(text, src)
    if root is None:
        return Packages()
    mapping = _mapping(root, src, "the team file")
    for key, node in _keys(root).items():
        if key not in _TEAM_KEYS:
            raise src.fail(node, f"unknown key {key!r}", f"use only {', '.join(_TEAM_KEYS)}")
    conda_entries = _strings(mapping.get("conda"), src, "conda")
    pip_entries = _strings(mapping.get("pip"), src, "pip")
    conda = tuple(_check_conda(v, n, src) for v, n in conda_entries)
    pip = tuple(_check_pip(v, n, src) for v, n in pip_entries)
    repos = tuple(
        _check_url(v, n, src)
        for v, n in _strings(mapping.get("pip-repositories"), src, "pip-repositories")
    )
    where = {v: f"{name}:{n.start_mark.line + 1}" for v, n in conda_entries + pip_entries}
    return Packages(conda=conda, pip=pip, pip_repositories=repos, where=where)


def parse_environment_file(
    text: str, name: str, conda_check: CondaCheck | None = None
) -> EnvironmentFile:
    """A conda environment.yml; pip `--extra-index-url`/`--index-url` lines become
    pip-repositories."""
    src = _Source(name, conda_check)
    root = _compose(text, src)
    if root is None:
        raise BadInput(
            f"{name}:1: the file is empty", fix="give an environment.yml with a dependencies list"
        )
    mapping = _mapping(root, src, "an environment.yml")
    for key, node in _keys(root).items():
        if key not in _ENV_KEYS:
            raise src.fail(node, f"unknown key {key!r}", f"use only {', '.join(_ENV_KEYS)}")
    env_name = mapping["name"].value if isinstance(mapping.get("name"), yaml.ScalarNode) else None
    channels = tuple(
        v for v, _ in _strings(mapping.get("channels"), src, "channels") if v != "nodefaults"
    )
    platforms = tuple(
        _check_platform(v, n, src) for v, n in _strings(mapping.get("platforms"), src, "platforms")
    )
    repos = [
        _check_url(v, n, src)
        for v, n in _strings(mapping.get("pip-repositories"), src, "pip-repositories")
    ]
    conda: list[str] = []
    pip: list[str] = []
    deps = mapping.get("dependencies")
    if deps is None:
        raise src.fail(root, "no 'dependencies' list", "add a dependencies list")
    if not isinstance(deps, yaml.SequenceNode):
        raise src.fail(deps, "'dependencies' is not a list", "write one package per '- ' line")
    for item in deps.value:
        if isinstance(item, yaml.ScalarNode):
            conda.append(_check_conda(str(item.value), item, src))
            continue
        sub = _mapping(item, src, "a dependencies entry")
        if set(sub) != {"pip"}:
            raise src.fail(
                item,
                f"unexpected entry {sorted(sub)}",
                "only a 'pip:' list may appear among the dependencies",
            )
        for value, node in _strings(sub["pip"], src, "pip"):
            option, _, rest = value.partition(" ")
            if option in _INDEX_OPTIONS or option.startswith(
                ("--extra-index-url=", "--index-url=")
            ):
                url = rest.strip() if rest else option.split("=", 1)[1]
                repos.append(_check_url(url, node, src))
            elif value.startswith("-"):
                raise src.fail(
                    node,
                    f"pip option {value!r} cannot be locked",
                    "keep only requirements and index URLs in the pip list",
                )
            else:
                pip.append(_check_pip(value, node, src))
    return EnvironmentFile(
        name=env_name,
        channels=channels,
        packages=Packages(
            conda=tuple(conda), pip=tuple(pip), pip_repositories=tuple(_unique(repos))
        ),
        platforms=platforms,
    )


def _compose(text: str, src: _Source) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        if (
            err.context_mark is not None
            and mark is not None
            and mark.line >= len(text.splitlines())
        ):
            mark = (
                err.context_mark
            )  # "unexpected end of stream": point at where the open construct began
        line = mark.line + 1 if mark else 1
        raise BadInput(
            f"{src.name}:{line}: bad YAML: {err.problem or err.context}",
            fix="fix the YAML syntax on that line",
        ) from None
    except yaml.YAMLError as err:
        raise BadInput(f"{src.name}:1: bad YAML: {err}", fix="fix the YAML syntax") from None


def _mapping(node: yaml.Node, src: _Source, what: str) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise src.fail(
            node, f"{what} must be a mapping of keys", "see envs/team.yml for the layout"
        )
    return {str(k.value): v for k, v in node.value}


def _keys(node: yaml.MappingNode) -> dict[str, yaml.Node]:
    """The key nodes of a mapping, so a bad key is reported on its own line."""
    return {str(k.value): k for k, _ in node.value}


def _strings(node: yaml.Node | None, src: _Source, key: str) -> list[tuple[str, yaml.Node]]:
    if node is None or (isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null")):
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise src.fail(node, f"'{key}' is not a list", "write one entry per '- ' line")
    out = []
    for item in node.value:
        if not isinstance(item, yaml.ScalarNode):
            raise src.fail(
                item, f"'{key}' entries must be plain strings", "write one entry per '- ' line"
            )
        out.append((str(item.value).strip(), item))
    return out


def _check_conda(value: str, node: yaml.Node, src: _Source) -> str:
    problem = None if _CONDA_SPEC.match(value) else "not in the form name[ version[ build]]"
    if problem is None and src.conda_check is not None:
        problem = src.conda_check(value)
    if problem:
        raise src.fail(
            node,
            f"{value!r} is not a conda package spec ({problem})",
            "write it as name, name=1.2 or 'name >=1.2,<2'",
        )
    return value


def _check_pip(value: str, node: yaml.Node, src: _Source) -> str:
    try:
        req = Requirement(value)
    except InvalidRequirement as err:
        reason = str(err).splitlines()[0]
        raise src.fail(
            node,
            f"{value!r} is not a pip requirement ({reason})",
            "write it as name==1.2 or name>=1.2",
        ) from None
    if req.url:
        raise src.fail(
            node,
            f"{value!r} is a direct URL",
            "name a released version instead; direct URLs cannot be locked with hashes here",
        )
    return value


def _check_url(value: str, node: yaml.Node, src: _Source) -> str:
    if not re.match(r"^(https?|file)://\S+$", value):
        raise src.fail(
            node, f"{value!r} is not an index URL", "give it as https://host/path/simple"
        )
    return value


def _check_platform(value: str, node: yaml.Node, src: _Source) -> str:
    if value not in PLATFORMS:
        raise src.fail(node, f"unknown platform {value!r}", f"use one of {', '.join(PLATFORMS)}")
    return value
