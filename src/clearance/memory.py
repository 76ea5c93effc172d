"""The memory kit: conversation history, long-term memory, memory groups, window monitoring.

Every memory is private to its agent unless a `MemoryGroup` declares otherwise; a team file
reaches all of this through ``clearance run`` and ``clearance chat``. Use the parts directly to
keep one agent's turns (`ConversationMemory`), remember across runs with relevance retrieval
(`PersistentMemory`; `memory_lookup`, `list_memories` and `count_memories` for auditing),
or watch a context window and compress history before it overflows (`ContextWindowMonitor`).
"""

import typing

from clearance._core import lazy as _lazy

if typing.TYPE_CHECKING:
    from clearance._context.window import CompressionRecord, ContextWindowMonitor, Strategy
    from clearance._core.memory_spec import MemoryGroup, SharedConversation, group_members
    from clearance._orchestration.run_memory import RunMemory, default_memory_url
    from clearance._state.conversation import ConversationMemory, Turn
    from clearance._state.memory import (
        Embedder,
        MemoryRecord,
        PersistentMemory,
        count_memories,
        list_memories,
        memory_lookup,
    )
    from clearance._state.team_conversation import TeamConversation

__all__ = [
    "CompressionRecord",
    "ContextWindowMonitor",
    "ConversationMemory",
    "Embedder",
    "MemoryGroup",
    "MemoryRecord",
    "PersistentMemory",
    "RunMemory",
    "SharedConversation",
    "Strategy",
    "TeamConversation",
    "Turn",
    "count_memories",
    "default_memory_url",
    "group_members",
    "list_memories",
    "memory_lookup",
]

_EXPORTS = {
    "CompressionRecord": "clearance._context.window",
    "ContextWindowMonitor": "clearance._context.window",
    "ConversationMemory": "clearance._state.conversation",
    "Embedder": "clearance._state.memory",
    "MemoryGroup": "clearance._core.memory_spec",
    "MemoryRecord": "clearance._state.memory",
    "PersistentMemory": "clearance._state.memory",
    "RunMemory": "clearance._orchestration.run_memory",
    "SharedConversation": "clearance._core.memory_spec",
    "Strategy": "clearance._context.window",
    "TeamConversation": "clearance._state.team_conversation",
    "Turn": "clearance._state.conversation",
    "count_memories": "clearance._state.memory",
    "default_memory_url": "clearance._orchestration.run_memory",
    "group_members": "clearance._core.memory_spec",
    "list_memories": "clearance._state.memory",
    "memory_lookup": "clearance._state.memory",
}
"""Each public name and the module that defines it, imported on first use."""

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)
