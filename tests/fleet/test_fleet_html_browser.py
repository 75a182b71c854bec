"""The fleet page in a real headless browser (Debian's chromium): it loads from file:// with no
network, logs no page error, puts the summary and the worst hosts first, and its screenshot is not
blank, for a five-host rack and for 1,000 hosts x 8 GPUs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from suitecases import A100, H100, PEAKS, gpu, gpu_report, rack

from gpuenv.fleet.outcome import UNREACHABLE, HostOutcome, status_from_report
from gpuenv.fleet.report.analysis import analyse
from gpuenv.fleet.report.htmlreport import render_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed: run scripts/install-test-servers.sh as root"
)
#: Where the 1,000-host screenshot is kept for a person to look at (else the test's tmp folder).
SHOTS = os.environ.get("GPUENV_SCREENSHOTS")


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    # Offline by construction: no background networking, no component updates, and every host
    # name resolves to nothing, so a page that tried to fetch an asset would log a load failure.
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=5000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _colour(pixels, rgb: int):
    r, g, b = ((rgb >> 16) & 255) / 255, ((rgb >> 8) & 255) / 255, (rgb & 255) / 255
    return (
        (abs(pixels[..., 0] - r) < 0.03)
        & (abs(pixels[..., 1] - g) < 0.03)
        & (abs(pixels[..., 2] - b) < 0.03)
    )


def _no_page_errors(run: subprocess.CompletedProcess) -> None:
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    load_errors = [
        line
        for line in run.stderr.splitlines()
        if "net::ERR" in line or "Failed to load resource" in line
    ]
    assert console == [] and load_errors == []


def test_fleet_page_renders_in_chromium(tmp_path):
    page = tmp_path / "fleet.html"
    page.write_text(render_html(analyse(rack(), PEAKS)))
    url = page.as_uri()

    dom = chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    # the parsed DOM holds the not-ready hosts, the plots and the collapsed ready hosts
    assert (
        html.count('<tr class="bad"') == 3
        and html.count('<tr class="ready">') == 2
        and html.count("<svg") == 3
    )
    assert 'id="dist-nvidia-h100-80gb-hbm3"' in html and 'id="heat-nvidia-h100-80gb-hbm3"' in html
    assert "ssh://ops@gpu2 GPU 1 matmul bf16 TFLOPS 400.0 (57%)" in html and "OUTLIER" in html

    shot = tmp_path / "shot.png"
    run = chromium(tmp_path, "--window-size=1280,2200", f"--screenshot={shot}", url)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    _no_page_errors(run)

    from matplotlib.image import imread

    pixels = imread(str(shot))[..., :3]
    assert pixels.shape[:2] == (2200, 1280)
    assert pixels.std() > 0.1  # not a blank page
    assert _colour(pixels, 0x1565C0).sum() > 500  # the histograms' bars were drawn
    assert _colour(pixels, 0xC62828).sum() > 300  # the not-ready statuses and the outlier, in red


def thousand_hosts() -> list[HostOutcome]:
    """1,000 hosts x 8 GPUs through the suite's own writer: two models, a small spread, a failed
    check on every 100th host (37, 137, ...), a slow GPU on every 97th, host 500 unreachable."""
    outs = []
    for h in range(1000):
        if h == 500:
            outs.append(
                HostOutcome(
                    f"node{h:04d}", UNREACHABLE, "cannot reach node0500 over SSH (timed out)"
                )
            )
            continue
        model, bf16, bandwidth = (H100, 700.0, 3000.0) if h % 3 else (A100, 250.0, 1700.0)
        gpus = []
        for i in range(8):
            slow = 0.5 if (h % 97 == 13 and i == 3) else 1.0
            gpus.append(
                (
                    gpu(i, model, host=h),
                    bf16 * slow * (1 + ((h * 8 + i) * 37 % 41 - 20) / 1000),
                    bandwidth * (1 + ((h + i) * 11 % 31 - 15) / 1000),
                )
            )
        report = gpu_report(gpus, failed=["device memory GB/s"] if h % 100 == 37 else [])
        status, reason = status_from_report(report, report["summary"]["pytest_exit_status"])
        outs.append(HostOutcome(f"node{h:04d}", status, reason, report=report))
    return outs


def test_a_thousand_host_page_loads_with_the_summary_and_worst_hosts_first(tmp_path):
    fleet = analyse(thousand_hosts(), PEAKS)
    page = tmp_path / "fleet.html"
    page.write_text(render_html(fleet))
    assert page.stat().st_size < 5_000_000  # the goal at 1,000 hosts
    url = page.as_uri()

    dom = chromium(tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.rstrip().endswith("</html>") and 'id="ready-table"' in html  # parsed to the end
    order = [
        html.index(f'id="{name}"')
        for name in (
            "fleet-summary",
            "fleet-not-ready",
            "fleet-distributions",
            "fleet-heatmap",
            "fleet-not-ready-details",
            "fleet-ready",
        )
    ]
    assert order == sorted(order)
    assert re.search(r"<b>\d+ of 1000</b> host\(s\) ready", html[: order[1]])
    worst = re.findall(r'<tr class="bad" data-status="([^"]+)"><td>\d+</td><td>([^<]+)</td>', html)
    assert sorted(worst[:10]) == [
        ("not ready", f"node{h:04d}") for h in (37, 137, 237, 337, 437, 537, 637, 737, 837, 937)
    ]
    assert worst[10] == ("unreachable", "node0500")
    assert {status for status, _ in worst[11:]} == {"degraded"} and len(
        worst
    ) == 11 + 11  # every 97th host from 13
    ready_section = html[order[-1] :]
    assert (
        "<details><summary>978 ready host(s)" in ready_section
        and "<details open" not in ready_section
    )

    shot = Path(SHOTS) / "fleet-1000-hosts.png" if SHOTS else tmp_path / "fleet-1000-hosts.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    run = chromium(tmp_path, "--window-size=1400,1600", f"--screenshot={shot}", url)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    _no_page_errors(run)

    from matplotlib.image import imread

    pixels = imread(str(shot))[..., :3]
    assert pixels.std() > 0.1
    top = pixels[:800]  # the first screen: summary and the worst hosts, in red
    assert _colour(top, 0xC62828).sum() > 500 and _colour(top, 0xFFEBEE).sum() > 20000
