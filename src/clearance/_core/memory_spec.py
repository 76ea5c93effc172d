"""Memory groups: the only way agents share memory, declared in the team file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from clearance._core.errors import ConfigError
from clearance._core.names import check_count, check_name

__all__ = [
    "AgentMemory",
    "MemoryGroup",
    "SharedConversation",
    "group_members",
    "memory_scopes_of",
]

MAX_RECALL = 50
"""Most memory records one task may recall."""

MAX_SHARED_WINDOW = 1000
"""Most shared turns of a group's conversation one prompt may hold."""


def _check_group_name(field: str, name: object) -> None:
    """A group's name is a name like an agent's: its scope ``group:<name>`` is one token.

    Memory blocks are titled ``<kind> from <scope>, by <author> (<id>)``, and ``clearance
    verify`` reads the scope back from the title: a space, a comma or a line break in it
    would make the title name another scope. Letters are ASCII, so two groups never look
    alike while being different scopes (a Cyrillic letter for a Latin one).
    """
    try:
        check_name("memory group name", name)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(str(exc), field=field) from None


@dataclass(frozen=True, kw_only=True, slots=True)
class SharedConversation:
    """Opt-in team conversation memory of a group: members see each other's turns.

    Attributes:
        window: Most shared turns admitted into one prompt.
        retrieval: ``"recency"`` (the newest ``window`` turns) or ``"relevance"`` (the
            ``window`` turns most relevant to the prompt's subject, by the memory's ranking).

    Raises:
        ConfigError: ``window`` not an integer from 1 to `MAX_SHARED_WINDOW` (1,000), or an
            unknown ``retrieval``.
    """

    window: int = 10
    retrieval: Literal["recency", "relevance"] = "recency"

    def __post_init__(self) -> None:
        check_count("shared_conversation.window", self.window, least=1, most=MAX_SHARED_WINDOW)
        if self.retrieval not in ("recency", "relevance"):
            raise ConfigError(
                f"must be 'recency' or 'relevance', got {self.retrieval!r}",
                field="shared_conversation.retrieval",
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryGroup:
    """Named agents that share one long-term memory (scope ``group:<name>``).

    Attributes:
        name: The group's name: 1-128 ASCII letters, digits, ``_``, ``.``, ``:`` or ``-``,
            starting with a letter or digit (as an agent's).
        agents: Its members; no other agent reads or writes the group's memory.
        shared_conversation: When set, the group also keeps a shared conversation (off by
            default).

    Raises:
        ConfigError: A name that is not one, fewer than two members, or a member listed
            twice.
    """

    name: str
    agents: tuple[str, ...]
    shared_conversation: SharedConversation | None = None

    def __post_init__(self) -> None:
        _check_group_name(f"memory_groups.{self.name}", self.name)
        object.__setattr__(self, "agents", tuple(self.agents))
        if len(self.agents) < 2:
            raise ConfigError(
                "a memory group needs at least two agents", field=f"memory_groups.{self.name}"
            )
        if len(set(self.agents)) != len(self.agents):
            raise ConfigError("an agent is listed twice", field=f"memory_groups.{self.name}")


@dataclass(frozen=True, kw_only=True, slots=True)
class AgentMemory:
    """An agent's long-term memory in runs: what it recalls before a task, records after.

    Attributes:
        recall: Most records recalled before each task, the most relevant to the task's
            title and description first (0: none). They reach the prompt only through the
            `ContextBuilder`, as ``memory:<id>`` items the task's clearance admits.
        record: What is recorded after a task completes: ``"result"`` (its result),
            ``"task_and_result"`` (its title, description and result) or ``"none"``.
        record_to: A memory group the agent belongs to, to record there (shared with the
            group's members only); ``None`` (default) records to the agent's private scope.

    Raises:
        ConfigError: ``recall`` not an integer from 0 to 50, an unknown ``record``, or a
            ``record_to`` that is not a group's name.
    """

    recall: int = 3
    record: Literal["none", "result", "task_and_result"] = "result"
    record_to: str | None = None

    def __post_init__(self) -> None:
        check_count("memory.recall", self.recall, least=0, most=MAX_RECALL)
        if self.record_to is not None:
            _check_group_name("memory.record_to", self.record_to)
        if self.record not in ("none", "result", "task_and_result"):
            raise ConfigError(
                f"must be 'none', 'result' or 'task_and_result', got {self.record!r}",
                field="memory.record",
            )

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (recorded with the run)."""
        return {"recall": self.recall, "record": self.record, "record_to": self.record_to}


def group_members(groups: Iterable[MemoryGroup]) -> dict[str, frozenset[str]]:
    """``{group name: members}`` for `clearance.PersistentMemory` and `Clearance`."""
    return {g.name: frozenset(g.agents) for g in groups}


def memory_scopes_of(agent: str, groups: Mapping[str, Iterable[str]] | None) -> frozenset[str]:
    """The memory scopes ``agent`` reads: ``agent:<name>`` and ``group:<g>`` per membership."""
    if not groups:
        return frozenset((f"agent:{agent}",))
    return frozenset(
        {f"agent:{agent}", *(f"group:{g}" for g, m in (groups or {}).items() if agent in set(m))}
    )
