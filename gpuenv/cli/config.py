"""The team's defaults (the `gpuenv:` section of Invoke's config) checked, and the one StackRequest.

Invoke loads and merges the layers (defaults, system/user/project `invoke.yaml`, `INVOKE_GPUENV_*`,
`-f FILE`); the task layer hands this module each layer's `gpuenv` section as plain data, so
nothing here reads a file or the environment. Pure: the checks and the "where did this value come
from" answer are tested on their output.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from gpuenv.errors import BadInput

SECTION = "gpuenv"
ENV_PREFIX = "INVOKE_"
#: The stack options a team may set once for everybody (the command line still wins).
STACK_KEYS = ("framework", "torch", "tensorflow", "cuda", "python", "backend", "platforms", "base_image", "wheelhouse", "strict_driver")
#: Together these pin one stack: every task on every server then addresses it, whatever the driver.
PIN_KEYS = ("cuda", "python")
BACKENDS = ("conda-lock", "uv")
PLATFORMS = ("linux-64", "linux-aarch64")

#: The `gpuenv:` defaults registered with Invoke. Every key must exist here: Invoke reads an
#: INVOKE_GPUENV_* variable only for keys it already knows. None means "gpuenv decides" (the
#: resolver picks CUDA and Python for the host; conda-lock and linux-64 otherwise).
DEFAULTS: dict[str, Any] = {
    "framework": None,
    "torch": None,
    "tensorflow": None,
    "cuda": None,
    "python": None,
    "backend": None,
    "platforms": None,
    "base_image": None,
    "wheelhouse": None,
    "strict_driver": None,
    "registry": None,
    "conda_channels": None,
    "conda_mirrors": None,
    "expect_gpus": None,
    "fleet": {
        "hosts": None,
        "parallel": None,
        "outlier_floor": None,
        "slurm": {"partition": None, "time": None, "queue_time": None, "nodes": None, "nodelist": None, "prefix": None, "rundir": None},
    },
}
#: What None means, for `invoke doctor`.
IMPLIED = {
    "framework": "torch",
    "torch": "newest that fits",
    "tensorflow": "newest that fits",
    "cuda": "newest the driver runs",
    "python": "newest the framework supports",
    "backend": "conda-lock",
    "platforms": "linux-64",
    "base_image": "the stack's nvidia/cuda tag",
    "wheelhouse": "none",
    "strict_driver": "false",
    "registry": "none",
    "conda_channels": "the environment's channels (conda-forge)",
    "conda_mirrors": "none",
    "expect_gpus": "none",
    "fleet.hosts": "this host only",
    "fleet.parallel": "8",
    "fleet.outlier_floor": "0.9",
    "fleet.slurm.partition": "the cluster's default",
    "fleet.slurm.time": "the partition's default",
    "fleet.slurm.queue_time": "1:00:00",
    "fleet.slurm.nodes": "1",
    "fleet.slurm.nodelist": "any nodes",
    "fleet.slurm.prefix": "none: nodes run Docker",
    "fleet.slurm.rundir": "./gpuenv-fleet/slurm-TIME",
}
DEFAULT_ORIGIN = "default"


@dataclass(frozen=True)
class Layer:
    """One of Invoke's config layers: its name for people, and its `gpuenv` section (or {}).

    `folder` is the folder of the file the layer came from (relative paths in it, such as a
    `wheelhouse:`, are read from there); None for defaults and variables.
    """

    label: str
    section: Mapping[str, Any]
    is_env: bool = False
    folder: str | None = None

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
_SECTIONS = ("fleet", "fleet.slurm")


def _is_set(value: Any) -> bool:
    """`key: null` (or an empty value) in a file means "not set here": a lower layer's value stays."""
    return value is not None and value != ""


