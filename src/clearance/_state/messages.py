"""`MessageBus`: explicit point-to-point and broadcast messages between agents."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime

from clearance._core.clock import Clock, utc_now

__all__ = ["BROADCAST", "Message", "MessageBus"]

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


class MessageBus:
    """Holds messages until the `ContextBuilder` admits them into the addressee's prompts.

    A message never reaches an agent it is not addressed to.

    Args:
        clock: Source of timestamps (UTC).
    """

    def __init__(self, *, clock: Clock = utc_now):
        self._clock = clock
        self._counter = itertools.count(1)
        self._messages: list[Message] = []

    def send(self, sender: str, recipient: str, content: str) -> Message:
        """Send ``content`` from ``sender`` to one ``recipient`` (or `BROADCAST`)."""
        message = Message(
            id=f"msg-{next(self._counter)}",
            sender=sender,
            recipient=recipient,
            content=content,
            created_at=self._clock(),
        )
        self._messages.append(message)
        return message

    def restore(self, message: Message) -> None:
        """Add a message recorded earlier (resuming a run), keeping its id, time and order.

        Later `send` calls number their messages after the highest restored ``msg-<n>`` id.

        Raises:
            ValueError: A message with the same id is already on the bus.
        """
        if any(m.id == message.id for m in self._messages):
            raise ValueError(f"message {message.id!r} is already on the bus")
        self._messages.append(message)
        self._counter = itertools.count(max(_number(m.id) for m in self._messages) + 1)

    def broadcast(self, sender: str, content: str) -> Message:
        """Send ``content`` from ``sender`` to every other agent."""
        return self.send(sender, BROADCAST, content)

    def for_agent(self, agent: str) -> tuple[Message, ...]:
        """Messages addressed to ``agent`` (directly or by broadcast), oldest first."""
        return tuple(m for m in self._messages if m.is_for(agent))

    def all(self) -> tuple[Message, ...]:
        """Every message, oldest first (for the ledger)."""
        return tuple(self._messages)
