"""A run's recorded budget read back: anything damaged is one `ConfigError`, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from clearance import ConfigError, RunBudget


@pytest.mark.parametrize(
    "data",
    [
        {"prices": "x"},  # dict("x") raises ValueError, not TypeError
        {"prices": ["ab"]},
        {"prices": {"m": 5}},
        {"prices": {"m": {"input_per_mtok": float("nan"), "output_per_mtok": 1}}},
        {"tokens": 10**13},
        {"tokens": True},
        {"cost_usd": float("inf")},
        {"cost_usd": -1.0},
    ],
)
def test_a_damaged_recorded_budget_is_a_config_error(data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RunBudget.from_dict(data)


def test_a_recorded_budget_round_trips() -> None:
    budget = RunBudget(tokens=1000, cost_usd=2.5)
    assert RunBudget.from_dict(budget.to_dict()) == budget
