"""The fleet report: every host's suite report merged, then rendered for people and machines.

Analysis once, renderers apart. `analysis.analyse()` computes the one `Fleet` (medians,
outliers, statuses, the hosts not ready worst first); each format is a pure function of it in its
own module, and reads at any fleet size: what a person needs first (the summary, then the hosts
that are not ready, worst first) comes first, the plots are distributions whose size does not
grow with the host count, and ready hosts come last, collapsed.
- `terminal`: the table a run prints and the live view while it runs;
- `jsonreport`: fleet.json, keyed by host and GPU UUID;
- `junitreport`: JUnit XML, one testsuite per host;
- `htmlreport`: one self-contained page (inline CSS and SVG, no script), its figures from `plots`.
Only `write_reports` here touches the disk.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from gpuenv.fleet.report import plots
from gpuenv.fleet.report.analysis import Fleet
from gpuenv.fleet.report.htmlreport import plots_wanted, render_html
from gpuenv.fleet.report.jsonreport import iter_json
from gpuenv.fleet.report.junitreport import iter_junit
from validate.writing import WriteFailed, write_text_atomic


def write_reports(
    fleet: Fleet,
    *,
    json_path: str | None = None,
    junit_path: str | None = None,
    html_path: str | None = None,
) -> list[str]:
    """Write the asked-for files atomically; returns the paths written. JSON and JUnit are written
    host by host as they are made (at 100,000 GPUs fleet.json is about 500 MB). With another
    format asked for, fleet.json is written by a forked process meanwhile (write_elsewhere: it is
    half of the files' time), and with the page and another format, the page's plots are drawn by
    another process too (matplotlib takes 4 to 5 s for them; plots.draw_in_background), else by
    this one when the page is made. Every file is complete or not there (each is renamed into
    place when whole); when one cannot be written, the others are still written and the first
    failure, in the order JSON, JUnit, page, is raised."""
    others = bool(junit_path or html_path)
    # forked first, while this process runs one thread (the plots' pool starts one)
    elsewhere = write_elsewhere(json_path, iter_json, fleet) if json_path and others else None
    try:
        background = (
            plots.draw_in_background(fleet, plots_wanted(fleet))
            if html_path and (json_path or junit_path)
            else None
        )

        def page(fleet: Fleet) -> str:
            return render_html(fleet, drawn=background.result() if background else None)

        failures: dict[str, WriteFailed] = {}
        for path, render in ((junit_path, iter_junit), (html_path, page)):
            if path:
                try:
                    write_text_atomic(path, render(fleet))
                except WriteFailed as err:
                    failures[path] = err
        if json_path:
            try:
                if elsewhere:
                    elsewhere.finish()
                else:
                    write_text_atomic(json_path, iter_json(fleet))
            except WriteFailed as err:
                failures[json_path] = err
    finally:
        if elsewhere:
            elsewhere.stop()  # an exception here (Ctrl-C, a bug): its temporary file removed
    asked = [path for path in (json_path, junit_path, html_path) if path]
    for path in asked:
        if path in failures:
            raise failures[path]
    return asked


#: The longest write_reports waits for a file written by another process (500 MB of fleet.json
#: take 6 s at 100,000 GPUs); past it, that process is stopped and the file written here instead.
ELSEWHERE_WAIT_S = 1800.0
#: How long a stopped writer has to remove its temporary file and exit before it is killed.
STOP_WAIT_S = 10.0


class WrittenElsewhere:
    """A file being written by a forked process (write_elsewhere). finish() waits for it: done,
    or its WriteFailed raised here, or (the process died, met a bug or took too long) the file
    written by this process instead. stop() ends the process if it still runs; it removes its
    temporary file first (SIGTERM reaches write_text_atomic's cleanup as an exception)."""

    def __init__(
        self,
        process: Any,
        answers: Any,
        path: str,
        render: Callable[[Fleet], Iterable[str]],
        fleet: Fleet,
    ) -> None:
        self._process, self._answers = process, answers
        self._path, self._render, self._fleet = path, render, fleet

    def finish(self) -> None:
        answer = None
        try:
            if self._answers.poll(ELSEWHERE_WAIT_S):
                answer = self._answers.recv()
        except (EOFError, OSError):  # it died without a word (killed, out of memory)
            answer = None
        if answer is not None:
            self._process.join(STOP_WAIT_S)  # it exits once it has answered
        self.stop()
        if answer == ("written",):
            return
        if isinstance(answer, tuple) and answer[0] == "failed":
            raise WriteFailed(Path(self._path), answer[1], answer[2])
        # it died, met a bug (met again here, with its traceback) or took too long
        write_text_atomic(self._path, self._render(self._fleet))

    def stop(self) -> None:
        process = self._process
        if process.exitcode is None:
            process.terminate()
            process.join(STOP_WAIT_S)
        if process.exitcode is None:
            process.kill()
            process.join()
        self._answers.close()


def write_elsewhere(
    path: str, render: Callable[[Fleet], Iterable[str]], fleet: Fleet
) -> WrittenElsewhere | None:
    """Start writing write_text_atomic(path, render(fleet)) in a forked process, which shares the
    fleet with this one (nothing is copied to it but the pages it touches). None when it cannot
    start: not on Linux, or another thread runs (a fork could copy a lock it holds), or the fork
    fails; the caller then writes the file itself."""
    if not sys.platform.startswith("linux") or threading.active_count() != 1:
        return None
    import multiprocessing

    context = multiprocessing.get_context("fork")
    answers, send = context.Pipe(duplex=False)
    process = context.Process(target=_write, args=(send, path, render, fleet), daemon=True)
    try:
        process.start()
    except OSError:
        answers.close()
        return None
    finally:
        send.close()
    return WrittenElsewhere(process, answers, path, render, fleet)


def _write(send: Any, path: str, render: Callable[[Fleet], Iterable[str]], fleet: Fleet) -> None:
    """The forked writer: Ctrl-C is left to the parent (which stops it), SIGTERM and SIGHUP end
    it as an exception, so that its temporary file is removed on the way out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stopped)
    answer: tuple[Any, ...]
    try:
        write_text_atomic(path, render(fleet))
        answer = ("written",)
    except WriteFailed as err:
        answer = ("failed", err.reason, err.errno)
    except Exception as err:  # noqa: BLE001 - a bug: the parent writes the file and meets it
        answer = ("error", f"{type(err).__name__}: {err}"[:300])
    except SystemExit:  # stopped (_stopped): the parent is no longer listening
        return
    send.send(answer)


def _stopped(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def cycles_uncollected() -> Iterator[None]:
    """Python's cycle collector paused while a fleet's reports are read, analysed and rendered.

    That work makes millions of objects that all stay alive until the report is written (a
    12,500-host folder holds 1.1 million checks), and no cycles: each full collection walks every
    one of them again for nothing, a quarter of the time at that size. Reference counting still
    frees everything as usual; collection resumes (and catches up) on the way out."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
