"""Invoke's config files, read with bounds: what `invoke.yaml`, `~/.invoke.yaml`, `/etc/invoke.yaml`
and `-f FILE` may be before Invoke merges them.

Invoke reads these files with `yaml.safe_load` and no limits: an alias bomb of 400 bytes runs for
minutes, non-UTF-8 bytes, a list at the top level or a folder given to `-f` end in a traceback, a
missing `-f` file is silently skipped, and YAML 1.1 reads `time: 1:00:00` as the number 3600.
`GpuenvConfig` is Invoke's Config with a loader that refuses each of these in one line
(`ConfigFileError`, exit 2) and reads `1:00:00` as the text it looks like. Task layer only.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any

import yaml
from invoke.config import Config

from gpuenv.cli.defaults import SECTION
from gpuenv.errors import BadInput
from validate.reading import (
    InputRefused,
    RepeatedKey,
    load_json_input,
    read_text_input,
    refusal_line,
)

#: A config file is a page of settings: far bigger is a mistake (or an attack), refused unread.
MAX_CONFIG_BYTES = 1024 * 1024
#: YAML aliases allowed in one file (a team file needs none; a bomb needs dozens).
MAX_ALIASES = 64
#: Values (mappings, lists, scalars) a file may expand to, aliases followed: bounds the merge's
#: work.
MAX_NODES = 100_000
#: Nesting of mappings and lists (invoke.yaml needs 4).
MAX_DEPTH = 50
#: Digits in one number: no setting is longer, and int() of thousands of digits is refused by
#: Python.
MAX_DIGITS = 30
SUFFIXES = ("yaml", "yml", "json")
FIX = "fix the file (see the committed invoke.yaml)"


class ConfigFileError(BadInput):
    """A config file that cannot be used: one line naming the file and what is wrong with it."""


_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader (libyaml when present) without YAML 1.1's base-60 and leading-zero octal
    numbers.

    `1:00:00` stays the text "1:00:00" (Slurm reads it as an hour) instead of the number 3600, and
    `010` the text "010" instead of the number 8; every other implicit type is PyYAML's own.
    """


def _without_sexagesimal() -> dict:
    resolvers: dict = {}
    for first, entries in yaml.SafeLoader.yaml_implicit_resolvers.items():
        kept = []
        for tag, regexp in entries:
            if tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
                # drop the alternatives with '(?::' (the base-60 forms), keep the rest as PyYAML has
                # them
                body = regexp.pattern.strip().removeprefix("^(?:").removesuffix(")$")
                kept_alternatives = [
                    alt.strip()
                    for alt in body.split("\n")
                    if "(?::" not in alt and "0[0-7_]+" not in alt
                ]
                regexp = re.compile("^(?:" + "".join(kept_alternatives).lstrip("|") + ")$", re.X)
            kept.append((tag, regexp))
        resolvers[first] = kept
    return resolvers


_Loader.yaml_implicit_resolvers = _without_sexagesimal()


class _RepeatedKey(Exception):
    """A key given twice in one mapping: (key, line of the first, line of the second)."""


