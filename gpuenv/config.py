"""The team's defaults (the `gpuenv:` section of Invoke's config) checked, and the one StackRequest.

Invoke loads and merges the layers (defaults, system/user/project `invoke.yaml`, `INVOKE_GPUENV_*`,
`-f FILE`); the task layer hands this module each layer's `gpuenv` section as plain data, so
nothing here reads a file or the environment. Pure: the checks and the "where did this value come
from" answer are tested on their output.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gpuenv.errors import BadInput

SECTION = "gpuenv"
ENV_PREFIX = "INVOKE_"
#: The stack options a team may set once for everybody (the command line still wins).
STACK_KEYS = ("framework", "cuda", "python", "backend", "platforms", "base_image")
BACKENDS = ("conda-lock", "uv")
PLATFORMS = ("linux-64", "linux-aarch64")

#: The `gpuenv:` defaults registered with Invoke. Every key must exist here: Invoke reads an
#: INVOKE_GPUENV_* variable only for keys it already knows. None means "gpuenv decides" (the
#: resolver picks CUDA and Python for the host; conda-lock and linux-64 otherwise).
DEFAULTS: dict[str, Any] = {
    "framework": None,
    "cuda": None,
    "python": None,
    "backend": None,
    "platforms": None,
    "base_image": None,
    "registry": None,
    "fleet": {
        "hosts": None,
        "parallel": None,
        "slurm": {"partition": None, "time": None, "nodes": None, "nodelist": None, "prefix": None, "rundir": None},
    },
}
#: What None means, for `invoke doctor`.
IMPLIED = {
    "framework": "torch",
    "cuda": "newest the driver runs",
    "python": "newest the framework supports",
    "backend": "conda-lock",
    "platforms": "linux-64",
    "base_image": "the stack's nvidia/cuda tag",
    "registry": "none",
    "fleet.hosts": "this host only",
    "fleet.parallel": "8",
    "fleet.slurm.partition": "the cluster's default",
    "fleet.slurm.time": "the partition's default",
    "fleet.slurm.nodes": "1",
    "fleet.slurm.nodelist": "any nodes",
    "fleet.slurm.prefix": "none: nodes run Docker",
    "fleet.slurm.rundir": "./gpuenv-fleet/slurm-TIME",
}
DEFAULT_ORIGIN = "default"


@dataclass(frozen=True)
class Layer:
    """One of Invoke's config layers: its name for people, and its `gpuenv` section (or {})."""

    label: str
    section: Mapping[str, Any]
    is_env: bool = False

    def origin_of(self, key: str) -> str:
        return env_var(key) if self.is_env else self.label


def env_var(key: str) -> str:
    """`fleet.parallel` -> INVOKE_GPUENV_FLEET_PARALLEL (Invoke's own naming)."""
    return ENV_PREFIX + "_".join([SECTION, *key.split(".")]).upper()


