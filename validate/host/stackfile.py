"""The image's stack record (/opt/gpuenv/stack.json, named by GPUENV_STACK_FILE): what the image
was built for (framework, CUDA, cuDNN, min_driver). Absent outside gpuenv images."""

from __future__ import annotations

import json
import os
from typing import Any

STACK_FILE_ENV = "GPUENV_STACK_FILE"


def read_stack_file() -> dict[str, Any] | None:
    """The stack record, or None outside an image or when unreadable (the environment check
    reports an unreadable stack file)."""
    path = os.environ.get(STACK_FILE_ENV)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