def effective_values(layers: Sequence[Layer]) -> tuple[dict[str, Any], dict[str, str], dict[str, Layer]]:
    """For every known key, its value, the name of the layer it came from, and that layer.

    Invoke's merge lets a `null` in a higher file override a lower file's value (the committed
    invoke.yaml would then silence ~/.invoke.yaml); here null means "not set", so every layer
    works in Invoke's order: the last layer that sets a key wins.
    """
    values: dict[str, Any] = {key: None for key in KNOWN_KEYS}
    where = {key: DEFAULT_ORIGIN for key in KNOWN_KEYS}
    layer_of: dict[str, Layer] = {}
    for layer in layers:
        section = layer.section if isinstance(layer.section, Mapping) else {}
        for key, value in flatten(section).items():
            if key in where and _is_set(value):
                values[key] = value
                where[key] = layer.origin_of(key)
                layer_of[key] = layer
    return values, where, layer_of


def origins(layers: Sequence[Layer]) -> dict[str, str]:
    """For every known key, the last layer (in Invoke's merge order) that set it (default: gpuenv's)."""
    return effective_values(layers)[1]


def unknown_variables(names: Iterable[str]) -> list[str]:
    """The INVOKE_GPUENV_* names among `names` that are no gpuenv setting (a typo is never ignored)."""
    known = {env_var(key) for key in KNOWN_KEYS}
    prefix = ENV_PREFIX + SECTION.upper() + "_"
    return sorted(name for name in names if name.upper().startswith(prefix) and name.upper() not in known)


def check_variables(names: Iterable[str]) -> None:
    """An INVOKE_GPUENV_* variable that names no setting is a one-line error naming it."""
    unknown = unknown_variables(names)
    if unknown:
        close = _closest(unknown[0].upper().removeprefix(ENV_PREFIX + SECTION.upper() + "_").lower().replace("_", "."))
        hint = f"did you mean {env_var(close)}? " if close else ""
        raise BadInput(f"{unknown[0]} is not a gpuenv setting", fix=f"{hint}unset it, or use one of the INVOKE_GPUENV_* names `invoke doctor` lists")


def _closest(key: str) -> str | None:
    import difflib

    found = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.75)
    return found[0] if found else None


# ---------------------------------------------------------------- checking the values


@dataclass(frozen=True)
class FleetSettings:
    """The fleet settings, read once (the fleet tasks take them from here)."""

    hosts: tuple[str, ...] = ()
    parallel: int | None = None
    slurm_partition: str | None = None
    slurm_time: str | None = None
    slurm_queue_time: str | None = None
    slurm_nodes: int | None = None
    slurm_nodelist: str | None = None
    slurm_prefix: str | None = None
    slurm_rundir: str | None = None
    outlier_floor: float = 0.9

    def as_config(self) -> dict[str, Any]:
        """The `gpuenv.fleet` section as plain data, shaped as invoke.yaml writes it (unset keys left out)."""
        slurm = {key: getattr(self, f"slurm_{key}") for key in ("partition", "time", "queue_time", "nodes", "nodelist", "prefix", "rundir")}
        out: dict[str, Any] = {"hosts": list(self.hosts) or None, "parallel": self.parallel, "outlier_floor": self.outlier_floor,
                               "slurm": {k: v for k, v in slurm.items() if v is not None}}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True)
class Settings:
    """The effective, checked `gpuenv:` values, and where each came from."""

    framework: str | None = None
    torch: str | None = None
    tensorflow: str | None = None
    cuda: str | None = None
    python: str | None = None
    backend: str | None = None
    platforms: tuple[str, ...] = ()
    base_image: str | None = None
    wheelhouse: str | None = None
    strict_driver: bool = False
    registry: str | None = None
    conda_channels: tuple[str, ...] = ()
    #: CHANNEL=URL lines: a conda channel (name or URL) read from a mirror (file:// or http)
    conda_mirrors: tuple[str, ...] = ()
    #: GPUs every server must show (`validate --expect-gpus`); None: a host with no NVIDIA driver is CPU-only.
    expect_gpus: int | None = None
    fleet: FleetSettings = field(default_factory=FleetSettings)
    origin: Mapping[str, str] = field(default_factory=dict, compare=False)

    def source(self, key: str) -> str:
        return self.origin.get(key, DEFAULT_ORIGIN)

    def pins(self) -> dict[str, str]:
        """The stack keys the team set (in any layer but gpuenv's defaults), by name."""
        return {key: self.source(key) for key in ("framework", "torch", "tensorflow", "cuda", "python") if self.source(key) != DEFAULT_ORIGIN}


