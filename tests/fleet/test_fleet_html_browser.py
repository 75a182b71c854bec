"""The fleet page in a real headless browser (Debian's chromium): it loads from file:// with no
network, renders the table and both plots, logs no page error, and its screenshot is not blank."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpuenv.fleet.report import analyse, render_html
from test_fleet_report import PEAKS, rack

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed: run scripts/install-test-servers.sh as root")


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    # Offline by construction: no background networking, no component updates, and every host
    # name resolves to nothing, so a page that tried to fetch an asset would log a load failure.
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'profile'}",
         "--enable-logging=stderr", "--v=0", *args],
        capture_output=True, text=True, timeout=120,
    )


def test_fleet_page_renders_in_chromium(tmp_path):
    page = tmp_path / "fleet.html"
    page.write_text(render_html(analyse(rack(), PEAKS)))
    url = page.as_uri()

    dom = chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    # the parsed DOM holds the table rows, both inline SVG plots and the outlier list
    assert html.count('<tr class="') == 7 and html.count("<svg") == 2
    assert 'id="plot-matmul-bf16-tflops"' in html and 'id="plot-device-memory-gb-s"' in html
    assert "ssh://ops@gpu2 GPU 1" in html and "OUTLIER" in html

    shot = tmp_path / "shot.png"
    run = chromium(tmp_path, "--window-size=1280,2200", f"--screenshot={shot}", url)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    load_errors = [line for line in run.stderr.splitlines() if "net::ERR" in line or "Failed to load resource" in line]
    assert console == [] and load_errors == []

    from matplotlib.image import imread

    pixels = imread(str(shot))[..., :3]
    assert pixels.shape[:2] == (2200, 1280)
    assert pixels.std() > 0.1  # not a blank page
    red = ((abs(pixels[..., 0] - 0xC6 / 255) < 0.03) & (abs(pixels[..., 1] - 0x28 / 255) < 0.03) & (abs(pixels[..., 2] - 0x28 / 255) < 0.03))
    blue = ((abs(pixels[..., 0] - 0x15 / 255) < 0.03) & (abs(pixels[..., 1] - 0x65 / 255) < 0.03) & (abs(pixels[..., 2] - 0xC0 / 255) < 0.03))
    assert blue.sum() > 5000  # the measured bars were drawn
    assert red.sum() > 1000  # the outlier's bar (and its flagged text) in red
