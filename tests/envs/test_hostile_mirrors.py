"""Mirrors and locked package URLs that would exhaust memory or disk, or hang: every download
and every repodata read is bounded in size and time, and a stall names the server
(docs/hostile-input.md). Real servers on 127.0.0.1 (hostileservers.py), real py-rattler."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hostileservers import ENDLESS, SILENT, TRICKLE, hostile_server

from gpuenv.envs import conda
from gpuenv.errors import ToolError

VIRTUAL = conda.virtual_packages(cuda=None, glibc="2.35", arch="x86_64")


def _package(url: str) -> conda.CondaPackage:
    return conda.CondaPackage(
        name="gpuenv-hello",
        version="1.0",
        build="0",
        build_number=0,
        subdir="noarch",
        url=url,
        sha256="0" * 64,
        md5="",
        depends=(),
        channel="",
    )


def _shorten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds made short enough for a test; the old single watchdog too, so that without
    the bounds the test ends (failing) in a minute, not in 30."""
    monkeypatch.setattr(conda, "REQUEST_TIMEOUT_S", 3, raising=False)
    monkeypatch.setattr(conda, "SOLVE_TIMEOUT_S", 60, raising=False)
    monkeypatch.setattr(conda, "CHILD_TIMEOUT_S", 60)
    monkeypatch.setattr(conda, "DOWNLOAD_STALL_S", 3, raising=False)
    monkeypatch.setattr(conda, "MAX_PACKAGE_BYTES", 8 << 20, raising=False)
    # an endless repodata.json on loopback writes GBs a second: the test's cap keeps its disk small
    monkeypatch.setattr(conda, "MAX_REPODATA_BYTES", 64 << 20, raising=False)


@pytest.fixture
def short_bounds(monkeypatch):
    _shorten(monkeypatch)


MODES = [SILENT, ENDLESS, TRICKLE]


@pytest.fixture(scope="module")
def cut_off(tmp_path_factory) -> dict[str, tuple[ToolError | None, float, str]]:
    """Each hostile mirror's solve under the short bounds, the three at once (each mostly waits
    out its bounds and rattler's retries): mode -> (the error, seconds until it, the mirror)."""
    tmp = tmp_path_factory.mktemp("cut-off")

    def attempt(mode: str) -> tuple[str, tuple[ToolError | None, float, str]]:
        with hostile_server(mode, seconds=60, only="repodata.json") as base:
            started = time.monotonic()
            try:
                conda.solve(
                    channels=["conda-forge"],
                    specs=["gpuenv-hello"],
                    platform="linux-64",
                    virtual=VIRTUAL,
                    mirrors=conda.check_mirrors({"conda-forge": f"{base}/conda-forge"}),
                    cache_dir=tmp / mode / "cache",
                )
            except ToolError as err:
                return mode, (err, time.monotonic() - started, base)
            return mode, (None, time.monotonic() - started, base)

    with pytest.MonkeyPatch.context() as monkeypatch:
        _shorten(monkeypatch)
        with ThreadPoolExecutor(max_workers=len(MODES)) as pool:
            return dict(pool.map(attempt, MODES))


@pytest.mark.parametrize("mode", MODES)
def test_a_mirror_that_never_answers_streams_without_end_or_trickles_is_cut_off_naming_it(
    mode, cut_off
):
    error, took, base = cut_off[mode]
    assert error is not None, f"the solve through a {mode} mirror returned packages"
    text = error.render()
    assert (
        text.startswith("cannot read the conda channel") and base.removeprefix("http://") in text
    ), text
    assert "did not finish" not in text and "\n" not in text, text
    assert took < 45, f"cut off after {took:.0f} s"


def test_a_fifo_as_repodata_json_is_refused_naming_it_not_waited_on(short_bounds, tmp_path):
    channel = tmp_path / "channel"
    for subdir in ("linux-64", "noarch"):
        (channel / subdir).mkdir(parents=True)
        os.mkfifo(channel / subdir / "repodata.json")
    started = time.monotonic()
    with pytest.raises(ToolError) as err:
        conda.solve(
            channels=["conda-forge"],
            specs=["gpuenv-hello"],
            platform="linux-64",
            virtual=VIRTUAL,
            mirrors=conda.check_mirrors({"conda-forge": channel.as_uri()}),
            cache_dir=tmp_path / "cache",
        )
    text = err.value.render()
    assert "repodata.json is a FIFO" in text and "\n" not in text, text
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_locked_url_naming_dev_zero_or_a_fifo_is_refused_before_any_byte(
    kind, short_bounds, tmp_path
):
    if kind == "device":
        url = "file:///dev/zero"
    else:
        os.mkfifo(tmp_path / "pkg.conda")
        url = (tmp_path / "pkg.conda").as_uri()
    with pytest.raises(ToolError) as err:
        conda.fetch_verified([_package(url)], tmp_path / "downloads")
    text = err.value.render()
    assert text.startswith("cannot download gpuenv-hello") and (
        "a device" in text or "a FIFO" in text
    ), text
    assert not any((tmp_path / "downloads").iterdir())


@pytest.mark.parametrize(
    ("mode", "words"), [(ENDLESS, "more than"), (TRICKLE, "stalled"), (SILENT, "timed out")]
)
def test_a_package_download_is_bounded_in_size_and_time_and_names_the_server(
    mode, words, short_bounds, tmp_path
):
    with hostile_server(mode, seconds=60) as base:
        started = time.monotonic()
        with pytest.raises(ToolError) as err:
            conda.fetch_verified(
                [_package(f"{base}/conda-forge/noarch/gpuenv-hello-1.0-0.conda")],
                tmp_path / "downloads",
            )
        took = time.monotonic() - started
    text = err.value.render()
    assert words in text and "127.0.0.1" in text and "\n" not in text, text
    assert took < 30, f"cut off after {took:.0f} s"
    assert not any((tmp_path / "downloads").iterdir()), "the partial download was left"


def test_a_mirror_password_is_never_in_the_error(short_bounds, tmp_path):
    with pytest.raises(ToolError) as err:
        conda.solve(
            channels=["conda-forge"],
            specs=["gpuenv-hello"],
            platform="linux-64",
            virtual=VIRTUAL,
            mirrors=conda.check_mirrors(
                {"conda-forge": "http://bob:hunter2@127.0.0.1:9/conda-forge"}
            ),
            cache_dir=tmp_path / "cache",
        )
    assert "hunter2" not in err.value.render() and "bob:***@127.0.0.1:9" in err.value.render(), (
        err.value.render()
    )
    with pytest.raises(ToolError) as err:
        conda.fetch_verified(
            [_package("http://bob:hunter2@127.0.0.1:9/c/noarch/x.conda")], tmp_path / "downloads"
        )
    assert "hunter2" not in err.value.render() and "bob:***@127.0.0.1:9" in err.value.render(), (
        err.value.render()
    )
