"""The team's defaults (the `gpuenv:` section of Invoke's config) checked, and the one StackRequest.

Invoke loads and merges the layers (defaults, system/user/project `invoke.yaml`, `INVOKE_GPUENV_*`,
`-f FILE`); the task layer hands this module each layer's `gpuenv` section as plain data, so
nothing here reads a file or the environment. Pure: the checks and the "where did this value come
from" answer are tested on their output.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from gpuenv.cli.config_values import (  # noqa: F401 (callers import parse_registry, mirror_map and the two lists from here)
    BACKENDS,
    PLATFORMS,
    after_option,
    as_backend,
    as_bool,
    as_cuda,
    as_fraction,
    as_framework,
    as_gpu_count,
    as_image_name,
    as_mirror_list,
    as_platforms,
    as_positive_int,
    as_python,
    as_release,
    as_string_list,
    as_text,
    mirror_map,
    parse_registry,
)
from gpuenv.cli.defaults import (  # noqa: F401 (callers import DEFAULTS from here too)
    DEFAULTS,
    ENV_PREFIX,
    SECTION,
)
from gpuenv.errors import BadInput

#: What None means, for `invoke doctor`.
IMPLIED = {
    "framework": "torch",
    "torch": "newest that fits",
    "tensorflow": "newest that fits",
    "cuda": "newest the driver runs",
    "python": "newest the framework supports",
    "backend": "conda-lock",
    "platforms": "the stack's: this host's CPU, or aarch64 for a capture of a Grace server",
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
    "fleet.env": "none",
    "fleet.slurm.sbatch_args": "none",
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
    """{'fleet': {'parallel': 4}} -> {'fleet.parallel': 4}; a mapping that is one value
    (OPAQUE_KEYS: `fleet.env`, variable names of the user's) stays whole."""
    out: dict[str, Any] = {}
    for key, value in section.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and name not in OPAQUE_KEYS:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


#: Keys whose value is a mapping of the user's own names (the NCCL/gloo environment).
OPAQUE_KEYS = ("fleet.env",)
KNOWN_KEYS = tuple(flatten(DEFAULTS))
_SECTIONS = ("fleet", "fleet.slurm")


def _is_set(value: Any) -> bool:
    """`key: null` (or an empty value) in a file means "not set here": a lower layer's value
    stays."""
    return value is not None and value != ""


def effective_values(
    layers: Sequence[Layer],
) -> tuple[dict[str, Any], dict[str, str], dict[str, Layer]]:
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
    """For every known key, the last layer (in Invoke's merge order) that set it (default:
    gpuenv's)."""
    return effective_values(layers)[1]


def unknown_variables(names: Iterable[str]) -> list[str]:
    """The INVOKE_GPUENV_* names among `names` that are no gpuenv setting (a typo is never
    ignored)."""
    known = {env_var(key) for key in KNOWN_KEYS}
    prefix = ENV_PREFIX + SECTION.upper() + "_"
    return sorted(
        name for name in names if name.upper().startswith(prefix) and name.upper() not in known
    )


def check_variables(names: Iterable[str]) -> None:
    """An INVOKE_GPUENV_* variable that names no setting is a one-line error naming it."""
    unknown = unknown_variables(names)
    if unknown:
        close = _closest(
            unknown[0]
            .upper()
            .removeprefix(ENV_PREFIX + SECTION.upper() + "_")
            .lower()
            .replace("_", ".")
        )
        hint = f"did you mean {env_var(close)}? " if close else ""
        raise BadInput(
            f"{unknown[0]} is not a gpuenv setting",
            fix=f"{hint}unset it, or use one of the INVOKE_GPUENV_* names `invoke doctor` lists",
        )


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
    env: Mapping[str, str] = field(
        default_factory=dict
    )  # NCCL_*/GLOO_*/TORCH_* for every fleet container
    slurm_sbatch_args: tuple[str, ...] = ()

    def as_config(self) -> dict[str, Any]:
        """The `gpuenv.fleet` section as plain data, shaped as invoke.yaml writes it (unset keys
        left out)."""
        slurm = {
            key: getattr(self, f"slurm_{key}")
            for key in ("partition", "time", "queue_time", "nodes", "nodelist", "prefix", "rundir")
        }
        slurm["sbatch_args"] = list(self.slurm_sbatch_args) or None
        out: dict[str, Any] = {
            "hosts": list(self.hosts) or None,
            "parallel": self.parallel,
            "outlier_floor": self.outlier_floor,
            "env": dict(self.env) or None,
            "slurm": {k: v for k, v in slurm.items() if v is not None},
        }
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
    #: GPUs every server must show (`validate --expect-gpus`); None: a host with no NVIDIA driver is
    #: CPU-only.
    expect_gpus: int | None = None
    fleet: FleetSettings = field(default_factory=FleetSettings)
    origin: Mapping[str, str] = field(default_factory=dict, compare=False)

    def source(self, key: str) -> str:
        return self.origin.get(key, DEFAULT_ORIGIN)

    def pins(self) -> dict[str, str]:
        """The stack keys the team set (in any layer but gpuenv's defaults), by name."""
        return {
            key: self.source(key)
            for key in ("framework", "torch", "tensorflow", "cuda", "python")
            if self.source(key) != DEFAULT_ORIGIN
        }


def check_layers(layers: Sequence[Layer]) -> None:
    """An unknown key in any layer (a typo such as `frameworks:` or `fleet.paralel`) is a one-line
    error naming it."""
    for layer in layers:
        if layer.label == DEFAULT_ORIGIN or layer.is_env:
            # Invoke reads a variable only for a known key: check_variables names the others
            continue
        section = layer.section
        if section is None:
            continue
        if not isinstance(section, Mapping):
            raise BadInput(
                f"{layer.label}: `{SECTION}:` is a {type(section).__name__}, not a mapping",
                fix=f"write it as `{SECTION}:` followed by indented `key: value` lines (see "
                "invoke.yaml)",
            )
        for key, value in flatten(section).items():
            if key in _SECTIONS:
                if _is_set(value):
                    raise BadInput(
                        f"{layer.label}: {SECTION}.{key} is {value!r}, but it is a section",
                        fix=f"write it as `{key.split('.')[-1]}:` followed by indented `key: "
                        "value` lines (see invoke.yaml)",
                    )
                continue
            if key not in KNOWN_KEYS:
                close = _closest(key)
                raise BadInput(
                    f"{layer.label}: unknown key {SECTION}.{key}",
                    fix=(f"did you mean {SECTION}.{close}? " if close else "")
                    + f"use one of {', '.join(KNOWN_KEYS)}",
                )


#: Each Settings field: the key under `gpuenv:` and the check its value goes through (None: a
#: folder, relative to the file that set it). An unset or empty value leaves the field's default.
SETTINGS_KEYS: dict[str, tuple[str, Any]] = {
    "framework": ("framework", as_framework),
    "torch": ("torch", as_release),
    "tensorflow": ("tensorflow", as_release),
    "cuda": ("cuda", as_cuda),
    "python": ("python", as_python),
    "backend": ("backend", as_backend),
    "platforms": ("platforms", as_platforms),
    "base_image": ("base_image", as_image_name),
    "wheelhouse": ("wheelhouse", None),
    "strict_driver": ("strict_driver", as_bool),
    "registry": ("registry", lambda _key, value: parse_registry(value)),
    "conda_channels": ("conda_channels", as_string_list),
    "conda_mirrors": ("conda_mirrors", as_mirror_list),
    "expect_gpus": ("expect_gpus", as_gpu_count),
}
#: The same for FleetSettings, under `gpuenv.fleet`.
FLEET_KEYS: dict[str, tuple[str, Any]] = {
    "hosts": ("fleet.hosts", as_string_list),
    "parallel": ("fleet.parallel", as_positive_int),
    "slurm_partition": ("fleet.slurm.partition", as_text),
    "slurm_time": ("fleet.slurm.time", as_text),
    "slurm_queue_time": ("fleet.slurm.queue_time", as_text),
    "slurm_nodes": ("fleet.slurm.nodes", as_positive_int),
    "slurm_nodelist": ("fleet.slurm.nodelist", as_text),
    "slurm_prefix": ("fleet.slurm.prefix", as_text),
    "slurm_rundir": ("fleet.slurm.rundir", as_text),
    "outlier_floor": ("fleet.outlier_floor", as_fraction),
    "env": ("fleet.env", lambda key, value: _fleet_env(key, value)),
    "slurm_sbatch_args": ("fleet.slurm.sbatch_args", as_string_list),
}


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
            raise BadInput(
                f"{where[key]}: {SECTION}.{key} {after_option(err.message, value)}", fix=err.fix
            ) from None

    def folder_path(key: str, value: Any) -> str:
        text = as_text(key, value)
        base = layer_of[key].folder if key in layer_of else None
        path = os.path.join(base, os.path.expanduser(text)) if base else os.path.expanduser(text)
        if not os.path.isdir(path):
            read_from = f" (read from {base})" if base and not os.path.isabs(text) else ""
            raise BadInput(
                f"{text!r}: no such folder{read_from}",
                fix="give the folder that holds the .whl files, or remove the key",
            )
        return os.path.normpath(path)

    def fields(table: dict[str, tuple[str, Any]]) -> dict[str, Any]:
        found = {name: checked(key, parse or folder_path) for name, (key, parse) in table.items()}
        return {name: value for name, value in found.items() if value not in (None, [], (), {})}

    return Settings(
        **fields(SETTINGS_KEYS), fleet=FleetSettings(**fields(FLEET_KEYS)), origin=where
    )


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
        """Whether these options name one stack whatever the host: CUDA, Python and the framework
        release."""
        release = self.tensorflow if self.framework == "tensorflow" else self.torch
        return bool(self.cuda and self.python and release)

    def resolver_options(self) -> dict[str, str | bool | None]:
        """What the resolver needs (backend and base image only matter later); one platform is the
        stack's platform, several (a lock for both) leave it to the host."""
        return {
            "driver": self.driver,
            "cuda": self.cuda,
            "framework": self.framework,
            "torch": self.torch,
            "tensorflow": self.tensorflow,
            "python": self.python,
            "gpu_arch": self.gpu_arch,
            "strict_driver": self.strict_driver,
            "wheelhouse": self.wheelhouse,
            "origins": dict(self.origins),
            "platform": self.platforms[0] if len(set(self.platforms)) == 1 else None,
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
    from gpuenv.compat.rules.request import parse_framework

    framework = parse_framework(framework)  # "PyTorch", "TF": one spelling from here on
    name = framework or "torch"  # the resolver's default
    torch = given("torch") or (
        settings.torch if name == "torch" and not given("tensorflow") else None
    )
    tensorflow = given("tensorflow") or (
        settings.tensorflow if name == "tensorflow" and not given("torch") else None
    )
    platforms = cli.get("platforms") or settings.platforms
    wheelhouse = given("wheelhouse")
    chosen = {
        "cuda": pick("cuda"),
        "python": pick("python"),
        "torch": torch,
        "tensorflow": tensorflow,
    }
    origins = {
        key: _origin_label(settings.source(key), key)
        for key, value in chosen.items()
        if value is not None and given(key) is None and settings.source(key) != DEFAULT_ORIGIN
    }
    from_settings = settings.source("platforms") != DEFAULT_ORIGIN
    if not cli.get("platforms") and len(set(settings.platforms)) == 1 and from_settings:
        # one platform is the stack's platform: an error names where it came from
        origins["platform"] = _origin_label(settings.source("platforms"), "platforms")
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


def effective_rows(
    settings: Settings, cli: Mapping[str, Any] | None = None
) -> list[tuple[str, str, str]]:
    """(key, value, source) for `invoke doctor`: every setting, what it is now and where it came
    from."""
    rows = []
    cli = cli or {}
    for key in KNOWN_KEYS:
        if key in cli and cli[key] not in (None, "", (), [], False):
            rows.append((key, _show(cli[key]), "command line"))
            continue
        value: Any = settings
        for part in key.replace("fleet.slurm.", "fleet.slurm_").split("."):
            value = getattr(value, part)
        if value in (None, (), False, {}) or (
            key == "fleet.outlier_floor" and settings.source(key) == DEFAULT_ORIGIN
        ):
            rows.append((key, f"({IMPLIED.get(key, 'unset')})", settings.source(key)))
        else:
            rows.append((key, _show(value), settings.source(key)))
    return rows


def _fleet_env(key: str, value: Any) -> dict[str, str]:
    """`fleet.env`: NCCL_*/GLOO_*/TORCH_* names and one-line values
    (gpuenv.fleet.slurm_job.check_env)."""
    from gpuenv.fleet.slurm_job import check_env

    if not isinstance(value, Mapping):
        raise BadInput(
            f"is {value!r}, not a mapping",
            fix="write env: followed by indented NCCL_SOCKET_IFNAME: ib0 lines",
        )
    return check_env(dict(value))


def _show(value: Any) -> str:
    return ", ".join(value) if isinstance(value, (list, tuple)) else str(value)