def check_layers(layers: Sequence[Layer]) -> None:
    """An unknown key in any layer (a typo such as `frameworks:` or `fleet.paralel`) is a one-line error naming it."""
    for layer in layers:
        if layer.label == DEFAULT_ORIGIN or layer.is_env:
            continue  # Invoke reads a variable only for a known key: check_variables names the others
        section = layer.section
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise BadInput(f"{layer.label}: `{SECTION}:` is a {type(section).__name__}, not a mapping",
                           fix=f"write it as `{SECTION}:` followed by indented `key: value` lines (see invoke.yaml)")
        for key, value in flatten(section).items():
            if key in _SECTIONS:
                if _is_set(value):
                    raise BadInput(f"{layer.label}: {SECTION}.{key} is {value!r}, but it is a section",
                                   fix=f"write it as `{key.split('.')[-1]}:` followed by indented `key: value` lines (see invoke.yaml)")
                continue
            if key not in KNOWN_KEYS:
                close = _closest(key)
                raise BadInput(f"{layer.label}: unknown key {SECTION}.{key}",
                               fix=(f"did you mean {SECTION}.{close}? " if close else "") + f"use one of {', '.join(KNOWN_KEYS)}")


def settings_from(merged: Mapping[str, Any] | None, layers: Sequence[Layer]) -> Settings:
    """Check the layers' `gpuenv` sections; a bad value names its file (or variable), key and fix.

    The values come from the layers themselves, not Invoke's merge (`merged` is kept for callers
    and ignored): there a `null` in a higher file would hide a lower file's value.
    """
    check_layers(layers)
    values, where, layer_of = effective_values(layers)

    def checked(key: str, parse) -> Any:
        value = values.get(key)
        if not _is_set(value):
            return None
        try:
            return parse(key, value)
        except BadInput as err:
            raise BadInput(f"{where[key]}: {SECTION}.{key} {_what(err.message, value)}", fix=err.fix) from None

    def folder_path(key: str, value: Any) -> str:
        text = _text(key, value)
        base = layer_of[key].folder if key in layer_of else None
        path = os.path.join(base, os.path.expanduser(text)) if base else os.path.expanduser(text)
        if not os.path.isdir(path):
            raise BadInput(f"{text!r}: no such folder{f' (read from {base})' if base and not os.path.isabs(text) else ''}",
                           fix="give the folder that holds the .whl files, or remove the key")
        return os.path.normpath(path)

    floor = checked("fleet.outlier_floor", _fraction)
    return Settings(
        framework=checked("framework", _framework),
        torch=checked("torch", _release),
        tensorflow=checked("tensorflow", _release),
        cuda=checked("cuda", _cuda),
        python=checked("python", _python),
        backend=checked("backend", _backend),
        platforms=checked("platforms", _platforms) or (),
        base_image=checked("base_image", _image_name),
        wheelhouse=checked("wheelhouse", folder_path),
        strict_driver=bool(checked("strict_driver", _bool)),
        registry=checked("registry", lambda _k, v: parse_registry(v)),
        conda_channels=checked("conda_channels", _string_list) or (),
        conda_mirrors=checked("conda_mirrors", _mirror_list) or (),
        expect_gpus=checked("expect_gpus", _gpu_count),
        fleet=FleetSettings(
            hosts=checked("fleet.hosts", _string_list) or (),
            parallel=checked("fleet.parallel", _positive_int),
            slurm_partition=checked("fleet.slurm.partition", _text),
            slurm_time=checked("fleet.slurm.time", _text),
            slurm_queue_time=checked("fleet.slurm.queue_time", _text),
            slurm_nodes=checked("fleet.slurm.nodes", _positive_int),
            slurm_nodelist=checked("fleet.slurm.nodelist", _text),
            slurm_prefix=checked("fleet.slurm.prefix", _text),
            slurm_rundir=checked("fleet.slurm.rundir", _text),
            outlier_floor=0.9 if floor is None else floor,
        ),
        origin=where,
    )


def _what(message: str, value: Any) -> str:
    """The part of a parser's message after its option name: "--cuda '1' is not ..." -> "'1' is not ..."."""
    if message.startswith("--"):
        return message.split(" ", 1)[1] if " " in message else message
    return message


