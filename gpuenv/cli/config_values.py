"""The checkers of the team's settings, one per kind of value: each returns the value in its
canonical form or raises BadInput naming the key, the value and an example of a good one."""

from __future__ import annotations

import re
from typing import Any, Sequence

from gpuenv.envs import BACKENDS
from gpuenv.errors import BadInput

#: The conda platforms a lock may be made for (the lock backends: gpuenv.envs.BACKENDS).
PLATFORMS = ("linux-64", "linux-aarch64")


def after_option(message: str, value: Any) -> str:
    """The part of a parser's message after its option name: "--cuda '1' is not ..." -> "'1' is not
    ..."."""
    if message.startswith("--"):
        return message.split(" ", 1)[1] if " " in message else message
    return message


_EXAMPLES = {"python": "3.10", "cuda": "12.1", "torch": "2.3.1", "tensorflow": "2.15.1"}


def _no_float(key: str, value: Any) -> str:
    if isinstance(value, float):
        # YAML reads `python: 3.10` as the number 3.1: refuse rather than guess.
        raise BadInput(
            f"is the number {value!r} (YAML reads an unquoted 3.10 as 3.1)",
            fix=f'quote the version, e.g. {key.split(".")[-1]}: "{_EXAMPLES.get(key, value)}"',
        )
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise BadInput(
            f"{value!r} is not text", fix=f'write it as text, e.g. {key.split(".")[-1]}: "..."'
        )
    return str(value)


def as_framework(key: str, value: Any) -> str:
    from gpuenv.compat.rules.request import parse_framework

    return parse_framework(_no_float(key, value)) or ""


def as_cuda(key: str, value: Any) -> str:
    from gpuenv.compat.matrix import load_matrix
    from gpuenv.compat.rules.request import parse_cuda

    return parse_cuda(_no_float(key, value), load_matrix()) or ""


def as_python(key: str, value: Any) -> str:
    from gpuenv.compat.rules.request import parse_python

    return parse_python(_no_float(key, value)) or ""


def as_release(key: str, value: Any) -> str:
    """A framework release pin, X.Y or X.Y.Z, as text (YAML would read torch: 2.10 as 2.1)."""
    text = _no_float(key, value).strip()
    if not re.fullmatch(r"\d+\.\d+(?:\.\d+)?", text):
        raise BadInput(
            f"{text!r} is not a release",
            fix=f'give X.Y or X.Y.Z, e.g. {key}: "{_EXAMPLES.get(key, "1.2.3")}"',
        )
    return text


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def as_bool(key: str, value: Any) -> bool:
    """true/false (a variable may say 1/0, yes/no)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise BadInput(
        f"{value!r} is not true or false",
        fix=f"use {key.split('.')[-1]}: true or {key.split('.')[-1]}: false",
    )


def as_fraction(key: str, value: Any) -> float:
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


def as_backend(key: str, value: Any) -> str:
    text = _no_float(key, value).strip()
    if text not in BACKENDS:
        raise BadInput(f"{text!r} is not a lock backend", fix=f"use one of {', '.join(BACKENDS)}")
    return text


def as_string_list(key: str, value: Any) -> tuple[str, ...]:
    """A YAML list, or (from an environment variable) a comma-separated string."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)):
        items = [_no_float(key, v) for v in value]
    else:
        raise BadInput(f"{value!r} is not a list", fix=f"write it as a list: {key}: [a, b]")
    return tuple(dict.fromkeys(i.strip() for i in items if i.strip()))


def as_mirror_list(key: str, value: Any) -> tuple[str, ...]:
    """CHANNEL=URL items: conda-forge=file:///srv/mirror/conda-forge (URL: file://, http:// or https://)."""
    items = as_string_list(key, value)
    for item in items:
        channel, _, url = item.partition("=")
        if not channel.strip() or not url.strip().startswith(("file://", "http://", "https://")):
            raise BadInput(
                f"{item!r} is not CHANNEL=URL",
                fix=f"write it as {key}: [conda-forge=file:///srv/mirrors/conda-forge]",
            )
    return items


def mirror_map(items: Sequence[str]) -> dict[str, str]:
    """The CHANNEL=URL items of gpuenv.conda_mirrors as a mapping."""
    return {
        channel.strip(): url.strip() for channel, _, url in (item.partition("=") for item in items)
    }


def as_platforms(key: str, value: Any) -> tuple[str, ...]:
    items = as_string_list(key, value)
    for item in items:
        if item not in PLATFORMS:
            raise BadInput(f"{item!r} is not a known platform", fix=f"use {' or '.join(PLATFORMS)}")
    return items


_IMAGE_NAME = re.compile(r"[a-z0-9][a-z0-9._/:-]*(?:@sha256:[0-9a-f]{64})?")


def as_image_name(key: str, value: Any) -> str:
    text = _no_float(key, value).strip()
    if not _IMAGE_NAME.fullmatch(text.split("/", 1)[-1] if "/" in text else text) or any(
        c.isspace() for c in text
    ):
        raise BadInput(
            f"{text!r} is not an image name",
            fix="use e.g. nvidia/cuda:12.1.1-base-ubuntu22.04 (lower case, no spaces)",
        )
    return text


def as_gpu_count(key: str, value: Any) -> int:
    """A number of GPUs: 0 or more (0: CPU-only servers, said on purpose)."""
    if value == 0 and not isinstance(value, (bool, float)):
        return 0
    return as_positive_int(key, value)


def as_positive_int(key: str, value: Any) -> int:
    if isinstance(value, (bool, float)):
        # YAML reads `parallel: yes` as true and `8.5` as a float: neither is a count
        raise BadInput(
            f"{value!r} is not a whole number",
            fix=f"use a whole number, e.g. {key.split('.')[-1]}: 8",
        )
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BadInput(
            f"{value!r} is not a number", fix=f"use a whole number, e.g. {key}: 4"
        ) from None
    if number < 1 or isinstance(value, (bool, float)):
        raise BadInput(f"{value!r} is not a whole number of 1 or more", fix=f"use e.g. {key}: 4")
    return number


def as_text(key: str, value: Any) -> str:
    return _no_float(key, value).strip()


_REGISTRY = re.compile(
    r"(?P<host>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:]+\])(?::(?P<port>\d{1,5}))?"
)


def parse_registry(value: Any, option: str = "--registry") -> str:
    """HOST[:PORT] of an image registry, lower-cased; a scheme, a path or a bad port is a
    BadInput."""
    text = str(value).strip()
    if "://" in text:
        raise BadInput(
            f"{option} {text!r} has a scheme",
            fix=f"give HOST[:PORT] only, e.g. {option} {text.split('://', 1)[1].split('/')[0]}",
        )
    if "/" in text:
        raise BadInput(
            f"{option} {text!r} has a path",
            fix=f"give HOST[:PORT] only, e.g. {option} {text.split('/')[0]}; images go to "
            "HOST/gpuenv/<stack>",
        )
    match = _REGISTRY.fullmatch(text.lower())
    if not match or "." not in text and ":" not in text and text.lower() != "localhost":
        raise BadInput(
            f"{option} {text!r} is not a registry host",
            fix="give HOST[:PORT], e.g. registry.example.com or 127.0.0.1:5000 (a bare name "
            "would be read as a Docker Hub user)",
        )
    port = match.group("port")
    if port is not None and not 0 < int(port) < 65536:
        raise BadInput(
            f"{option} {text!r}: port {port} is out of range", fix="use a port between 1 and 65535"
        )
    return text.lower()


# ---------------------------------------------------------------- the one stack request
