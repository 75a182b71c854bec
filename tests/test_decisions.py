"""Every "issue N" that code, tests and benchmarks cite is a round docs/decisions.md lists: the
tracker they were filed in is not in this repository, so the reference must resolve to a file that
is. A reference to another project's tracker names it ("owner/repo issue 16", "owner/repo #200")
and is not counted."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITING = ("gpuenv", "validate", "tests", "benchmarks", "scripts", "docker", "tasks.py")
SUFFIXES = (".py", ".yaml", ".yml", ".sh")
#: "issue 21", "Issue 38", "issues 11", "issue #5": not after "owner/repo " (another tracker).
CITED = re.compile(r"(?<![\w/.#-])(?:(\S+/\S+) )?[Ii]ssues? #?(\d+)")


def cited(text: str) -> set[int]:
    return {int(m.group(2)) for m in CITED.finditer(text) if not m.group(1)}


def listed(decisions: str) -> set[int]:
    return {int(n) for n in re.findall(r"^## issue (\d+)$", decisions, flags=re.M)}


def unlisted(root: Path = ROOT) -> list[str]:
    rounds = listed((root / "docs" / "decisions.md").read_text(encoding="utf-8"))
    out = []
    for top in CITING:
        paths = [root / top] if top.endswith(".py") else sorted((root / top).rglob("*"))
        for path in (p for p in paths if p.suffix in SUFFIXES and p.is_file()):
            if path.resolve() == Path(__file__).resolve():
                continue  # this file's examples
            text = path.read_text(encoding="utf-8", errors="replace")
            for number in sorted(cited(text) - rounds):
                out.append(f"{path.relative_to(root).as_posix()} cites issue {number}")
    return out


def test_every_cited_round_is_in_docs_decisions():
    assert unlisted() == []


def test_an_unlisted_round_is_caught(tmp_path):
    """The check can fail: a round cited but not listed; another project's issue is not counted."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "decisions.md").write_text("# Decisions\n\n## issue 21\nInterrupts.\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        '"""Ctrl-C stops a run (issue 21, item 1); Issue 99 item 2; see owner/repo issue 16,\n'
        'owner/repo #200 and https://github.com/o/r/issues/57."""\n'
    )
    assert unlisted(tmp_path) == ["tests/test_x.py cites issue 99"]
