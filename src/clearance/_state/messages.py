"""`MessageBus`: explicit point-to-point and broadcast messages between agents."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import ConfigError

__all__ = ["BROADCAST", "Message", "MessageBus", "check_recipient"]

BROADCAST = "*"
"""Recipient name that addresses a message to every agent but its sender."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Message:
    """One message between agents.

    Attributes:
        id: Unique within its bus (``"msg-1"``...); the prompt origin is ``message:<id>``.
        sender: The sending agent's name.
        recipient: The addressee's name, or `BROADCAST`.
        content: The text.
        created_at: When it was sent (UTC).
    """

    id: str
    sender: str
    recipient: str
    content: str
    created_at: datetime

    def is_for(self, agent: str) -> bool:
        """Whether ``agent`` is an addressee (a sender never receives its own broadcast)."""
        if self.recipient == BROADCAST:
            return agent != self.sender
        return self.recipient == agent


def _number(message_id: str) -> int:
    """``n`` of a ``msg-<n>`` id; 0 for any other id."""
    rest = message_id.removeprefix("msg-")
    return int(rest) if rest != message_id and rest.isdigit() else 0


def check_recipient(recipient: str, agents: Iterable[str]) -> None:
    """Refuse a message that would reach nobody.

    Args:
        recipient: An agent's name, or `BROADCAST`.
        agents: The names of the team's agents.

    Raises:
        ConfigError: ``recipient`` is neither `BROADCAST` nor one of ``agents``; the message
            names it and lists the agents.
    """
    names = set(agents)
    if recipient != BROADCAST and recipient not in names:
        known = ", ".join(sorted(names)) or "none"
        raise ConfigError(
            f"message to unknown agent {recipient!r} would reach nobody (agents: {known})",
            field="to",
        )


class MessageBus:
    """Holds messages until the `ContextBuilder` admits them into the addressee's prompts.

    A message never reaches an agent it is not addressed to.

    Args:
        clock: Source of timestamps (UTC).
        agents: The names messages may be addressed to; `send` refuses any other recipient
            (a message to nobody would be silently dropped). ``None`` accepts any name; the
            orchestrator then refuses, before a run starts, a message to an agent its team
            does not have.
    """

    def __init__(self, *, clock: Clock = utc_now, agents: Iterable[str] | None = None):
        self._clock = clock
        self._agents = frozenset(agents) if agents is not None else None
        self._counter = itertools.count(1)
        self._messages: list[Message] = []
        self._ids: set[str] = set()  # every id on the bus: `restore` checks in O(1)
        self._highest = 0  # the highest ``msg-<n>`` number on the bus

    def send(self, sender: str, recipient: str, content: str) -> Message:
        """Send ``content`` from ``sender`` to one ``recipient`` (or `BROADCAST`).

        Raises:
            ConfigError: The bus was given its ``agents`` and ``recipient`` is none of them.
        """
        if self._agents is not None:
            check_recipient(recipient, self._agents)
        message = Message(
            id=f"msg-{next(self._counter)}",
            sender=sender,
            recipient=recipient,
            content=content,
            created_at=self._clock(),
        )
        self._add(message)
        return message

    def restore(self, message: Message) -> None:
        """Add a message recorded earlier (resuming a run), keeping its id, time and order.

        Later `send` calls number their messages after the highest restored ``msg-<n>`` id.
        Each restore takes constant time, so a run with many messages resumes in linear time.

        Raises:
            ValueError: A message with the same id is already on the bus.
        """
        if message.id in self._ids:
            raise ValueError(f"message {message.id!r} is already on the bus")
        self._add(message)
        self._counter = itertools.count(self._highest + 1)

    def _add(self, message: Message) -> None:
        self._messages.append(message)
        self._ids.add(message.id)
        self._highest = max(self._highest, _number(message.id))

    def broadcast(self, sender: str, content: str) -> Message:
        """Send ``content`` from ``sender`` to every other agent."""
        return self.send(sender, BROADCAST, content)

    def for_agent(self, agent: str) -> tuple[Message, ...]:
        """Messages addressed to ``agent`` (directly or by broadcast), oldest first."""
        return tuple(m for m in self._messages if m.is_for(agent))

    def all(self) -> tuple[Message, ...]:
        """Every message, oldest first (for the ledger)."""
        return tuple(self._messages)
