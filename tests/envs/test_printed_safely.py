"""Every line an install or lock prints is terminal-safe and never shows a URL's password: the
progress lines (gpuenv.progress), the task's own lines (show) and its error line."""

from __future__ import annotations

import io

import pytest
from invoke.exceptions import Exit

from gpuenv.cli.output import show
from gpuenv.cli.task import user_errors
from gpuenv.errors import ToolError
from gpuenv.progress import PLAIN, VERBOSE, Reporter
from validate.text import mask_credentials

PREFIX = "/tmp/env\x1b]0;pwned\x07\x1b[2J"


@pytest.mark.parametrize("mode", [PLAIN, VERBOSE])
def test_a_prefix_with_escape_sequences_is_printed_inert_in_progress_lines(mode):
    out = io.StringIO()
    reporter = Reporter(mode=mode, out=out)
    reporter.phase(f"moving it into place: {PREFIX}")
    reporter.say(f"left by an install that was killed: {PREFIX}")
    reporter.output(f"linking into {PREFIX}\n")
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert text.count("/tmp/env\\x1b]0;pwned\\x07\\x1b[2J") >= 2, text


def test_a_mirror_password_is_masked_in_progress_show_and_the_error_line(capsys):
    url = "https://bob:hunter2@mirror.example/conda-forge/noarch/x.conda"
    out = io.StringIO()
    Reporter(mode=PLAIN, out=out).say(f"fetching x from {url}")
    show(f"mirror: {url}")

    @user_errors
    def task() -> None:
        raise ToolError(f"cannot download x from {url} (timed out)", fix="check the network")

    with pytest.raises(Exit) as caught:
        task()
    for text in (out.getvalue(), capsys.readouterr().out, str(caught.value.message)):
        assert "hunter2" not in text and "bob:***@mirror.example" in text, text


@pytest.mark.parametrize(
    ("given", "shown"),
    [
        ("http://bob:pw@h/x", "http://bob:***@h/x"),
        ("see http://bob:p@ss@h:8/x and ftp://a:b@c", "see http://bob:***@h:8/x and ftp://a:***@c"),
        ("https://ghp_0123456789abcdefghij@github.com/x", "https://***@github.com/x"),
        ("ssh://bob@host and mail bob@example.org", "ssh://bob@host and mail bob@example.org"),
    ],
)
def test_credentials_are_masked_wherever_a_url_stands(given, shown):
    assert mask_credentials(given) == shown
