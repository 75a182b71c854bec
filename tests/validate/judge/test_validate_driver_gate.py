"""The driver gate (issue 8 item 2): the suite's first check compares NVML's driver version with
the image's min_driver, in exactly the shape the container start-up check prints."""

from __future__ import annotations

import pytest

from validate.judge.driver_gate import driver_too_old, version_tuple


@pytest.mark.parametrize(
    ("driver", "minimum", "old"),
    [
        ("535.104.05", "550.54.14", True),
        ("550.54.14", "550.54.14", False),
        ("550.54.15", "550.54.14", False),
        ("535.104.05", "535.54.03", False),  # 104 > 54: numbers, not text ("104" < "54" as text)
        ("470.57.02", "525.60.13", True),
        ("560.28", "550.54.14", False),
    ],
)
def test_versions_compare_as_numbers(driver, minimum, old):
    assert (driver_too_old(driver, minimum) is not None) is old


def test_message_shape_with_the_cuda_this_driver_runs():
    assert driver_too_old("535.104.05", "550.54.14", "12.2") == (
        "driver 535.104.05 is older than 550.54.14 needed by this image: upgrade, or build for "
        "--cuda 12.2"
    )
    assert (
        driver_too_old("535.104.05", "550.54.14")
        == "driver 535.104.05 is older than 550.54.14 needed by this image: upgrade the driver"
    )


def test_unparseable_versions_are_not_judged():
    assert version_tuple("550.54.14") == (550, 54, 14)
    assert version_tuple("n/a") is None
    assert driver_too_old("n/a", "550.54.14") is None
