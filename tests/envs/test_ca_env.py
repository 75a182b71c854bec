"""`--ca-cert` reaches every downloader of the install stage (docker/ca-env.sh).

A loopback HTTPS server, its certificate signed by a private CA made here, stands in for a
TLS-inspecting proxy. Each downloader the install stage can run fetches from it twice through
the real ca-env.sh: without the CA it must refuse the certificate, with it it must succeed. So a
variable that a tool ignores turns a test red.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import ssl
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from imagecases import ROOT

CA_ENV = ROOT / "docker" / "ca-env.sh"
PACKAGE = "gpuenv-ca-probe"
WHEEL = "gpuenv_ca_probe-1.0-py3-none-any.whl"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def private_ca(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(ca.pem, server.pem, server.key): a CA no system trusts, and a 127.0.0.1 certificate it
    signed."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (Debian package openssl)")
    d = tmp_path_factory.mktemp("ca")
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=gpuenv test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        cwd=d,
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        cwd=d,
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.pem",
        cwd=d,
    )
    return d / "ca.pem", d / "server.pem", d / "server.key"


def _make_wheel(path: Path) -> str:
    dist = "gpuenv_ca_probe-1.0.dist-info"
    files = {
        "gpuenv_ca_probe.py": "OK = True\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 1.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpuenv-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{dist}/RECORD", "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def https_server(private_ca, tmp_path_factory):
    """A simple index over HTTPS on 127.0.0.1, stopped afterwards."""
    _, cert, key = private_ca
    root = tmp_path_factory.mktemp("www")
    (root / "files").mkdir()
    sha = _make_wheel(root / "files" / WHEEL)
    (root / "simple" / PACKAGE).mkdir(parents=True)
    (root / "simple" / PACKAGE / "index.html").write_text(
        f'<html><body><a href="/files/{WHEEL}#sha256={sha}">{WHEEL}</a></body></html>\n'
    )

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):  # keep test output clean
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _through_ca_env(
    ca: Path | None, command: list[str], tmp_path: Path
) -> subprocess.CompletedProcess:
    """Run `command` as install-env.sh would: after sourcing ca-env.sh with `ca` (None: not
    sourced)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "REQUESTS_CA_BUNDLE",
            "PIP_CERT",
            "CURL_CA_BUNDLE",
        }
    }
    env.update(
        {
            "HOME": str(tmp_path),
            "UV_NO_CACHE": "1",
            "PIP_NO_CACHE_DIR": "1",
            "PIP_CONFIG_FILE": os.devnull,
            "UV_NO_CONFIG": "1",
        }
    )
    script = '. "$0" "$1" && shift && exec "$@"' if ca else 'shift && exec "$@"'
    return subprocess.run(
        ["bash", "-c", script, str(CA_ENV), str(ca or ""), *command],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _both_ways(ca: Path, command: list[str], tmp_path: Path) -> None:
    refused = _through_ca_env(None, command, tmp_path)
    assert refused.returncode != 0, (
        f"{command[0]} trusted a private CA without being told: {refused.stdout}{refused.stderr}"
    )
    said = (refused.stdout + refused.stderr).lower()
    assert any(word in said for word in ("certificate", "ssl", "tls")), (
        f"{command[0]} failed for another reason: {said[-1500:]}"
    )
    trusted = _through_ca_env(ca, command, tmp_path)
    assert trusted.returncode == 0, (
        f"{command[0]} ignored the CA that ca-env.sh set:\n"
        f"{trusted.stdout[-1500:]}{trusted.stderr[-1500:]}"
    )


def test_uv_gets_the_ca(private_ca, https_server, tmp_path):
    from gpuenv.envs.uv import uv_binary

    ca = private_ca[0]
    _both_ways(
        ca,
        [
            uv_binary(),
            "pip",
            "install",
            "--target",
            str(tmp_path / "t"),
            "--no-deps",
            "--index-url",
            f"{https_server}/simple/",
            PACKAGE,
        ],
        tmp_path,
    )
    assert (tmp_path / "t" / "gpuenv_ca_probe.py").is_file()


def test_pip_gets_the_ca(private_ca, https_server, tmp_path):
    ca = private_ca[0]
    _both_ways(
        ca,
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--retries",
            "0",
            "-d",
            str(tmp_path / "d"),
            "--index-url",
            f"{https_server}/simple/",
            PACKAGE,
        ],
        tmp_path,
    )
    assert (tmp_path / "d" / WHEEL).is_file()


def test_curl_gets_the_ca(private_ca, https_server, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    _both_ways(
        private_ca[0],
        ["curl", "-fsS", "-o", str(tmp_path / "out"), f"{https_server}/simple/{PACKAGE}/"],
        tmp_path,
    )
