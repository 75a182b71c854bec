"""Reporting: one record per check, the table, JSON and JUnit-facing shapes, and the baseline
(a known-good server's figures, saved from a report and read back to judge the next one)."""
