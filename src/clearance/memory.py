"""The memory kit: conversation history, long-term memory, memory groups, window monitoring.

Every memory is private to its agent unless a `MemoryGroup` declares otherwise; a team file
reaches all of this through ``clearance run`` and ``clearance chat``. Use the parts directly to
keep one agent's turns (`ConversationMemory`), remember across runs with relevance retrieval
(`PersistentMemory`, `memory_lookup`), or watch a context window and compress history before
it overflows (`ContextWindowMonitor`).
"""

from clearance._context.window import CompressionRecord, ContextWindowMonitor, Strategy
from clearance._core.memory_spec import MemoryGroup, SharedConversation, group_members
from clearance._orchestration.run_memory import RunMemory, default_memory_url
from clearance._state.conversation import ConversationMemory, Turn
from clearance._state.memory import Embedder, MemoryRecord, PersistentMemory, memory_lookup
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
    "default_memory_url",
    "group_members",
    "memory_lookup",
]