_EXAMPLES = {"python": "3.10", "cuda": "12.1", "torch": "2.3.1", "tensorflow": "2.15.1"}


def _no_float(key: str, value: Any) -> str:
    if isinstance(value, float):
        # YAML reads `python: 3.10` as the number 3.1: refuse rather than guess.
        raise BadInput(f"is the number {value!r} (YAML reads an unquoted 3.10 as 3.1)", fix=f'quote the version, e.g. {key.split(".")[-1]}: "{_EXAMPLES.get(key, value)}"')
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise BadInput(f"{value!r} is not text", fix=f'write it as text, e.g. {key.split(".")[-1]}: "..."')
    return str(value)


def _framework(key: str, value: Any) -> str:
    from gpuenv.compat.resolve import parse_framework

    return parse_framework(_no_float(key, value)) or ""


def _cuda(key: str, value: Any) -> str:
    from gpuenv.compat.matrix import load_matrix
    from gpuenv.compat.resolve import parse_cuda

    return parse_cuda(_no_float(key, value), load_matrix()) or ""


def _python(key: str, value: Any) -> str:
    from gpuenv.compat.resolve import parse_python

    return parse_python(_no_float(key, value)) or ""


def _release(key: str, value: Any) -> str:
    """A framework release pin, X.Y or X.Y.Z, as text (YAML would read torch: 2.10 as 2.1)."""
    text = _no_float(key, value).strip()
    if not re.fullmatch(r"\d+\.\d+(?:\.\d+)?", text):
        raise BadInput(f"{text!r} is not a release", fix=f'give X.Y or X.Y.Z, e.g. {key}: "{_EXAMPLES.get(key, "1.2.3")}"')
    return text


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _bool(key: str, value: Any) -> bool:
    """true/false (a variable may say 1/0, yes/no)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise BadInput(f"{value!r} is not true or false", fix=f"use {key.split('.')[-1]}: true or {key.split('.')[-1]}: false")


def _fraction(key: str, value: Any) -> float:
    """A number in (0, 1]: a share of the fleet's median (0.9 = 90 %)."""
    import math

    fix = f"use a number above 0 and at most 1, e.g. {key.split('.')[-1]}: 0.9"
    if isinstance(value, bool):
        raise BadInput(f"{value!r} is not a number", fix=fix)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{value!r} is not a number", fix=fix) from None
    if not math.isfinite(number) or not 0 < number <= 1:
        raise BadInput(f"{value!r} is not above 0 and at most 1", fix=fix)
    return number


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


def _mirror_list(key: str, value: Any) -> tuple[str, ...]:
    """CHANNEL=URL items: conda-forge=file:///srv/mirror/conda-forge (URL: file://, http:// or https://)."""
    items = _string_list(key, value)
    for item in items:
        channel, _, url = item.partition("=")
        if not channel.strip() or not url.strip().startswith(("file://", "http://", "https://")):
            raise BadInput(f"{item!r} is not CHANNEL=URL", fix=f"write it as {key}: [conda-forge=file:///srv/mirrors/conda-forge]")
    return items


def mirror_map(items: Sequence[str]) -> dict[str, str]:
    """The CHANNEL=URL items of gpuenv.conda_mirrors as a mapping."""
    return {channel.strip(): url.strip() for channel, _, url in (item.partition("=") for item in items)}


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


def _gpu_count(key: str, value: Any) -> int:
    """A number of GPUs: 0 or more (0: CPU-only servers, said on purpose)."""
    if value == 0 and not isinstance(value, (bool, float)):
        return 0
    return _positive_int(key, value)


