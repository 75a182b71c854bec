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

from gpuenv.fleet.report.analysis import Fleet
from gpuenv.fleet.report.htmlreport import render_html
from gpuenv.fleet.report.jsonreport import render_json
from gpuenv.fleet.report.junitreport import render_junit
from validate.files import write_text_atomic


def write_reports(fleet: Fleet, *, json_path: str | None = None, junit_path: str | None = None, html_path: str | None = None) -> list[str]:
    """Write the asked-for files atomically; returns the paths written."""
    written = []
    for path, render in ((json_path, render_json), (junit_path, render_junit), (html_path, render_html)):
        if path:
            write_text_atomic(path, render(fleet))
            written.append(path)
    return written
