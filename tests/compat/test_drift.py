"""The drift check: pure comparison on recorded PyPI responses, range reads on a loopback server,
and real PyPI.

tests/compat/fixtures/pypi/ holds PyPI JSON API documents recorded on 2026-11-23 (trimmed to the
Linux x86_64 wheels) and the Requires-Dist lines of the wheels the check read.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import threading
import zipfile
from dataclasses import replace
from datetime import date
from pathlib import Path

import pytest

from gpuenv.compat.drift import (
    compare,
    gather,
    newest_upstream,
    parse_build_info,
    stale_days,
    tensorflow_cuda,
    torch_cuda,
    torch_cuda_update,
)
from gpuenv.compat.matrix import load_matrix
from gpuenv.compat.matrix_view import format_drift
from gpuenv.compat.pypi import (
    IndexSettings,
    IndexUnreachable,
    PyPI,
    parse_pip_config,
    settings_from_pip_config,
)

FIXTURES = Path(__file__).parent / "fixtures" / "pypi"
BUILD_INFO = Path(__file__).parent / "fixtures" / "tensorflow_build_info"


class Replay:
    """Answers like gpuenv.compat.pypi.PyPI from recorded responses (observations, not logic)."""

    def __init__(self, overrides: dict | None = None) -> None:
        self.docs = {
            p.stem: json.loads(p.read_text())
            for p in FIXTURES.glob("*.json")
            if p.stem != "metadata"
        }
        self.docs.update(overrides or {})
        self.metadata = json.loads((FIXTURES / "metadata.json").read_text())

    def project(self, name):
        return self.docs[name]

    def file_url(self, name, url):
        return url

    def wheel_metadata(self, url, size, pep658=False):
        return self.metadata[url.rsplit("/", 1)[1]]

    def wheel_member(self, url, size, wanted):
        assert wanted == "tensorflow/python/platform/build_info.py", wanted
        version = url.rsplit("/", 1)[1].split("-")[1]
        return (BUILD_INFO / f"{version}.py").read_text()


def test_recorded_pypi_agrees_with_the_data():
    m = load_matrix()
    report = compare(m, gather(Replay(), m))
    assert report.findings == [], report.findings
    assert not report.drift
    assert "current" in format_drift(report)
    # the data's own open items are listed for curation, not counted as drift
    assert (
        "CUDA 13.4.1: driver floor unknown" in report.pending
        and "torch 2.15 cu130: unconfirmed" in report.pending
    )


def _drop_torch(m, series):
    return replace(m, torch_releases=tuple(t for t in m.torch_releases if t.series != series))


@pytest.mark.parametrize(
    "mutate, kind, subject, fragment",
    [
        # a release the data lacks, with its PyPI CUDA from Requires-Dist (cuda-toolkit==13.2.2)
        (lambda m: _drop_torch(m, "2.15"), "torch release", "2.15.0", "pins CUDA 13.2"),
        # the PyPI default CUDA disagrees (2.14.1 pins cuda-toolkit 13.0.3)
        (
            lambda m: replace(
                m,
                torch_releases=tuple(
                    replace(t, pypi_default_cuda="13.2") if t.series == "2.14" else t
                    for t in m.torch_releases
                ),
            ),
            "torch PyPI-default CUDA",
            "2.14",
            "13.0",
        ),
        # the data has no variant for the PyPI default build
        (
            lambda m: replace(
                m,
                torch_releases=tuple(
                    replace(t, variants=tuple(v for v in t.variants if v.name != "cu132"))
                    if t.series == "2.15"
                    else t
                    for t in m.torch_releases
                ),
            ),
            "torch build",
            "2.15 cu132",
            "CUDA 13.2 build",
        ),
        # TensorFlow's and-cuda pins disagree (2.18 pins CUDA 12.5, cuDNN 9.3)
        (
            lambda m: replace(
                m,
                tensorflow_releases=tuple(
                    replace(t, cuda="12.3") if t.series == "2.18" else t
                    for t in m.tensorflow_releases
                ),
            ),
            "tensorflow and-cuda",
            "2.18",
            "CUDA 12.5, cuDNN 9.3",
        ),
        (
            lambda m: replace(
                m, tensorflow_releases=tuple(t for t in m.tensorflow_releases if t.series != "2.21")
            ),
            "tensorflow release",
            "2.21.0",
            "on PyPI",
        ),
        # CUDA minors and updates from cuda-toolkit
        (
            lambda m: replace(
                m, cuda_releases=tuple(c for c in m.cuda_releases if c.minor != "13.5")
            ),
            "CUDA minor",
            "13.5",
            "cuda-toolkit 13.5.0",
        ),
        (
            lambda m: replace(
                m,
                cuda_releases=tuple(
                    replace(c, updates=c.updates[:-1]) if c.minor == "13.4" else c
                    for c in m.cuda_releases
                ),
            ),
            "CUDA update",
            "13.4.3",
            "needs its driver floor",
        ),
        # TensorFlow's kernels disagree with the wheel's build_info.py (2.21 has SASS for 8.9, PTX
        # 9.0)
        (
            lambda m: replace(
                m,
                tensorflow_releases=tuple(
                    replace(t, archs=("6.0", "7.0", "8.0", "8.9", "9.0"), ptx=None)
                    if t.series == "2.21"
                    else t
                    for t in m.tensorflow_releases
                ),
            ),
            "tensorflow kernels",
            "2.21",
            "SASS 6.0 7.0 8.0 8.9, PTX 9.0",
        ),
        # the update torch 2.15.0's wheel installs (cuda-toolkit==13.2.2) has no driver floor in the
        # data
        (
            lambda m: replace(
                m,
                cuda_releases=tuple(
                    replace(
                        c,
                        updates=tuple(
                            replace(u, min_driver=None, confirmed=False)
                            if u.version == "13.2.2"
                            else u
                            for u in c.updates
                        ),
                    )
                    for c in m.cuda_releases
                ),
            ),
            "CUDA update without driver floor",
            "13.2.2",
            "torch 2.15.0's PyPI wheel installs cuda-toolkit 13.2.2",
        ),
    ],
)
def test_drift_is_reported_with_its_source(mutate, kind, subject, fragment):
    m = mutate(load_matrix())
    report = compare(m, gather(Replay(), m))
    hits = [f for f in report.findings if f.kind == kind and f.subject == subject]
    assert hits, report.findings
    assert fragment in hits[0].upstream
    assert hits[0].source.startswith("https://pypi.org/project/")
    text = format_drift(report)
    assert hits[0].source in text and "need a curated update" in text
    assert report.to_dict()["drift"] is True


def test_new_release_on_pypi_is_found():
    torch = json.loads((FIXTURES / "torch.json").read_text())
    torch["releases"]["2.16.0"] = [
        {
            "filename": "torch-2.16.0-cp312-cp312-win_amd64.whl",
            "url": "x/torch-2.16.0-cp312-cp312-win_amd64.whl",
            "size": 1,
            "yanked": False,
        }
    ]
    torch["releases"]["2.17.0rc1"] = torch["releases"]["2.16.0"]
    m = load_matrix()
    report = compare(m, gather(Replay({"torch": torch}), m))
    assert [f.subject for f in report.findings] == ["2.16.0"]  # the pre-release is not drift
    assert newest_upstream({"torch": ["2.15.0", "2.16.0"]}, m) == ["torch 2.16.0"]


@pytest.mark.parametrize(
    "lines, expected",
    [
        (['cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"'], "13.2"),
        (
            [
                'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and '
                'platform_machine == "x86_64"'
            ],
            "12.8",
        ),
        (['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Windows"'], None),
        (["filelock"], None),
    ],
)
def test_torch_cuda_from_requires_dist(lines, expected):
    assert torch_cuda(lines) == expected


def test_tensorflow_and_cuda_pins_and_floors():
    pinned = [
        'nvidia-cuda-runtime-cu12==12.2.140; extra == "and-cuda"',
        'nvidia-cudnn-cu12==8.9.4.25; extra == "and-cuda"',
    ]
    floors = [
        'nvidia-cuda-runtime-cu12<13.0,>=12.5.82; extra == "and-cuda"',
        'nvidia-cudnn-cu12<10.0,>=9.3.0.75; extra == "and-cuda"',
    ]
    assert tensorflow_cuda(pinned) == ("12.2", "8.9")
    assert tensorflow_cuda(floors) == ("12.5", "9.3")
    assert tensorflow_cuda(["numpy"]) == (None, None)


def test_pip_config_is_honoured():
    text = "global.index-url='https://mirror.example/simple'\n:env:.cert='/etc/corp-ca.pem'\nglobal.proxy='http://proxy:3128'\nglobal.find-links='/opt/wheels'\n"
    settings = settings_from_pip_config(parse_pip_config(text))
    assert settings.index_url == "https://mirror.example/simple"
    assert settings.json_base == "https://mirror.example/pypi"
    assert (settings.cert, settings.proxy) == ("/etc/corp-ca.pem", "http://proxy:3128")
    # a file:// index cannot serve the JSON API: PyPI's is used
    assert (
        settings_from_pip_config(
            parse_pip_config("global.index-url='file:///opt/pypi/simple'\n")
        ).json_base
        == "https://pypi.org/pypi"
    )


def test_stale_days():
    assert stale_days(date(2026, 9, 1), date(2026, 11, 23)) == 83
    assert stale_days(date(2026, 11, 1), date(2026, 11, 23)) is None


# ---------------------------------------------------------------- range requests on loopback


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    body = b""
    ranges: list[str] = []

    metadata: bytes | None = None

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.endswith(".metadata"):
            type(self).ranges.append("metadata")
            self.send_response(200 if self.metadata else 404)
            self.end_headers()
            self.wfile.write(self.metadata or b"")
            return
        spec = self.headers.get("Range")
        type(self).ranges.append(spec or "whole")
        if not spec:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(self.body)
            return
        start, end = spec.removeprefix("bytes=").split("-")
        size = len(self.body)
        first, last = (
            (size - int(end), size - 1) if start == "" else (int(start), min(int(end), size - 1))
        )
        chunk = self.body[first : last + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(len(chunk)))
        self.end_headers()
        self.wfile.write(chunk)

    def log_message(self, *args):
        pass


def test_metadata_is_read_with_range_requests_not_the_whole_wheel():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "big/payload.bin", os.urandom(3_000_000), compress_type=zipfile.ZIP_STORED
        )  # 3 MB the check must not read
        z.writestr(
            "fake-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: fake\nVersion: 1.0\n"
            "Requires-Dist: cuda-toolkit==13.2.2\n",
        )
    handler = type("H", (_RangeHandler,), {"body": buffer.getvalue(), "ranges": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = PyPI(
            IndexSettings(index_url=f"http://127.0.0.1:{server.server_address[1]}/simple")
        )
        text = client.wheel_metadata(
            f"http://127.0.0.1:{server.server_address[1]}/fake.whl", len(handler.body)
        )
    finally:
        server.shutdown()
        server.server_close()
    assert "Requires-Dist: cuda-toolkit==13.2.2" in text
    assert "whole" not in handler.ranges
    assert client.bytes_fetched < len(handler.body) / 10, (client.bytes_fetched, len(handler.body))


@pytest.mark.parametrize("served", [True, False])
def test_pep658_metadata_is_used_when_served(served):
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w") as z:
        z.writestr("fake-1.0.dist-info/METADATA", "Name: fake\nRequires-Dist: from-the-wheel\n")
    handler = type(
        "H",
        (_RangeHandler,),
        {
            "body": body.getvalue(),
            "ranges": [],
            "metadata": b"Name: fake\nRequires-Dist: from-pep658\n" if served else None,
        },
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = PyPI(IndexSettings())
        text = client.wheel_metadata(
            f"http://127.0.0.1:{server.server_address[1]}/fake.whl", len(handler.body), pep658=True
        )
    finally:
        server.shutdown()
        server.server_close()
    if served:
        assert "from-pep658" in text and handler.ranges == ["metadata"]
    else:  # announced but 404 (this machine's route to PyPI): range requests instead
        assert (
            "from-the-wheel" in text
            and handler.ranges[0] == "metadata"
            and "whole" not in handler.ranges
        )


def test_unreachable_index_is_one_line_naming_it():
    client = PyPI(IndexSettings(index_url="http://127.0.0.1:9/simple", timeout=2))
    with pytest.raises(IndexUnreachable) as err:
        client.project("torch")
    text = err.value.render()
    assert "http://127.0.0.1:9/pypi/torch/json" in text and "\n" not in text


# ---------------------------------------------------------------- real PyPI


@pytest.mark.network
def test_real_pypi_drift_check():
    client = PyPI()
    url = client.json_url("torch")
    try:
        client.project("cuda-toolkit")
    except IndexUnreachable as err:
        pytest.skip(f"PyPI unreachable: {err.url} ({err.message})")
    m = load_matrix()
    upstream = gather(client, m)
    report = compare(m, upstream, index=client.settings.index_url)
    # whatever upstream did since, every finding names a fact and its PyPI source
    for f in report.findings:
        assert f.kind and f.subject and f.source.startswith("https://pypi.org/project/"), f
    assert "2.15.0" in upstream["versions"]["torch"]
    assert upstream["metadata"]["torch"]["2.15.0"]["requires_dist"], url
    assert client.bytes_fetched < 200 * 2**20, "METADATA through range requests, never whole wheels"


# ---------------------------------------------------------------- doctor's freshness probe


def test_doctor_warns_when_the_data_is_old_and_says_why_pypi_was_not_checked(monkeypatch):
    import time

    from gpuenv.cli.doctor import compat_data_lines, probe_compat_data

    monkeypatch.setenv(
        "HTTPS_PROXY", "http://127.0.0.1:9"
    )  # PyPI unreachable, as on an offline server
    started = time.monotonic()
    data = probe_compat_data(today=date(2027, 3, 1))
    elapsed = time.monotonic() - started
    assert data["stale_days"] == (date(2027, 3, 1) - load_matrix().checked).days
    assert data["pypi"].startswith(
        "not checked: cannot reach the package index at https://pypi.org/pypi/"
    )
    lines = compat_data_lines(data)
    assert any(
        line.startswith("warning") and "checked" in line and "days ago" in line for line in lines
    )
    assert any("not checked" in line for line in lines)
    print(f"freshness probe offline: {elapsed:.1f} s")


def test_doctor_warns_when_pypi_has_newer_releases():
    from gpuenv.cli.doctor import compat_data_lines

    lines = compat_data_lines(
        {
            "available": True,
            "checked": "2026-11-23",
            "stale_days": None,
            "stale_after_days": 60,
            "newer_on_pypi": ["torch 2.16.0"],
        }
    )
    assert (
        lines[-1]
        == "warning   PyPI has releases newer than the data (torch 2.16.0): run `invoke matrix "
        "--check`"
    )


# ---------------------------------------------------------------- TensorFlow's build_info.py

#: What each recorded wheel says (tests/compat/fixtures/tensorflow_build_info), read by hand from
#: the files.
BUILD_INFO_EXPECTED = {
    "2.12.1": ("11.8", ["3.5", "5.0", "6.0", "7.0", "7.5"], "8.0"),
    "2.15.1": ("12.2", ["5.0", "6.0", "7.0", "7.5"], "8.0"),
    "2.16.2": ("12.3", ["5.0", "6.0", "7.0", "8.0"], "9.0"),
    "2.17.1": ("12.3", ["6.0", "7.0", "8.0", "8.9"], "9.0"),
    "2.21.0": ("12.5.1", ["6.0", "7.0", "8.0", "8.9"], "9.0"),
}


@pytest.mark.parametrize("version, expected", sorted(BUILD_INFO_EXPECTED.items()))
def test_build_info_is_parsed_without_running_it(version, expected):
    got = parse_build_info((BUILD_INFO / f"{version}.py").read_text())
    assert (got["cuda"], got["archs"], got["ptx"]) == expected


def test_recorded_build_info_agrees_with_the_data():
    m = load_matrix()
    for release in m.tensorflow_releases:
        newest = max(release.patches, key=lambda p: tuple(map(int, p.split("."))))
        got = parse_build_info((BUILD_INFO / f"{newest}.py").read_text())
        assert (list(release.archs), release.ptx, release.kernels_cuda) == (
            got["archs"],
            got["ptx"],
            got["cuda"],
        ), release.series
        # every patch of a series was built the same way
        for patch in release.patches:
            assert parse_build_info((BUILD_INFO / f"{patch}.py").read_text()) == got, patch


def test_torch_cuda_update_is_the_exact_cuda_toolkit_pin():
    assert (
        torch_cuda_update(['cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"'])
        == "13.2.2"
    )
    assert (
        torch_cuda_update(['nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"']) is None
    )


def test_drift_report_is_one_row_per_open_item():
    m = load_matrix()
    report = compare(m, gather(Replay(), m))
    text = format_drift(report)
    lines = text.splitlines()
    for item in report.pending:
        subject, state = item.split(": ", 1)
        assert sum(1 for line in lines if line.startswith(subject) and state in line) == 1, item
    assert max(len(line) for line in lines) < 200, "no one long line"


@pytest.mark.network
def test_real_tensorflow_kernels_agree_with_pypi():
    """TensorFlow's build_info.py of the data's releases, read from PyPI now (range requests)."""
    client = PyPI()
    try:
        client.project("tensorflow")
    except IndexUnreachable as err:
        pytest.skip(f"PyPI unreachable: {err.url} ({err.message})")
    m = load_matrix()
    doc = client.project("tensorflow")
    from gpuenv.compat.drift import TF_BUILD_INFO, linux_wheel

    for release in m.tensorflow_releases:
        newest = max(release.patches, key=lambda p: tuple(map(int, p.split("."))))
        wheel = linux_wheel(doc["releases"][newest])
        text = client.wheel_member(
            client.file_url("tensorflow", wheel["url"]), int(wheel["size"]), TF_BUILD_INFO
        )
        got = parse_build_info(text)
        assert (list(release.archs), release.ptx, release.kernels_cuda) == (
            got["archs"],
            got["ptx"],
            got["cuda"],
        ), (release.series, wheel["filename"])
