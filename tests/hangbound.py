"""The one wall-clock bound a test may assert: did not hang.

A loaded two-core runner stalls a healthy step for seconds, so a bound tighter than this one fails
on a slow machine without a bug. A test that means "at once" (a refusal before any reading, a
timeout that fires) asserts the work it did not do where it can (bytes read, calls made) and
bounds the time only by HANG_BOUND_S (plus the timeout it set, where it set one); speed targets
are numbers printed by benchmarks/, not asserts. tests/test_hang_bound.py fails on a tighter one.
"""

from __future__ import annotations

#: Seconds: the project's hang bound for one step of a test (commit 21cd875 moved the capture
#: refusals to it first).
HANG_BOUND_S = 10
