"""validate.reading.json_nesting_depth cuts strings out with a regex before it counts brackets; it
must give the depth a scan character by character gives (that scan, the old code, is the oracle)."""

from __future__ import annotations

import random

import pytest

from validate.reading import json_nesting_depth


def depth_by_characters(text: str, stop_above: int | None = None) -> int:
    """The plain definition: brackets outside strings, an escape skipping the next character."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": [1, {"b": 2}]}', 3),
        ('{"a": "[[[[{{{{"}', 1),  # brackets in a string do not count
        ('{"a": "x\\"[[[", "b": [1]}', 2),  # an escaped quote does not end the string
        ('["\\\\", [[1]]]', 3),  # an escaped backslash does: the string ends at the next quote
        ('[["never closed [[[[', 2),  # after an unterminated string's quote nothing counts
        ('"a\\\n[["', 0),  # an escaped newline stays inside the string
        ("]]}[", 0),  # closing brackets first never make depth
        ("", 0),
    ],
)
def test_depth_of_known_texts(text, expected):
    assert json_nesting_depth(text) == depth_by_characters(text) == expected


def test_depth_stops_once_past_the_limit():
    assert json_nesting_depth("[" * 100_000, stop_above=64) == 65


def test_depth_matches_the_character_scan_on_random_texts():
    rng = random.Random(24)
    for _ in range(20_000):
        text = "".join(rng.choice('[]{}"\\a\n,:') for _ in range(rng.randint(0, 40)))
        for limit in (None, 2):
            assert json_nesting_depth(text, limit) == depth_by_characters(text, limit), (
                text,
                limit,
            )


def test_both_cuts_match_the_character_scan_on_random_texts_with_other_scripts():
    """Texts with no quote after a backslash take the bytes cut (json_nesting_depth's fast path),
    the others the regex: both must be the character scan, whatever characters the strings hold
    (a multi-byte character, a lone surrogate) and wherever backslashes stand."""
    rng = random.Random(37)
    fast = 0
    for _ in range(20_000):
        text = "".join(rng.choice('[]{}"\\a\n,:é\ud800€') for _ in range(rng.randint(0, 40)))
        fast += '\\"' not in text
        for limit in (None, 2):
            assert json_nesting_depth(text, limit) == depth_by_characters(text, limit), (
                text,
                limit,
            )
    assert 2_000 < fast < 18_000  # both cuts were tried, many times each
