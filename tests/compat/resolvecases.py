"""The resolver as the compat tests call it: on a fixed day (the matrix's dates do not move the
answers under the tests), and a refusal read as the one line a user sees."""

from __future__ import annotations

from datetime import date

import pytest

from gpuenv.compat.resolve import Request, resolve_stack
from gpuenv.errors import NoCompatibleStack
from gpuenv.stack import Stack

TODAY = date(2026, 11, 23)


def resolve(**wishes) -> Stack:
    return resolve_stack(Request(today=TODAY, **wishes))


def failure(**wishes) -> str:
    with pytest.raises(NoCompatibleStack) as err:
        resolve(**wishes)
    text = err.value.render()
    assert "\n" not in text, "one line"
    assert ": ," not in text and "()" not in text and "supported: )" not in text, (
        f"no empty lists: {text}"
    )
    return text
