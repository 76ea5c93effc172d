"""Fan out to N children over the bus, wait for all or a deadline, merge their findings.

Partial results are never passed off as complete: every child's outcome is ``ok``,
``failed`` or ``timed_out``, `AggregateResult.complete` is false when any is not ``ok``, and
the combined text says so on its first line. Identical findings (same text once whitespace,
case, list markers and final punctuation are ignored) are merged, keeping every child that
reported them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from clearance._agents.spawn import SPAWN_REQUEST, SPAWN_RESULT, SpawnRequest, SpawnResult
from clearance._core.errors import LimitExceeded
from clearance._core.ids import new_id
from clearance._state.events import EventBus

__all__ = ["AggregateResult", "Aggregator", "ChildOutcome", "AggregatedFinding", "split_findings"]

_MARKER = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(frozen=True, kw_only=True, slots=True)
class ChildOutcome:
    """How one child ended.

    Attributes:
        child_id: The child.
        goal: What it was asked.
        status: ``ok``, ``failed`` or ``timed_out``.
        result: Its final result (``""`` unless ``ok``).
        error: Why it failed or timed out, else ``None``.
    """

    child_id: str
    goal: str
    status: Literal["ok", "failed", "timed_out"]
    result: str = ""
    error: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AggregatedFinding:
    """One distinct finding and every child that reported it.

    Attributes:
        text: The finding as first reported.
        child_ids: The children that reported it, in fan-out order.
    """

    text: str
    child_ids: tuple[str, ...]


def split_findings(text: str) -> list[str]:
    """Split a result into findings: one per non-empty line, list markers removed."""
    return [_MARKER.sub("", line).strip() for line in text.splitlines() if line.strip()]


def _key(finding: str) -> str:
    return " ".join(finding.lower().split()).rstrip(".;:!")


@dataclass(frozen=True, kw_only=True, slots=True)
class AggregateResult:
    """The merged outcome of a fan-out.

    Attributes:
        outcomes: One per child, in fan-out order.
        findings: Distinct findings of the ``ok`` children, with attribution.
    """

    outcomes: tuple[ChildOutcome, ...]
    findings: tuple[AggregatedFinding, ...]

    @property
    def complete(self) -> bool:
        """Whether every child finished with a result."""
        return all(o.status == "ok" for o in self.outcomes)

    @property
    def missing(self) -> tuple[str, ...]:
        """Children without a result (failed or timed out)."""
        return tuple(o.child_id for o in self.outcomes if o.status != "ok")

    def combined_text(self) -> str:
        """The text a parent synthesizes from.

        A completeness line (``COMPLETE`` or ``PARTIAL``), the findings with attribution
        (``[child-a, child-b]``), then each missing child and why.
        """
        done = sum(o.status == "ok" for o in self.outcomes)
        total = len(self.outcomes)
        if self.complete:
            lines = [f"COMPLETE: all {total} subagents answered."]
        else:
            lines = [f"PARTIAL: {done} of {total} subagents answered; missing: "
                     f"{', '.join(self.missing)}."]  # fmt: skip
        lines.append("Findings:")
        lines.extend(f"- {f.text} [{', '.join(f.child_ids)}]" for f in self.findings)
        if not self.findings:
            lines.append("- (none)")
        for o in self.outcomes:
            if o.status != "ok":
                lines.append(f"Missing {o.child_id} ({o.status}): {o.error}")
        return "\n".join(lines)


class Aggregator:
    """Fans out children over an `EventBus` and aggregates their results.

    Needs a `SpawnWorker` (or any subscriber to ``spawn.request``) serving the same bus.

    Args:
        bus: The event bus.
        parent_id: The agent fanning out.
    """

    def __init__(self, bus: EventBus, parent_id: str) -> None:
        self._bus = bus
        self._parent_id = parent_id

    async def fan_out(
        self,
        goals: Mapping[str, str],
        *,
        timeout_s: float,
        tools: Sequence[str] = (),
    ) -> AggregateResult:
        """Spawn one child per ``child_id → goal`` and wait for all, or until ``timeout_s``.

        Args:
            goals: Child id → its goal, in fan-out order.
            timeout_s: Seconds to wait for all children together; also each child's own
                ``timeout_s`` in its spawn request.
            tools: Tool names every child may use.

        Returns:
            Every child's outcome (``timed_out`` for those without a result by the deadline)
            and the merged findings of those that answered.
        """
        correlation = {}
        for child_id, goal in goals.items():
            request = SpawnRequest(parent_id=self._parent_id, child_id=child_id, goal=goal,
                                   tools=tuple(tools), timeout_s=timeout_s)  # fmt: skip
            cid = new_id("spawn")
            correlation[child_id] = cid
            self._bus.publish(SPAWN_REQUEST, request.to_payload(), correlation_id=cid)

        async def one(child_id: str) -> ChildOutcome:
            goal = goals[child_id]
            try:
                event = await self._bus.wait_for(SPAWN_RESULT, correlation[child_id], timeout_s)
            except LimitExceeded:
                return ChildOutcome(child_id=child_id, goal=goal, status="timed_out",
                                    error=f"no result within {timeout_s}s")  # fmt: skip
            result = SpawnResult.from_payload(event.payload)
            if result.success:
                return ChildOutcome(child_id=child_id, goal=goal, status="ok",
                                    result=result.result)  # fmt: skip
            status: Literal["failed", "timed_out"] = (
                "timed_out" if result.error and "timeout_s" in result.error else "failed"
            )
            return ChildOutcome(child_id=child_id, goal=goal, status=status, error=result.error)

        outcomes = await asyncio.gather(*(one(child_id) for child_id in goals))
        merged: dict[str, tuple[str, list[str]]] = {}
        for outcome in outcomes:
            if outcome.status != "ok":
                continue
            for text in split_findings(outcome.result):
                key = _key(text)
                _first, ids = merged.setdefault(key, (text, []))
                if outcome.child_id not in ids:
                    ids.append(outcome.child_id)
        findings = tuple(
            AggregatedFinding(text=t, child_ids=tuple(ids)) for t, ids in merged.values()
        )
        return AggregateResult(outcomes=tuple(outcomes), findings=findings)