def _construct_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
    """PyYAML's mapping, but a key given twice is refused (PyYAML keeps the last silently: a
    second `gpuenv:` block would drop every pin of the first). Merge keys (`<<`) may override."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                key_node, yaml.ScalarNode
            ):
                continue
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                raise _RepeatedKey(key, seen[key], key_node.start_mark.line + 1)
            seen[key] = key_node.start_mark.line + 1
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.construct_mapping = _construct_mapping


class _LongNumber(Exception):
    """A number of more digits than any setting has: (digits, line)."""


def _bounded_number(kind: str) -> Any:
    """PyYAML's int or float constructor behind a digit count: int() of 5,000 digits is a
    ValueError (Python's own limit) and of 4,000 slow, and no setting is that long."""
    construct = getattr(yaml.SafeLoader, f"construct_yaml_{kind}")

    def bounded(loader: Any, node: Any) -> Any:
        digits = sum(
            char.isalnum() for char in re.sub(r"^[-+]?0[xob]", "", str(node.value))
        )  # hex and octal digits too
        if digits > MAX_DIGITS:
            raise _LongNumber(digits, node.start_mark.line + 1)
        return construct(loader, node)

    return bounded


_Loader.add_constructor("tag:yaml.org,2002:int", _bounded_number("int"))
_Loader.add_constructor("tag:yaml.org,2002:float", _bounded_number("float"))


def _read(path: str, *, runtime: bool) -> str:
    """The text of a config file through the one bounded reader (validate.reading): a small regular
    file, UTF-8 or marked UTF-16; ConfigFileError naming the file otherwise. A missing file is
    FileNotFoundError (Invoke skips the layers nobody wrote) unless it was asked for by name."""
    if not os.path.exists(path):
        if runtime:
            raise ConfigFileError(
                f"-f {path}: no such config file",
                fix="give the path of a .yaml, .yml or .json file",
            )
        raise FileNotFoundError(
            errno.ENOENT, os.strerror(errno.ENOENT), path
        )  # with its errno: Invoke skips on ENOENT
    try:
        return read_text_input(path, MAX_CONFIG_BYTES)
    except InputRefused as err:
        fix = "give the path of a .yaml, .yml or .json file" if "regular file" in str(err) else FIX
        raise ConfigFileError(f"{path}: {err}", fix=fix) from None


def _count(value: Any, budget: int) -> int:
    """How many values `value` expands to (aliases counted each time they are used), stopping past
    `budget`."""
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        total += 1
        if total > budget:
            return total
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total


def load_text(text: str, name: str, kind: str) -> dict:
    """The data of one config file's text (kind: yaml, yml or json), checked; ConfigFileError
    otherwise."""
    data = _load_json(text, name) if kind == "json" else _load_yaml(text, name)
    if data is None:
        return {}
    _check_top_level(data, name)
    if SECTION in data:
        section = _without_nulls(data[SECTION])
        if section is None:
            del data[SECTION]  # `gpuenv:` with every key commented out
        else:
            data[SECTION] = section
    return data


def _load_json(text: str, name: str) -> Any:
    try:  # the reader every untrusted JSON goes through: depth, integer size, repeated decoded keys
        return load_json_input(text, max_depth=MAX_DEPTH, max_digits=MAX_DIGITS)
    except RepeatedKey as err:
        raise _repeated_error(name, err.key, err.first, err.line or 0) from None
    except InputRefused as err:
        raise ConfigFileError(refusal_line(name, err), fix=FIX) from None


def _too_deep(name: str) -> ConfigFileError:
    return ConfigFileError(f"{name}: nested more than {MAX_DEPTH} levels deep", fix=FIX)


def _check_yaml_shape(text: str, name: str) -> None:
    """Aliases and nesting counted on the parser's events, before any nesting is built."""
    aliases = depth = 0
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.AliasEvent):
                aliases += 1
            elif isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:  # libyaml's composer recurses in C: deeper would crash
                    raise _too_deep(name)
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
    except yaml.YAMLError as err:
        # PyYAML >= 6.0.3's libyaml refuses deep nesting before we count it
        if "nesting depth" in str(getattr(err, "problem", "") or ""):
            raise _too_deep(name) from None
        raise ConfigFileError(_yaml_problem(err, name), fix=FIX) from None
    if aliases > MAX_ALIASES:
        raise ConfigFileError(
            f"{name} uses {aliases} YAML aliases; at most {MAX_ALIASES} are allowed",
            fix="write the values out",
        )


def _load_yaml(text: str, name: str) -> Any:
    _check_yaml_shape(text, name)
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a safe loader)
    except _RepeatedKey as err:
        raise _repeated_error(name, *err.args) from None
    except _LongNumber as err:
        digits, line = err.args
        raise ConfigFileError(
            f"{name}:{line}: a {digits}-digit number; at most {MAX_DIGITS} digits are read",
            fix=FIX,
        ) from None
    except yaml.YAMLError as err:
        raise ConfigFileError(_yaml_problem(err, name), fix=FIX) from None
    except RecursionError:
        raise ConfigFileError(f"{name}: nested too deeply", fix=FIX) from None


def _check_top_level(data: Any, name: str) -> None:
    """A mapping, with no misspelt `gpuenv:` section, of a bounded number of values."""
    if not isinstance(data, dict):
        what = {list: "a list", str: "a text"}.get(type(data), f"a {type(data).__name__}")
        raise ConfigFileError(
            f"{name}: the top level is {what}, not a mapping",
            fix="write `gpuenv:` followed by indented `key: value` lines",
        )
    near = [key for key in data if isinstance(key, str) and key != SECTION and _near_section(key)]
    if near:
        raise ConfigFileError(
            f"{name}: unknown section {near[0]!r}", fix=f"did you mean `{SECTION}:`?"
        )
    if _count(data, MAX_NODES) > MAX_NODES:
        raise ConfigFileError(
            f"{name} expands to more than {MAX_NODES} values", fix="write a smaller file"
        )


def _repeated_error(name: str, key: Any, first: int, second: int) -> ConfigFileError:
    return ConfigFileError(
        f"{name}:{second}: {str(key)[:60]!r} is given again (first on line {first}); "
        "only one would count, silently",
        fix="merge the two into one",
    )