def flatten(section: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'fleet': {'parallel': 4}} -> {'fleet.parallel': 4}."""
    out: dict[str, Any] = {}
    for key, value in section.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


KNOWN_KEYS = tuple(flatten(DEFAULTS))


def origins(layers: Sequence[Layer]) -> dict[str, str]:
    """For every known key, the last layer (in Invoke's merge order) that set it.

    Invoke merges but does not remember where a value came from; this answers it from the
    same layers, in the same order. Keys no layer sets come from gpuenv's defaults.
    """
    where = {key: DEFAULT_ORIGIN for key in KNOWN_KEYS}
    for layer in layers:
        for key, value in flatten(layer.section or {}).items():
            if key in where and value is not None:  # `key: null` in a file means "not set here"
                where[key] = layer.origin_of(key)
    return where


# ---------------------------------------------------------------- checking the values


@dataclass(frozen=True)
class FleetSettings:
    """The fleet settings (issue 14's work reads them from here)."""

    hosts: tuple[str, ...] = ()
    parallel: int | None = None
    slurm_partition: str | None = None
    slurm_time: str | None = None
    slurm_nodes: int | None = None
    slurm_nodelist: str | None = None
    slurm_prefix: str | None = None
    slurm_rundir: str | None = None


@dataclass(frozen=True)
class Settings:
    """The effective, checked `gpuenv:` values, and where each came from."""

    framework: str | None = None
    cuda: str | None = None
    python: str | None = None
    backend: str | None = None
    platforms: tuple[str, ...] = ()
    base_image: str | None = None
    registry: str | None = None
    fleet: FleetSettings = field(default_factory=FleetSettings)
    origin: Mapping[str, str] = field(default_factory=dict, compare=False)

    def source(self, key: str) -> str:
        return self.origin.get(key, DEFAULT_ORIGIN)


def check_layers(layers: Sequence[Layer]) -> None:
    """An unknown key in any layer (a typo such as `frameworks:`) is a one-line error naming it."""
    for layer in layers:
        if layer.is_env or layer.label == DEFAULT_ORIGIN:
            continue
        section = layer.section
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise BadInput(f"{layer.label}: `{SECTION}:` is a {type(section).__name__}, not a mapping",
                           fix=f"write it as `{SECTION}:` followed by indented `key: value` lines (see invoke.yaml)")
        for key in flatten(section):
            if key not in KNOWN_KEYS:
                raise BadInput(f"{layer.label}: unknown key {SECTION}.{key}",
                               fix=f"use one of {', '.join(KNOWN_KEYS)}")


def settings_from(merged: Mapping[str, Any], layers: Sequence[Layer]) -> Settings:
    """Check Invoke's merged `gpuenv` section; a bad value names its file (or variable), key and fix."""
    check_layers(layers)
    where = origins(layers)
    values = flatten(merged or {})

    def get(key: str) -> Any:
        value = values.get(key)
        return None if value == "" else value

    def checked(key: str, parse) -> Any:
        value = get(key)
        if value is None:
            return None
        try:
            return parse(key, value)
        except BadInput as err:
            raise BadInput(f"{where[key]}: {SECTION}.{key} {_what(err.message, value)}", fix=err.fix) from None

    return Settings(
        framework=checked("framework", _framework),
        cuda=checked("cuda", _cuda),
        python=checked("python", _python),
        backend=checked("backend", _backend),
        platforms=checked("platforms", _platforms) or (),
        base_image=checked("base_image", _image_name),
        registry=checked("registry", lambda _k, v: parse_registry(v)),
        fleet=FleetSettings(
            hosts=checked("fleet.hosts", _string_list) or (),
            parallel=checked("fleet.parallel", _positive_int),
            slurm_partition=checked("fleet.slurm.partition", _text),
            slurm_time=checked("fleet.slurm.time", _text),
            slurm_nodes=checked("fleet.slurm.nodes", _positive_int),
            slurm_nodelist=checked("fleet.slurm.nodelist", _text),
            slurm_prefix=checked("fleet.slurm.prefix", _text),
            slurm_rundir=checked("fleet.slurm.rundir", _text),
        ),
        origin=where,
    )


def _what(message: str, value: Any) -> str:
    """The part of a parser's message after its option name: "--cuda '1' is not ..." -> "'1' is not ..."."""
    if message.startswith("--"):
        return message.split(" ", 1)[1] if " " in message else message
    return message


_EXAMPLES = {"python": "3.10", "cuda": "12.1"}


def _no_float(key: str, value: Any) -> str:
    if isinstance(value, float):
        # YAML reads `python: 3.10` as the number 3.1: refuse rather than guess.
        raise BadInput(f"is the number {value!r} (YAML reads an unquoted 3.10 as 3.1)", fix=f'quote the version, e.g. {key.split(".")[-1]}: "{_EXAMPLES.get(key, value)}"')
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise BadInput(f"{value!r} is not text", fix=f'write it as text, e.g. {key.split(".")[-1]}: "..."')
    return str(value)


def _framework(key: str, value: Any) -> str:
    from gpuenv.resolve import parse_framework

    return parse_framework(_no_float(key, value)) or ""


def _cuda(key: str, value: Any) -> str:
    from gpuenv.compat import load_matrix
    from gpuenv.resolve import parse_cuda

    return parse_cuda(_no_float(key, value), load_matrix()) or ""


def _python(key: str, value: Any) -> str:
    from gpuenv.resolve import parse_python

    return parse_python(_no_float(key, value)) or ""


def _backend(key: str, value: Any) -> str:
    text = _no_float(key, value).strip()
    if text not in BACKENDS:
        raise BadInput(f"{text!r} is not a lock backend", fix=f"use one of {', '.join(BACKENDS)}")
    return text


def _string_list(key: str, value: Any) -> tuple[str, ...]:
    """A YAML list, or (from an environment variable) a comma-separated string."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)):
        items = [_no_float(key, v) for v in value]
    else:
        raise BadInput(f"{value!r} is not a list", fix=f"write it as a list: {key}: [a, b]")
    return tuple(dict.fromkeys(i.strip() for i in items if i.strip()))


def _platforms(key: str, value: Any) -> tuple[str, ...]:
    items = _string_list(key, value)
    for item in items:
        if item not in PLATFORMS:
            raise BadInput(f"{item!r} is not a known platform", fix=f"use {' or '.join(PLATFORMS)}")
    return items


_IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._/:-]*(?:@sha256:[0-9a-f]{64})?")


def _image_name(key: str, value: Any) -> str:
    text = _no_float(key, value).strip()
    if not _IMAGE_NAME.fullmatch(text.split("/", 1)[-1] if "/" in text else text) or any(c.isspace() for c in text):
        raise BadInput(f"{text!r} is not an image name", fix="use e.g. nvidia/cuda:12.1.1-base-ubuntu22.04 (lower case, no spaces)")
    return text


def _positive_int(key: str, value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadInput(f"{value!r} is not a number", fix=f"use a whole number, e.g. {key}: 4") from None
    if number < 1 or isinstance(value, (bool, float)):
        raise BadInput(f"{value!r} is not a whole number of 1 or more", fix=f"use e.g. {key}: 4")
    return number


def _text(key: str, value: Any) -> str:
    return _no_float(key, value).strip()


_REGISTRY = re.compile(r"(?P<host>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:]+\])(?::(?P<port>\d{1,5}))?")


def parse_registry(value: Any, option: str = "--registry") -> str:
    """HOST[:PORT] of an image registry, lower-cased; a scheme, a path or a bad port is a BadInput."""
    text = str(value).strip()
    if "://" in text:
        raise BadInput(f"{option} {text!r} has a scheme", fix=f"give HOST[:PORT] only, e.g. {option} {text.split('://', 1)[1].split('/')[0]}")
    if "/" in text:
        raise BadInput(f"{option} {text!r} has a path", fix=f"give HOST[:PORT] only, e.g. {option} {text.split('/')[0]}; images go to HOST/gpuenv/<stack>")
    match = _REGISTRY.fullmatch(text.lower())
    if not match or "." not in text and ":" not in text and text.lower() != "localhost":
        raise BadInput(f"{option} {text!r} is not a registry host",
                       fix="give HOST[:PORT], e.g. registry.example.com or 127.0.0.1:5000 (a bare name would be read as a Docker Hub user)")
    port = match.group("port")
    if port is not None and not 0 < int(port) < 65536:
        raise BadInput(f"{option} {text!r}: port {port} is out of range", fix="use a port between 1 and 65535")
    return text.lower()


# ---------------------------------------------------------------- the one stack request


@dataclass(frozen=True)
class StackRequest:
    """The stack options of one command, command line over invoke.yaml over gpuenv's defaults.

    Built once in the task layer and passed down whole, instead of seven loose keyword
    arguments restated in every task.
    """

    framework: str | None = None
    cuda: str | None = None
    python: str | None = None
    torch: str | None = None
    tensorflow: str | None = None
    driver: str | None = None
    gpu_arch: str | None = None
    backend: str | None = None
    platforms: tuple[str, ...] = ()
    base_image: str | None = None
    strict_driver: bool = False
    wheelhouse: str | None = None

    def resolver_options(self) -> dict[str, str | bool | None]:
        """What the resolver needs (backend, platforms and base image only matter later)."""
        return {
            "driver": self.driver, "cuda": self.cuda, "framework": self.framework, "torch": self.torch,
            "tensorflow": self.tensorflow, "python": self.python, "gpu_arch": self.gpu_arch,
            "strict_driver": self.strict_driver, "wheelhouse": self.wheelhouse,
        }


def stack_request(cli: Mapping[str, Any], settings: Settings) -> StackRequest:
    """Command-line values (None = not given) over the team's settings.

    A framework pin on the command line (`--tensorflow 2.15`) implies its framework, so a
    team default of `framework: torch` does not contradict it.
    """
    def pick(key: str) -> Any:
        value = cli.get(key)
        return value if value not in (None, "", [], ()) else getattr(settings, key)

    framework = cli.get("framework") or None
    if framework is None:
        if cli.get("tensorflow") and not cli.get("torch"):
            framework = "tensorflow"
        elif cli.get("torch") and not cli.get("tensorflow"):
            framework = "torch"
        else:
            framework = settings.framework
    platforms = cli.get("platforms") or settings.platforms
    return StackRequest(
        framework=framework,
        cuda=pick("cuda"),
        python=pick("python"),
        torch=cli.get("torch") or None,
        tensorflow=cli.get("tensorflow") or None,
        driver=cli.get("driver") or None,
        gpu_arch=cli.get("gpu_arch") or None,
        backend=pick("backend"),
        platforms=tuple(platforms or ()),
        base_image=pick("base_image"),
        strict_driver=bool(cli.get("strict_driver")),
        wheelhouse=str(cli["wheelhouse"]) if cli.get("wheelhouse") else None,
    )


def effective_rows(settings: Settings, cli: Mapping[str, Any] | None = None) -> list[tuple[str, str, str]]:
    """(key, value, source) for `invoke doctor`: every setting, what it is now and where it came from."""
    rows = []
    cli = cli or {}
    for key in KNOWN_KEYS:
        if key in cli and cli[key] not in (None, "", (), []):
            rows.append((key, _show(cli[key]), "command line"))
            continue
        value: Any = settings
        for part in key.replace("fleet.slurm.", "fleet.slurm_").split("."):
            value = getattr(value, part)
        if value in (None, ()):
            rows.append((key, f"({IMPLIED.get(key, 'unset')})", settings.source(key)))
        else:
            rows.append((key, _show(value), settings.source(key)))
    return rows


def _show(value: Any) -> str:
    return ", ".join(value) if isinstance(value, (list, tuple)) else str(value)
