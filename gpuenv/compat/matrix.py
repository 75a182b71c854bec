"""Load and validate envs/compat.yaml, the compatibility facts the resolver decides from.

The facts live in data, each entry with its source; the model is matrix_model.py, the parsers
with their checks matrix_parse.py, and this module reads the file (UTF-8, YAML without duplicate
keys) and caches the result. Callers import every name from here.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from gpuenv.compat.matrix_model import (
    COMPAT_FILE,
    Aarch64Builds,
    CudaImage,
    CudaMajor,
    CudaRelease,
    CudaUpdate,
    CudnnTag,
    DriverBranch,
    GpuArchitecture,
    IntegratedGpu,
    Matrix,
    PlatformTorch,
    PythonRelease,
    TensorflowRelease,
    TorchRelease,
    TorchVariant,
    version_key,
)
from gpuenv.compat.matrix_parse import SCHEMA, parse_matrix
from gpuenv.datacache import parsed_once
from gpuenv.errors import DataError

__all__ = [
    "COMPAT_FILE",
    "Aarch64Builds",
    "PlatformTorch",
    "SCHEMA",
    "CudaImage",
    "CudaMajor",
    "CudaRelease",
    "CudaUpdate",
    "CudnnTag",
    "DriverBranch",
    "GpuArchitecture",
    "IntegratedGpu",
    "Matrix",
    "PythonRelease",
    "TensorflowRelease",
    "TorchRelease",
    "TorchVariant",
    "load_matrix",
    "parse_matrix",
    "version_key",
]


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's parser when present (the pure-Python one is most of `invoke resolve`'s time),
    refusing duplicate keys."""

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_matrix(path: Path | None = None) -> Matrix:
    """Read and validate the compatibility file (cached per path)."""
    return _load(Path(path or COMPAT_FILE).resolve())


@lru_cache(maxsize=4)
def _load(path: Path) -> Matrix:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DataError(
            f"cannot read compatibility data {path}: {err.strerror}",
            fix="restore envs/compat.yaml from the repository",
        ) from None
    # the YAML parsed once per content (gpuenv/datacache.py); parse_matrix checks it every time
    data = parsed_once(raw, lambda raw: _parse_yaml(raw, path), name=path.name, kind=_YAML_KIND)
    return parse_matrix(data, path)


#: What turns the file's bytes into data, for the cache's key: change the version when
#: `_UniqueKeyLoader` or `_parse_yaml` changes what they make of a file.
_YAML_KIND = f"compat.yaml v1, PyYAML {yaml.__version__}, {_UniqueKeyLoader.__mro__[1].__name__}"


def _parse_yaml(raw: bytes, path: Path) -> Any:
    """The file's data: UTF-8 YAML without duplicate keys, else a DataError naming the place."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path} is not UTF-8 text (byte {err.start})", fix="save it as UTF-8"
        ) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise DataError(
            f"{path}:{line} is not valid YAML ({getattr(err, 'problem', err)})",
            fix="fix the syntax",
        ) from None
