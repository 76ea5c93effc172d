"""`SharedMemory`: the orchestrator's private record of every result of a run."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from clearance._core.clock import Clock, utc_now

__all__ = ["MemoryEntry", "SharedMemory"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEntry:
    """One record written to shared memory.

    Attributes:
        task_id: The task that produced it.
        agent: The agent that produced it.
        kind: ``"result"`` or ``"failure"``.
        content: The result text, or the failure reason.
        created_at: When it was written (UTC).
    """

    task_id: str
    agent: str
    kind: str
    content: str
    created_at: datetime


class SharedMemory:
    """Orchestrator-internal record of all results, with attribution.

    Agents never read it. Only the coordinator's synthesis prompt and tasks whose
    ``memory_scope`` is ``"all"`` are built from it; a default-scope task's prompt is built
    from the `TaskQueue` and its clearance instead.

    Args:
        clock: Source of timestamps (UTC).
        summary_chars: Characters of each entry kept by `get_summary`; longer entries are cut
            with a visible marker that says how much was left out.
    """

    def __init__(self, *, clock: Clock = utc_now, summary_chars: int = 200):
        self._clock = clock
        self._summary_chars = summary_chars
        self._entries: list[MemoryEntry] = []

    def write(self, *, task_id: str, agent: str, content: str, kind: str = "result") -> None:
        """Append an entry (entries are never overwritten)."""
        self._entries.append(
            MemoryEntry(
                task_id=task_id, agent=agent, kind=kind, content=content, created_at=self._clock()
            )
        )

    def entries(self, task_ids: Iterable[str] | None = None) -> tuple[MemoryEntry, ...]:
        """Entries in write order, restricted to ``task_ids`` unless it is ``None``."""
        if task_ids is None:
            return tuple(self._entries)
        wanted = set(task_ids)
        return tuple(e for e in self._entries if e.task_id in wanted)

    def get_summary(self, task_ids: Iterable[str] | None = None) -> str:
        """A compact Markdown summary, grouped by agent, one line per entry.

        Args:
            task_ids: Only entries of these tasks, ordered as ``task_ids`` lists them (entries
                of one task in write order), so the summary does not depend on the order in
                which concurrent tasks finished; ``None`` means every entry, in write order.

        Returns:
            The summary, or an empty string when there is nothing to summarize.
        """
        ids = None if task_ids is None else list(task_ids)
        selected = self.entries(ids)
        if ids is not None:
            rank = {task_id: i for i, task_id in reversed(list(enumerate(ids)))}
            selected = tuple(sorted(selected, key=lambda e: rank[e.task_id]))
        by_agent: dict[str, list[MemoryEntry]] = {}
        for entry in selected:
            by_agent.setdefault(entry.agent, []).append(entry)
        lines: list[str] = []
        for agent, entries in by_agent.items():
            lines.append(f"- {agent}:")
            for e in entries:
                text = " ".join(e.content.split())
                if len(text) > self._summary_chars:
                    cut = len(text) - self._summary_chars
                    text = f"{text[: self._summary_chars]} [... {cut} more characters]"
                lines.append(f"  - {e.task_id} ({e.kind}): {text}")
        return "\n".join(lines)
