"""A stack's reasons name where a value came from: "requested with --python" only when --python
was typed; a value pinned in invoke.yaml (or a variable) is named there. Before, reasons said
"requested with --python" for values pinned in invoke.yaml."""

from __future__ import annotations

import pytest

from gpuenv.compat.resolve import resolve_stack
from gpuenv.compat.rules.request import Request


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("python", "3.11", "requested with invoke.yaml: gpuenv.python"),
        ("cuda", "cpu", "requested with invoke.yaml: gpuenv.cuda cpu"),
        ("torch", "2.13.0", "matches invoke.yaml: gpuenv.torch 2.13.0"),
    ],
)
def test_a_value_pinned_in_invoke_yaml_is_named_there_in_the_reasons(key, value, words):
    pinned = {"python": "3.11", "cuda": "cpu", "torch": "2.13.0"}
    typed = resolve_stack(Request(driver="570.148.08", **pinned))
    from_file = resolve_stack(
        Request(driver="570.148.08", origins=((key, f"invoke.yaml: gpuenv.{key}"),), **pinned)
    )
    assert typed.stack_id == from_file.stack_id
    assert any(words in reason for reason in from_file.reasons), from_file.reasons
    assert not any(f"--{key}" in reason for reason in from_file.reasons), from_file.reasons
    assert any(f"--{key}" in reason for reason in typed.reasons), typed.reasons