def _positive_int(key: str, value: Any) -> int:
    if isinstance(value, (bool, float)):
        # YAML reads `parallel: yes` as true and `8.5` as a float: neither is a count
        raise BadInput(f"{value!r} is not a whole number", fix=f"use a whole number, e.g. {key.split('.')[-1]}: 8")
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
    #: Where each value that did not come from the command line came from, for error messages.
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def pinned(self) -> bool:
        """Whether these options name one stack whatever the host: CUDA, Python and the framework release."""
        release = self.tensorflow if self.framework == "tensorflow" else self.torch
        return bool(self.cuda and self.python and release)

    def resolver_options(self) -> dict[str, str | bool | None]:
        """What the resolver needs (backend, platforms and base image only matter later)."""
        return {
            "driver": self.driver, "cuda": self.cuda, "framework": self.framework, "torch": self.torch,
            "tensorflow": self.tensorflow, "python": self.python, "gpu_arch": self.gpu_arch,
            "strict_driver": self.strict_driver, "wheelhouse": self.wheelhouse, "origins": dict(self.origins),
        }


def stack_request(cli: Mapping[str, Any], settings: Settings) -> StackRequest:
    """Command-line values (None = not given) over the team's settings.

    A framework pin on the command line (`--tensorflow 2.15`) implies its framework, so a
    team default of `framework: torch` does not contradict it; the team's pin of the other
    framework then does not apply.
    """
    def given(key: str) -> Any:
        value = cli.get(key)
        return value if value not in (None, "", [], (), False) else None

    def pick(key: str) -> Any:
        value = given(key)
        return value if value is not None else getattr(settings, key)

    framework = given("framework")
    if framework is None:
        if given("tensorflow") and not given("torch"):
            framework = "tensorflow"
        elif given("torch") and not given("tensorflow"):
            framework = "torch"
        elif settings.framework:
            framework = settings.framework
        elif settings.tensorflow and not settings.torch:
            framework = "tensorflow"
        elif settings.torch and not settings.tensorflow:
            framework = "torch"
    from gpuenv.compat.resolve import parse_framework

    framework = parse_framework(framework)  # "PyTorch", "TF": one spelling from here on
    name = framework or "torch"  # the resolver's default
    torch = given("torch") or (settings.torch if name == "torch" and not given("tensorflow") else None)
    tensorflow = given("tensorflow") or (settings.tensorflow if name == "tensorflow" and not given("torch") else None)
    platforms = cli.get("platforms") or settings.platforms
    wheelhouse = given("wheelhouse")
    chosen = {"cuda": pick("cuda"), "python": pick("python"), "torch": torch, "tensorflow": tensorflow}
    origins = {key: _origin_label(settings.source(key), key) for key, value in chosen.items()
               if value is not None and given(key) is None and settings.source(key) != DEFAULT_ORIGIN}
    return StackRequest(
        origins=origins,
        framework=framework,
        cuda=pick("cuda"),
        python=pick("python"),
        torch=torch,
        tensorflow=tensorflow,
        driver=given("driver"),
        gpu_arch=given("gpu_arch"),
        backend=pick("backend"),
        platforms=tuple(platforms or ()),
        base_image=pick("base_image"),
        strict_driver=bool(given("strict_driver")) or settings.strict_driver,
        wheelhouse=str(wheelhouse) if wheelhouse else settings.wheelhouse,
    )


def _origin_label(source: str, key: str) -> str:
    """'invoke.yaml: gpuenv.torch', or the variable's own name: what an error blames for a value
    that came from the team's settings."""
    return source if source.startswith(ENV_PREFIX) else f"{source}: {SECTION}.{key}"


def effective_rows(settings: Settings, cli: Mapping[str, Any] | None = None) -> list[tuple[str, str, str]]:
    """(key, value, source) for `invoke doctor`: every setting, what it is now and where it came from."""
    rows = []
    cli = cli or {}
    for key in KNOWN_KEYS:
        if key in cli and cli[key] not in (None, "", (), [], False):
            rows.append((key, _show(cli[key]), "command line"))
            continue
        value: Any = settings
        for part in key.replace("fleet.slurm.", "fleet.slurm_").split("."):
            value = getattr(value, part)
        if value in (None, (), False) or (key == "fleet.outlier_floor" and settings.source(key) == DEFAULT_ORIGIN):
            rows.append((key, f"({IMPLIED.get(key, 'unset')})", settings.source(key)))
        else:
            rows.append((key, _show(value), settings.source(key)))
    return rows


def _show(value: Any) -> str:
    return ", ".join(value) if isinstance(value, (list, tuple)) else str(value)
