"""`RayExecutor`'s numeric settings from Python are checked like the team file's: one line.

Before: ``start_timeout_s="5"`` or ``cpus_per_worker="1"`` raised a bare `TypeError` from a
comparison, and ``start_timeout_s=True`` was taken as 1 second.
"""

from __future__ import annotations

from typing import Any

import pytest

from clearance import ConfigError, RayExecutor


@pytest.mark.parametrize(
    "settings",
    [
        {"start_timeout_s": "5"},
        {"start_timeout_s": True},
        {"start_timeout_s": float("nan")},
        {"start_timeout_s": None},
        {"cpus_per_worker": "1"},
        {"cpus_per_worker": False},
        {"cpus_per_worker": None},
        {"cpus_per_worker": float("inf")},
    ],
)
def test_a_setting_that_is_not_a_number_in_range_is_a_config_error(
    settings: dict[str, Any],
) -> None:
    name = next(iter(settings))
    with pytest.raises(ConfigError) as info:
        RayExecutor(**settings)
    assert info.value.field == name
    assert "\n" not in str(info.value)


def test_numbers_in_range_are_kept() -> None:
    executor = RayExecutor(start_timeout_s=5, cpus_per_worker=0.5)
    assert (executor.start_timeout_s, executor.cpus_per_worker) == (5.0, 0.5)
