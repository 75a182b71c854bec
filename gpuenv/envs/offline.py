"""Whether a conda lock can be installed with no network: one rule for `invoke install --offline`
and `invoke build --offline`, so both accept the same channels.

Every conda package is read from where the lock names it, through its channel's mirror when one
is set (gpuenv.envs.conda: mirrored). With no network that place must be a folder: a `file://`
channel the lock was solved from, or a `file://` mirror of an http(s) channel.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from gpuenv.envs import conda, lockdir
from gpuenv.errors import BadInput, DataError
from validate.reading import InputRefused, read_text_input

FIX = (
    "set gpuenv.conda_mirrors in invoke.yaml to a file:// copy of that channel "
    "(or lock from a file:// channel)"
)


def offline_problem(lock_path: Path, mirrors: Mapping[str, str]) -> str | None:
    """The first conda package of the lock that would need the network, as "python 3.11.7 from
    https://...", or None when every one is read from a folder."""
    try:
        data = yaml.safe_load(read_text_input(lock_path, lockdir.MAX_LOCK_TEXT_BYTES))
    except (InputRefused, yaml.YAMLError) as err:
        raise DataError(f"{lock_path}: cannot be read ({err})", fix=lockdir.RELOCK) from None
    for entry in (data or {}).get("package") or [] if isinstance(data, dict) else []:
        if not isinstance(entry, dict) or entry.get("manager") != "conda":
            continue
        url = conda.mirrored(str(entry.get("url", "")), mirrors)
        if not url.startswith("file://"):
            where = url.rsplit("/", 2)[0]
            name = f"{entry.get('name')} {entry.get('version')}"
            return f"{name} comes from {where}, which needs the network"
    return None


def require_local_channels(lock_path: Path, mirrors: Mapping[str, str]) -> bool:
    """True when every conda package of the lock is read from a folder; else BadInput naming the
    package and the channel that needs the network (install --offline and build --offline)."""
    problem = offline_problem(lock_path, mirrors)
    if problem:
        raise BadInput(f"--offline: {problem}", fix=FIX)
    return True
