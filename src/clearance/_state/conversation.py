"""`ConversationMemory`: one agent's conversation history, private to it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from clearance._core.errors import ConfigError
from clearance._core.ids import new_id
from clearance._core.names import check_count
from clearance._core.prompt import ChatMessage, Role

__all__ = ["CHAT_FORMAT", "USER_AUTHOR", "ConversationMemory", "Turn"]

USER_AUTHOR = "user"
"""The author of the user's turns in a chat: a prompt titles each ``user (<turn id>)``."""

CHAT_FORMAT = 1
"""The version of a chat's records its run's config holds (``chat_format``): 1 records each
of the user's messages as a ``user_message`` event when it is received. A chat recorded
without one holds the user's messages only in its prompts (``verify`` cannot hold them to
anything there)."""

_ROLES: frozenset[str] = frozenset({"system", "user", "assistant"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Turn:
    """One message of a conversation, with a stable id.

    Attributes:
        id: Unique within the conversation; adding a turn whose id is already held is a no-op.
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        content: The text.
        author: Who wrote it (an agent name or ``"user"``), for attribution; ``None`` if
            unknown.

    Raises:
        ConfigError: An unknown role or an empty id.
    """

    id: str
    role: Role
    content: str
    author: str | None = None

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise ConfigError(f"unknown role {self.role!r}", field="role")
        if not self.id:
            raise ConfigError("a turn needs a non-empty id", field="id")

    def to_chat(self) -> ChatMessage:
        """The turn as a `ChatMessage` (role and content)."""
        return ChatMessage(role=self.role, content=self.content)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"id": self.id, "role": self.role, "content": self.content, "author": self.author}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Turn:
        """Inverse of `to_dict`; a missing ``id`` gets a new one."""
        return cls(
            id=str(data.get("id") or new_id("turn")),
            role=data["role"],
            content=str(data["content"]),
            author=data.get("author"),
        )


TurnLike = Turn | ChatMessage | Mapping[str, Any]
"""What `ConversationMemory.add` accepts: a `Turn`, a `ChatMessage` (a new id is given), or
a mapping with ``role``, ``content`` and optionally ``id`` and ``author``."""


class ConversationMemory:
    """One agent's conversation, in order, de-duplicated by message id.

    Every read returns new containers of immutable `Turn` objects, so a caller can never
    change the memory's state through what it was given.

    Args:
        agent: The agent whose conversation this is.
    """

    def __init__(self, *, agent: str):
        self.agent = agent
        self._turns: list[Turn] = []
        self._ids: set[str] = set()

    def __len__(self) -> int:
        return len(self._turns)

    def add(self, messages: TurnLike | Iterable[TurnLike]) -> list[Turn]:
        """Append messages; ones whose id is already held are skipped.

        Args:
            messages: One message or several (see `TurnLike`).

        Returns:
            The turns actually added, in order (duplicates left out).

        Raises:
            ConfigError: A message has an unknown role.
        """
        if isinstance(messages, Turn | ChatMessage | Mapping):
            messages = [messages]
        added: list[Turn] = []
        for message in messages:
            turn = _as_turn(message)
            if turn.id in self._ids:
                continue
            self._ids.add(turn.id)
            self._turns.append(turn)
            added.append(turn)
        return added

    def get_messages(self, limit: int | None = None) -> list[Turn]:
        """The turns, oldest first: all of them, or the newest ``limit``.

        Raises:
            ConfigError: ``limit`` is not an integer of 0 or more.
        """
        if limit is None:
            return list(self._turns)
        check_count("limit", limit, least=0)
        return list(self._turns[len(self._turns) - limit :]) if limit else []

    def get_last_message(self) -> Turn | None:
        """The newest turn, or ``None`` when the conversation is empty."""
        return self._turns[-1] if self._turns else None

    def truncate_to_size(self, n: int) -> list[Turn]:
        """Keep only the newest ``n`` turns.

        Returns:
            The turns removed, oldest first.

        Raises:
            ConfigError: ``n`` is not an integer of 0 or more.
        """
        check_count("n", n, least=0)
        cut = max(0, len(self._turns) - n)
        return self.remove([t.id for t in self._turns[:cut]])

    def remove(self, ids: Iterable[str]) -> list[Turn]:
        """Remove the turns with these ids (unknown ids are ignored).

        Returns:
            The turns removed, oldest first.
        """
        drop = set(ids)
        removed = [t for t in self._turns if t.id in drop]
        self._turns = [t for t in self._turns if t.id not in drop]
        self._ids -= drop
        return removed

    def insert_before(self, turn: Turn, before_id: str | None) -> None:
        """Insert ``turn`` before the turn ``before_id`` (at the end when ``None``).

        Used by compression to put a summary where the turns it replaces were.

        Raises:
            KeyError: ``before_id`` is not held.
        """
        if turn.id in self._ids:
            return
        index = len(self._turns)
        if before_id is not None:
            index = next((i for i, t in enumerate(self._turns) if t.id == before_id), -1)
            if index < 0:
                raise KeyError(before_id)
        self._turns.insert(index, turn)
        self._ids.add(turn.id)

    def state_dict(self) -> dict[str, Any]:
        """A JSON-ready snapshot: ``{"agent": ..., "turns": [turn dicts]}``."""
        return {"agent": self.agent, "turns": [t.to_dict() for t in self._turns]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replace the conversation with a snapshot from `state_dict`.

        Raises:
            ConfigError: The snapshot belongs to another agent, or a turn is invalid.
        """
        owner = state.get("agent")
        if owner is not None and owner != self.agent:
            raise ConfigError(
                f"the snapshot is agent {owner!r}'s conversation, not {self.agent!r}'s",
                field="agent",
            )
        self._turns, self._ids = [], set()
        self.add([Turn.from_dict(t) for t in state.get("turns", [])])


def _as_turn(message: TurnLike) -> Turn:
    if isinstance(message, Turn):
        return message
    if isinstance(message, ChatMessage):
        return Turn(id=new_id("turn"), role=message.role, content=message.content)
    return Turn.from_dict(message)
