"""The framework index serves the framework packages only (dependency confusion, issue 10 item 6).

A simple index on 127.0.0.1 plays the PyTorch index: it holds the real torch 2.13.0+cpu wheel
from /opt/wheels and a decoy `numpy` 99.0.0. Under uv's first-index rule a plain
`--extra-index-url` takes numpy from it; gpuenv's lock must take numpy from PyPI.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import os
import threading
import zipfile
from pathlib import Path

import pytest
from lockcases import CPU_TORCH_WHEEL, TORCH_CPU

from gpuenv.envs import uv
from gpuenv.envs.locking import ensure_lock, read_requirements_lock

pytestmark = pytest.mark.network

DECOY = "numpy-99.0.0-py3-none-any.whl"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def decoy_index(tmp_path, cpu_wheelhouse):
    """http://127.0.0.1:<port>/whl/cpu: torch (real wheel) and a decoy numpy; yields (url, served
    paths, decoy hash)."""
    root = tmp_path / "index"
    files = root / "files"
    files.mkdir(parents=True)
    decoy = files / DECOY
    with zipfile.ZipFile(decoy, "w") as z:
        z.writestr(
            "numpy/__init__.py", "raise ImportError('decoy numpy from the framework index')\n"
        )
        z.writestr(
            "numpy-99.0.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: numpy\nVersion: 99.0.0\n",
        )
        z.writestr(
            "numpy-99.0.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: decoy\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr("numpy-99.0.0.dist-info/RECORD", "")
    os.symlink(CPU_TORCH_WHEEL, files / CPU_TORCH_WHEEL.name)
    for name, wheel in (("numpy", decoy), ("torch", CPU_TORCH_WHEEL)):
        page = root / "whl" / "cpu" / name
        page.mkdir(parents=True)
        href = f"../../../files/{wheel.name.replace('+', '%2B')}#sha256={_sha256(wheel)}"
        (page / "index.html").write_text(f'<a href="{href}">{wheel.name}</a>\n')

    served: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, fmt, *args):
            served.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu", served, _sha256(decoy)
    finally:
        server.shutdown()
        server.server_close()


def test_plain_extra_index_takes_the_decoy(decoy_index, pypi, tmp_path):
    """The failure this guards against is real: `--extra-index-url` gives the decoy numpy."""
    url, _served, _ = decoy_index
    req = tmp_path / "requirements.in"
    req.write_text("torch==2.13.0+cpu\nnumpy\n")
    out = tmp_path / "lock.txt"
    cmd = uv.uv_compile_command(
        uv=uv.uv_binary(),
        requirements=req,
        output=out,
        python="3.11",
        python_platform="x86_64-manylinux_2_28",
        extra_index_urls=[url],
    )
    uv.run_uv_compile(cmd, cwd=tmp_path)
    assert "numpy==99.0.0" in out.read_text()


def test_lock_takes_numpy_from_pypi_not_the_framework_index(decoy_index, pypi, locks_dir, tmp_path):
    url, served, decoy_hash = decoy_index
    stack = dataclasses.replace(TORCH_CPU, index_url=url)
    team = tmp_path / "team.yml"
    team.write_text("pip:\n  - numpy\n")

    result = ensure_lock(stack, backend="uv", team_file=team)

    text = result.files.read_text()
    pins = {p.name: p for p in read_requirements_lock(result.files)}
    assert pins["torch"].version == "2.13.0+cpu"
    assert pins["numpy"].version != "99.0.0", text
    assert decoy_hash not in text
    assert _sha256(CPU_TORCH_WHEEL) in text  # torch did come from the framework index
    assert not any("/numpy" in p for p in served), (
        f"uv asked the framework index for numpy: {served}"
    )
    # pip install --require-hashes needs the framework index for torch; the hashes pin every file
    assert f"--extra-index-url {url}" in text


def test_uv_lock_project_pins_only_framework_packages():
    text = uv.uv_lock_project(
        ["torch==2.5.1+cu121", "numpy<2", "jinja2"], "https://download.pytorch.org/whl/cu121"
    )
    assert 'torch = { index = "framework" }' in text
    assert "numpy = {" not in text and "jinja2 = {" not in text
    assert "explicit = true" in text and '"numpy<2",' in text
