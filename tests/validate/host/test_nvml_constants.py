"""The NVML constants the suite defines once (validate/host/capture.py) are pynvml's own: a
recording's argument keys and a replay's answers must mean what they mean on a live host."""

from __future__ import annotations

import pytest

from validate.host.capture import NvmlConstants
from validate.host.replay import ReplayNvml


def _ours() -> dict[str, int]:
    return {
        name: value
        for name, value in vars(NvmlConstants).items()
        if name.startswith(("NVML_", "nvmlMemory_"))
    }


def test_the_constants_are_the_installed_nvidia_ml_pys():
    pynvml = pytest.importorskip(
        "pynvml",
        reason="nvidia-ml-py (pynvml) is not installed, so there is nothing to compare with",
    )
    assert _ours(), "NvmlConstants defines no constant"
    assert {name: getattr(pynvml, name, None) for name in _ours()} == _ours()


def test_the_replay_answers_the_same_constants():
    replay = ReplayNvml({"devices": [], "system": {}})
    assert {name: getattr(replay, name) for name in _ours()} == _ours()
