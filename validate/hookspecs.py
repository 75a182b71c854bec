"""The hooks the suite's plugin (validate/conftest.py) declares for other pytest plugins to answer,
as pytest's own `_pytest/hookspec.py` declares its hooks: a plugin given with `-p` implements one to
change what the suite reads, instead of rebinding a name inside the suite's modules."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_validate_nvml_module(config: pytest.Config) -> Any | None:
    """The NVML module the suite reads as this host's, in place of pynvml (the first plugin that
    answers wins; None: no answer). Asked once, when the session starts, and not for a --replay
    run (the capture is the host then); a --record run records what this module answers.

    The module answers as nvidia-ml-py does (nvmlInit, nvmlDeviceGetCount, ... and its NVMLError
    classes), like validate.host.replay.ReplayNvml."""
