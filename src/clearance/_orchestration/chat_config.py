"""What a chat's run records as its config (`AgentChat`), as a run records its spec's."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url

from clearance._core.budget import RunBudget
from clearance._core.memory_spec import MemoryGroup, group_members
from clearance._core.spec import Agent
from clearance._orchestration.resume import process_identity
from clearance._orchestration.run_memory import absolute_url, masked_url
from clearance._state.conversation import CHAT_FORMAT
from clearance._state.memory import PersistentMemory

__all__ = ["chat_config"]


def chat_config(
    agent: Agent,
    model_id: str,
    memory: PersistentMemory | None,
    memory_groups: tuple[MemoryGroup, ...],
    budget: RunBudget | None,
) -> dict[str, Any]:
    """The config a chat's run records.

    The agent (its model and instructions), the memory groups as a mapping of members, where
    the long-term memory lives, the budget and prices it keeps to, the `CHAT_FORMAT` its
    records are in, and its owning process (as a run records it: a session whose process is
    gone is listed so, `process_gone`).
    """
    return {
        "agents": [{"name": agent.name, "model": model_id, "instructions": agent.instructions}],
        "memory_groups": {g: sorted(m) for g, m in group_members(memory_groups).items()},
        "memory": _memory_config(memory),
        "chat_format": CHAT_FORMAT,
        **_budget_config(budget),
        "process": process_identity(),
    }


def _budget_config(budget: RunBudget | None) -> dict[str, Any]:
    """What the run's config records about the budget, as a run records its spec's.

    ``budget`` holds the caps given (``tokens``, ``cost_usd``) and ``prices`` each model's
    price, when there are any; nothing without a budget.
    """
    if budget is None:
        return {}
    data = budget.to_dict()
    caps = {cap: data[cap] for cap in ("tokens", "cost_usd") if data[cap] is not None}
    return {"budget": caps, **({"prices": data["prices"]} if data["prices"] else {})}


def _memory_config(memory: PersistentMemory | None) -> dict[str, Any] | None:
    """What the run's config records about the memory, as runs do.

    ``None`` when nothing outlives the process: no memory, or an in-memory SQLite database.
    """
    if memory is None:
        return None
    parsed = make_url(memory.url)
    database = parsed.database or ""
    if parsed.drivername.startswith("sqlite") and (
        database in ("", ":memory:") or database.startswith("file:")
    ):
        return None
    return {"url": masked_url(absolute_url(memory.url)), "on_error": "fail"}
