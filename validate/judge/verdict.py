"""The verdict words (pass, fail, skip, info, warn, not judged) and `Verdict`, the outcome of
one comparison that every rule in validate/judge/ returns."""

from __future__ import annotations

from dataclasses import dataclass

PASS = "pass"

FAIL = "fail"

SKIP = "skip"

INFO = "info"  # reported figure without a pass/fail line (e.g. pageable copies)

WARN = "warn"  # works, but a user will notice (PTX JIT at first use): never fails the run

#: Measured, and shown, but no rule says whether it is good: no like-for-like reference for the
#: model (nor --baseline). Never a pass, never a fail; a saved baseline or the fleet median judges
#: it.
NOT_JUDGED = "not judged"

#: Every word a report may carry for "measured, not judged" (reports before NOT_JUDGED say "no
#: reference").
NOT_JUDGED_WORDS = (NOT_JUDGED, "no reference")


@dataclass(frozen=True)
class Verdict:
    """The outcome of one comparison: verdict word, the threshold in words, and why."""

    verdict: str
    threshold: str
    reason: str = ""

    @property
    def failed(self) -> bool:
        return self.verdict == FAIL


def at_least(measured: float, minimum: float, threshold: str, what: str) -> Verdict:
    """PASS when `measured` reaches `minimum`, else FAIL naming `what` (the speed, memory and PCIe
    rules)."""
    if measured >= minimum:
        return Verdict(PASS, threshold)
    return Verdict(FAIL, threshold, f"{what} {measured:.4g} is below {minimum:.4g}")
