"""`TeamConversation`: a memory group's opt-in shared conversation.

The pattern where collaborators see each other's contributions, with attribution: each
member posts turns into the group's memory (scope ``group:<name>``), and each member's prompt
may hold a window of them, chosen by recency or by relevance. It is off unless the group
declares ``shared_conversation`` in the team file; turns enter prompts only through the
`ContextBuilder` as ``memory:<id>`` items, so ``clearance verify`` checks them like any memory.
"""

from __future__ import annotations

from dataclasses import replace

from clearance._core.errors import AccessDenied, ConfigError
from clearance._core.ids import new_id
from clearance._core.memory_spec import MemoryGroup, SharedConversation
from clearance._core.vocabulary import MemoryKind
from clearance._state.conversation import Turn
from clearance._state.memory import MemoryRecord, PersistentMemory, group_scope

__all__ = ["TeamConversation"]


class TeamConversation:
    """One member's handle on a group's shared conversation.

    Args:
        memory: The member's `PersistentMemory` (its ``agent`` is the member).
        group: The declared group; it must have ``shared_conversation`` set.

    Raises:
        ConfigError: The group did not opt in to a shared conversation.
        AccessDenied: The memory's agent is not a member of the group.
    """

    def __init__(self, memory: PersistentMemory, group: MemoryGroup):
        if group.shared_conversation is None:
            raise ConfigError(
                "the group has no shared conversation (it is off unless declared)",
                field=f"memory_groups.{group.name}.shared_conversation",
            )
        if memory.agent not in group.agents or group.name not in memory.groups:
            raise AccessDenied(memory.agent, group_scope(group.name), "read")
        self.memory = memory
        self.group = group
        self.settings: SharedConversation = group.shared_conversation

    def post(self, content: str | Turn) -> MemoryRecord | None:
        """Add the member's contribution, attributed to it.

        Returns:
            The stored record, or ``None`` when that turn was already posted.
        """
        turn = (
            content
            if isinstance(content, Turn)
            else Turn(id=new_id("turn"), role="assistant", content=content)
        )
        turn = replace(turn, author=self.memory.agent)
        stored = self.memory.record(turn, group=self.group.name)
        return stored[0] if stored else None

    def view(self, query: str | None = None) -> list[MemoryRecord]:
        """The shared turns for the member's next prompt, at most ``window`` of them.

        Args:
            query: With ``retrieval="relevance"``, what the next turn is about; the most
                relevant turns come back (falling back to recency when nothing matches or no
                query is given). Ignored with ``"recency"``.

        Returns:
            Records of the group's memory, oldest first for recency, most relevant first for
            relevance.
        """
        window = self.settings.window
        if self.settings.retrieval == "relevance" and query:
            hits = [
                r
                for r in self.memory.retrieve(query, limit=window, group=self.group.name)
                if r.kind == MemoryKind.MESSAGE
            ]
            if hits:
                return hits
        recent = self.memory.recent(window * 4, group=self.group.name)
        return [r for r in recent if r.kind == MemoryKind.MESSAGE][-window:]
