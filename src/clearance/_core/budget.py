"""`RunBudget`: a token and cost budget for a whole run, and the prices it is counted in.

A run's budget counts every model call of the run (tasks, tool-loop steps, delegates,
children, isolated dispatches, clarifications, the plan and the synthesis), across resumed
sessions. Tokens are prompt plus completion tokens as the providers report them; cost is
each call's tokens at its model's price (`ModelPrice`, US dollars per million tokens). No
maintained price table is a dependency of Clearance, so prices are given with the budget
(the team file's ``prices:``), and a cost budget needs a price for every model the run uses.

It is checked before each model call (by `ModelCaller`): once the run has used its budget,
the next call is refused with `BudgetExceeded` and nothing is sent. The call that crosses the
budget is the last one, so a run may overshoot by at most one call's tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clearance._core.errors import ConfigError

__all__ = [
    "MAX_BUDGET_TOKENS",
    "MAX_BUDGET_USD",
    "MAX_PRICE_PER_MTOK",
    "ModelPrice",
    "RunBudget",
]

MAX_PRICE_PER_MTOK = 1_000_000.0
"""Most US dollars per million tokens a price may be: past it, a cost is a mistake (or inf)."""

MAX_BUDGET_TOKENS = 10**12
"""Most tokens a budget may be set to."""

MAX_BUDGET_USD = 1_000_000_000.0
"""Most US dollars a budget may be set to."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPrice:
    """What a model's tokens cost.

    Attributes:
        input_per_mtok: US dollars per million prompt tokens (at least 0).
        output_per_mtok: US dollars per million completion tokens (at least 0).
    """

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"must be a number, got {value!r}", field=name)
            if not math.isfinite(value) or not 0 <= value <= MAX_PRICE_PER_MTOK:
                raise ConfigError(
                    f"must be a number from 0 to {MAX_PRICE_PER_MTOK:,.0f}, got {value!r}",
                    field=name,
                )

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The cost of one call's tokens, in US dollars."""
        return (
            prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok
        ) / 1e6


@dataclass(frozen=True, kw_only=True, slots=True)
class RunBudget:
    """The most one run may use (see the module docstring).

    Attributes:
        tokens: Most prompt plus completion tokens over the whole run; ``None`` for no cap.
        cost_usd: Most US dollars over the whole run; ``None`` for no cap. Needs a price
            for every model the run calls.
        prices: Each model's price by model id (``"openai:gpt-4o-mini"``).

    Raises:
        ConfigError: A cap is not positive, or a price is not a number >= 0.
    """

    tokens: int | None = None
    cost_usd: float | None = None
    prices: Mapping[str, ModelPrice] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tokens is not None and (
            isinstance(self.tokens, bool)
            or not isinstance(self.tokens, int)
            or not 1 <= self.tokens <= MAX_BUDGET_TOKENS
        ):
            raise ConfigError(
                f"must be an integer from 1 to {MAX_BUDGET_TOKENS:,}, got {self.tokens!r}",
                field="budget.tokens",
            )
        cost = self.cost_usd
        if cost is not None and (
            isinstance(cost, bool)
            or not isinstance(cost, int | float)
            or not math.isfinite(cost)
            or not 0 < cost <= MAX_BUDGET_USD
        ):
            raise ConfigError(
                f"must be a number > 0 and at most {MAX_BUDGET_USD:,.0f}, got {cost!r}",
                field="budget.cost_usd",
            )
        object.__setattr__(self, "prices", dict(self.prices))

    def raised(self, *, tokens: int | None = None, cost_usd: float | None = None) -> RunBudget:
        """This budget with the caps given replaced (``None`` keeps a cap as it is)."""
        return RunBudget(
            tokens=self.tokens if tokens is None else tokens,
            cost_usd=self.cost_usd if cost_usd is None else cost_usd,
            prices=self.prices,
        )

    def check_prices(self, model_ids: set[str]) -> None:
        """Refuse a cost budget for a run calling a model without a price.

        Raises:
            ConfigError: ``cost_usd`` is set and a model id of ``model_ids`` has no price.
        """
        if self.cost_usd is None:
            return
        missing = sorted(model_ids - set(self.prices))
        if missing:
            raise ConfigError(
                f"a cost budget needs a price for every model; none for {', '.join(missing)} "
                "(give prices: {model_id: {input_per_mtok: ..., output_per_mtok: ...}})",
                field="prices",
            )

    def cost_usd_of(self, model_id: str, prompt_tokens: int, completion_tokens: int) -> float:
        """One call's cost (``0.0`` for a model without a price)."""
        price = self.prices.get(model_id)
        return 0.0 if price is None else price.cost_usd(prompt_tokens, completion_tokens)

    def to_dict(self) -> dict[str, Any]:
        """The budget as JSON-ready data (recorded with the run)."""
        return {
            "tokens": self.tokens,
            "cost_usd": self.cost_usd,
            "prices": {
                m: {"input_per_mtok": p.input_per_mtok, "output_per_mtok": p.output_per_mtok}
                for m, p in sorted(self.prices.items())
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunBudget:
        """The budget `to_dict` recorded.

        Raises:
            ConfigError: The data is not a recorded budget.
        """
        try:
            prices = {m: ModelPrice(**p) for m, p in dict(data.get("prices") or {}).items()}
            return cls(tokens=data.get("tokens"), cost_usd=data.get("cost_usd"), prices=prices)
        except (TypeError, AttributeError, ValueError) as exc:  # `dict("x")` is a ValueError
            raise ConfigError(f"the recorded budget is damaged: {exc}", field="budget") from exc
