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
from contextlib import contextmanager
from typing import Iterator

from gpuenv.fleet.report import plots
from gpuenv.fleet.report.analysis import Fleet
from gpuenv.fleet.report.htmlreport import plots_wanted, render_html
from gpuenv.fleet.report.jsonreport import iter_json
from gpuenv.fleet.report.junitreport import iter_junit
from validate.writing import write_text_atomic


def write_reports(
    fleet: Fleet,
    *,
    json_path: str | None = None,
    junit_path: str | None = None,
    html_path: str | None = None,
) -> list[str]:
    """Write the asked-for files atomically; returns the paths written. JSON and JUnit are written
    host by host as they are made (at 100,000 GPUs fleet.json is about 470 MB). With the page and
    another format asked for, the page's plots are drawn by another process meanwhile (matplotlib
    takes 4 to 5 s for them; plots.draw_in_background), else by this one when the page is made."""
    background = (
        plots.draw_in_background(fleet, plots_wanted(fleet))
        if html_path and (json_path or junit_path)
        else None
    )

    def page(fleet: Fleet) -> str:
        return render_html(fleet, drawn=background.result() if background else None)

    written = []
    for path, render in ((json_path, iter_json), (junit_path, iter_junit), (html_path, page)):
        if path:
            write_text_atomic(path, render(fleet))
            written.append(path)
    return written


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
