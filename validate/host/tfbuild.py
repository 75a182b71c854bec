"""TensorFlow's build info read from its installed file, without importing TensorFlow.

tensorflow/python/platform/build_info.py is generated at build time as one literal
(`build_info = collections.OrderedDict([...])`), so it is parsed with `ast`, never executed. The
suite reads it before starting TensorFlow's probe to warn about a PTX-only build (the JIT at
first use can take many minutes) and to give that probe the time it needs.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

BUILD_INFO = Path("python") / "platform" / "build_info.py"


def parse_build_info(text: str) -> dict[str, Any] | None:
    """The `build_info` literal of the file's text, or None when it is not in the known shape."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "build_info" for t in node.targets)
        ):
            continue
        value = node.value
        if (
            isinstance(value, ast.Call) and value.args
        ):  # collections.OrderedDict([...]) or dict([...])
            value = value.args[0]
        try:
            data = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            return None
        return dict(data) if isinstance(data, (dict, list)) else None
    return None


def installed_build_info() -> dict[str, Any] | None:
    """The installed TensorFlow's build info, or None (not installed, or an unknown layout)."""
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / BUILD_INFO
        if path.is_file():
            return parse_build_info(path.read_text(encoding="utf-8", errors="replace"))
    return None
