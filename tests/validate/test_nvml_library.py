"""A host without NVML's library (no NVIDIA driver) is answered without importing pynvml: the
answer is the one pynvml itself gives there (NVMLError_LibraryNotFound, NO_DRIVER), in a fraction
of the time, which is most of `invoke resolve`'s host read on a machine without a GPU."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

from validate.host import nvml

REPO = Path(__file__).resolve().parents[2]


def library_opens() -> bool:
    try:
        ctypes.CDLL(nvml.NVML_LIBRARY)
    except OSError:
        return False
    return True


no_library_here = pytest.mark.skipif(
    library_opens(), reason=f"needs a host where {nvml.NVML_LIBRARY} cannot be opened"
)


@no_library_here
def test_pynvml_itself_finds_no_library_here():
    """What the shortcut stands in for: nvidia-ml-py's own nvmlInit on this host."""
    pynvml, error = nvml.import_pynvml()
    if pynvml is None:
        pytest.skip(error)
    assert nvml.library_missing()
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()


@no_library_here
def test_a_host_without_the_library_is_read_without_pynvml():
    code = (
        "import sys, json; from validate.host import nvml; host = nvml.read_host();"
        "print(json.dumps([host.error, host.gpus, 'pynvml' in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [nvml.NO_DRIVER, [], False]


def test_the_library_is_not_looked_for_where_pynvml_must_answer(monkeypatch):
    """Another OS loads NVML elsewhere (nvml.dll): pynvml is asked there, as before."""
    monkeypatch.setattr(sys, "platform", "win32")
    assert not nvml.library_missing()
