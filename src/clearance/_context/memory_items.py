"""How long-term memory records, conversation turns and messages are titled in a prompt.

The title of a memory block names the record's scope, so ``clearance verify`` can check from
the ledger alone that the scope is in the prompt's clearance (the title is covered by the
call's digest); given the memory store, it checks the whole title (kind, scope, author, id)
against the record, and a message's title (its sender) against the recorded message.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from clearance._context import layout as L
from clearance._context.layout import CONVERSATION_TRAILER, SUMMARY_PROMPT

if TYPE_CHECKING:
    from clearance._state.conversation import Turn
    from clearance._state.memory import MemoryRecord
    from clearance._state.messages import Message

__all__ = [
    "CONVERSATION_TRAILER",
    "MEMORY_SECTION",
    "SUMMARY_PROMPT",
    "TURNS_SECTION",
    "author_of_title",
    "memory_title",
    "message_title",
    "scope_of_title",
    "turn_title",
]

MEMORY_SECTION, TURNS_SECTION = L.MEMORY, L.TURNS
_SCOPE = re.compile(r" from ((?:agent|group):\S+), by ")
_AUTHOR = re.compile(r" from (?:agent|group):\S+, by (\S+) \(")


def memory_title(record: MemoryRecord) -> str:
    """``"<kind> from <scope>, by <author> (<id>)"``."""
    return f"{record.kind} from {record.scope}, by {record.author} ({record.id})"


def message_title(message: Message) -> str:
    """``"From <sender> (<message id>)"``: who sent it, for attribution."""
    return f"From {message.sender} ({message.id})"


def scope_of_title(title: str) -> str | None:
    """The scope named in a memory block's title, or ``None`` when it names none."""
    match = _SCOPE.search(title)
    return match.group(1) if match else None


def author_of_title(title: str) -> str | None:
    """The author named in a memory block's title, or ``None`` when it names none."""
    match = _AUTHOR.search(title)
    return match.group(1) if match else None


def turn_title(turn: Turn) -> str:
    """``"<author or role> (<id>)"``: who said it, for attribution."""
    return f"{turn.author or turn.role} ({turn.id})"
