"""Progress for people (rich, on a terminal) and for CI (plain lines, no control codes)."""

from __future__ import annotations

import io

from gpuenv.engine import LayerProgress
from gpuenv.progress import (
    LIVE,
    PLAIN,
    QUIET,
    VERBOSE,
    Reporter,
    build_step,
    choose_mode,
    format_bytes,
)


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_mode_follows_the_output_and_the_flags():
    assert choose_mode(out=io.StringIO(), env={"TERM": "xterm"}) == PLAIN
    assert choose_mode(out=Tty(), env={"TERM": "xterm"}) == LIVE
    assert choose_mode(out=Tty(), env={"TERM": "dumb"}) == PLAIN
    assert choose_mode(out=Tty(), env={"TERM": "xterm", "CI": "true"}) == PLAIN
    assert choose_mode(out=Tty(), verbose=True, env={}) == VERBOSE
    assert choose_mode(out=Tty(), quiet=True, verbose=True, env={}) == QUIET


def test_build_steps_become_phases():
    assert (
        build_step("Step 7/14 : RUN /opt/gpuenv-build/install-env.sh /opt/gpuenv-build")
        == "step 7/14: RUN /opt/gpuenv-build/install-env.sh /opt/gpuenv-build"
    )
    assert build_step(" ---> Running in 1234") is None
    assert format_bytes(1_234_567_890) == "1.2 GB" and format_bytes(999) == "999 B"


BUILD_STREAM = [
    "Step 1/3 : FROM gpuenv-test-base:bookworm AS install\n",
    " ---> 0cd9ad69e4b9\n",
    "Step 2/3 : RUN install-env.sh\n",
    " ---> Running in 5e1f\n",
    "gpuenv-install: Python 3.11 from the base image\nCollecting torch",
    "==2.13.0\nSuccessfully installed torch-2.13.0\n",
    "Step 3/3 : LABEL a=b\n",
]


def run_build(mode: str) -> str:
    out = io.StringIO()
    with Reporter(mode, out=out) as report:
        report.phase("sending the build context")
        for chunk in BUILD_STREAM:
            report.output(chunk)
    report.result("built sha256:abc")
    return out.getvalue()


def test_plain_output_has_steps_not_the_raw_stream_and_no_control_codes():
    text = run_build(PLAIN)
    assert "\x1b" not in text
    assert "step 2/3: RUN install-env.sh" in text
    assert "Successfully installed" not in text and "Running in" not in text
    assert text.splitlines()[-1] == "built sha256:abc"
    assert all(line.startswith("[") for line in text.splitlines()[:-1]), (
        text
    )  # elapsed time on each step


def test_verbose_gives_the_full_log_and_quiet_only_the_result():
    verbose = run_build(VERBOSE)
    assert (
        "Collecting torch==2.13.0" in verbose and "Successfully installed torch-2.13.0" in verbose
    )
    assert run_build(QUIET) == "built sha256:abc\n"


def test_live_block_shows_phase_bytes_and_the_last_line():
    from rich.console import Console

    out = Tty()
    console = Console(file=out, force_terminal=True, width=120)
    report = Reporter(LIVE, out=out, console=console)
    report.phase("pushing 127.0.0.1:5000/gpuenv/x")
    report.layer(LayerProgress("aaa", "Pushing", 500_000_000, 1_000_000_000))
    report.layer(LayerProgress("bbb", "Pushed", None, None))
    report.output("uv: Prepared 12 packages\n")
    console.print(report._render())
    text = out.getvalue()
    assert "pushing 127.0.0.1:5000/gpuenv/x" in text
    assert "500.0 MB of 1.0 GB, 1/2 layers" in text
    assert "uv: Prepared 12 packages" in text


def test_plain_transfers_print_each_finished_layer_once():
    out = io.StringIO()
    report = Reporter(PLAIN, out=out)
    for status, current in (
        ("Preparing", None),
        ("Pushing", 10),
        ("Pushing", 20),
        ("Pushed", None),
        ("Pushed", None),
    ):
        report.layer(LayerProgress("abcdef123456789", status, current, 20 if current else None))
    lines = out.getvalue().splitlines()
    assert lines == ["  layer abcdef123456: pushed (20 B)"]
    assert report.transferred() == (20, 20, 1, 1)


def test_a_failure_shows_the_tools_last_lines_even_without_verbose():
    out = io.StringIO()
    try:
        with Reporter(PLAIN, out=out) as report:
            report.output(
                "Step 2/3 : RUN install-env.sh\ngpuenv-install: Python 3.11 from the base image\n"
            )
            report.output(
                "".join(f"noise {i}\n" for i in range(100))
                + "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES\n"
            )
            raise RuntimeError("build failed")
    except RuntimeError:
        pass
    text = out.getvalue()
    assert "gpuenv-install: Python 3.11 from the base image" in text  # gpuenv's own steps are shown
    assert "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES" in text
    assert "noise 0\n" not in text and "noise 99" in text