def _near_section(key: str) -> bool:
    """`gpuenvs:`, `gpu_env:`, `GPUenv:`: a mistyped `gpuenv:` section, whose keys would be
    ignored."""
    import difflib

    folded = key.lower().replace("_", "").replace("-", "").strip()
    return folded == SECTION or difflib.SequenceMatcher(None, folded, SECTION).ratio() >= 0.8


def _without_nulls(value: Any) -> Any:
    """The `gpuenv:` section with every `key: null` left out: null means "not set here", so a
    lower layer's value (~/.invoke.yaml, /etc/invoke.yaml) is not hidden by Invoke's merge."""
    if isinstance(value, dict):
        kept = {k: _without_nulls(v) for k, v in value.items()}
        kept = {k: v for k, v in kept.items() if v is not None}
        return kept or None
    return value


def _yaml_problem(err: yaml.YAMLError, name: str) -> str:
    mark = getattr(err, "problem_mark", None)
    where = f"{name}:{mark.line + 1}" if mark is not None else name
    return f"{where}: not valid YAML ({getattr(err, 'problem', None) or str(err).splitlines()[0]})"


def load_file(path: str, *, runtime: bool = False) -> dict:
    """One config file, bounded and checked (ConfigFileError names it); a missing file raises
    FileNotFoundError unless it was asked for by name (`runtime`: `-f`)."""
    kind = os.path.splitext(path)[1].lstrip(".").lower()
    if kind not in SUFFIXES:
        if runtime:
            _read(path, runtime=True)  # a missing file or a folder is named as such first
            raise ConfigFileError(
                f"-f {path}: not a .yaml, .yml or .json file",
                fix="give a config file whose name ends in .yaml, .yml or .json",
            )
        raise ConfigFileError(f"{path}: not a .yaml, .yml or .json file", fix=FIX)
    return load_text(_read(path, runtime=runtime), path, kind)


class GpuenvConfig(Config):
    """Invoke's Config whose files are read by `load_file`: bounded, checked, one line when bad."""

    def _load_file(self, prefix: str, absolute: bool = False, merge: bool = True) -> None:
        if prefix == "runtime" and getattr(self, "_runtime_found", None) is None:
            path = getattr(self, "_runtime_path", None)
            if path is not None:
                # Invoke skips a missing -f file silently and would read a .txt or /dev/null by
                # suffix
                self._set("_runtime", load_file(os.path.expanduser(str(path)), runtime=True))
                self._set("_runtime_found", True)
                if merge:
                    self.merge()
                return
        super()._load_file(prefix, absolute, merge)

    def load_shell_env(self) -> None:
        """INVOKE_* variables, as Invoke reads them, at a cost that does not grow with the files.

        Invoke crawls every key of the merged config and copies its map of variable names at each
        step: a file with a 14,000-key section costs seconds per command. Only the sections some
        INVOKE_* variable names are crawled here. The `gpuenv` section is read against its
        defaults (all unset), so every variable arrives as text for gpuenv.cli.config to check: a
        value a file set to a list or a number cannot turn a variable into a traceback.
        """
        import copy

        from invoke.env import Environment
        from invoke.exceptions import AmbiguousEnvVar, UncastableEnvVar

        from gpuenv.cli.defaults import DEFAULTS

        self.merge()
        prefix = self._env_prefix or ""
        names = [name for name in os.environ if name.startswith(prefix)]

        def named(key: str) -> bool:
            upper = prefix + str(key).upper()
            return any(name == upper or name.startswith(upper + "_") for name in names)

        basis = {key: value for key, value in self._config.items() if key != SECTION and named(key)}
        if named(SECTION):
            basis[SECTION] = copy.deepcopy(DEFAULTS)
        try:
            data = Environment(config=basis, prefix=prefix).load() if basis else {}
        except (AmbiguousEnvVar, UncastableEnvVar, ValueError, TypeError) as err:
            raise ConfigFileError(
                f"an {prefix}* variable cannot be used ({err})",
                fix="unset it, or give it a value of the key's type",
            ) from None
        self._set(_env=data)
        self.merge()

    def _load_yaml(self, path: Any) -> Any:
        return load_file(str(path))

    _load_yml = _load_yaml

    def _load_json(self, path: Any) -> Any:
        return load_file(str(path))


def check_project_file(folder: Path) -> None:
    """The project config beside tasks.py, read as GpuenvConfig would (ConfigFileError when bad)."""
    for suffix in SUFFIXES:
        path = folder / f"invoke.{suffix}"
        if path.exists():
            load_file(str(path))
            return
