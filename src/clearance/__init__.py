"""Clearance: teams of LLM agents on a task graph, with need-to-know context.

Agents are pure functions of their task and the results of the tasks they depend on. The
orchestrator decides what each agent sees, through one choke point, the `ContextBuilder`;
every prompt carries a `ContextManifest` of where each part came from, and every run is
recorded in a `RunLedger`.
"""

from clearance._context.builder import ContextBuilder
from clearance._context.clearance import Clearance
from clearance._context.window import CompressionRecord, ContextWindowMonitor
from clearance._core.errors import (
    AccessDenied,
    ClearanceError,
    ConfigError,
    ContextViolation,
    CycleError,
    DependencyPayloadError,
    DuplicateTaskError,
    GraphError,
    LimitExceeded,
    ModelError,
    OutputValidationError,
    PathEscapeError,
    PlanError,
    SelfDependencyError,
    StoreError,
    UnknownDependencyError,
)
from clearance._core.memory_spec import MemoryGroup, SharedConversation
from clearance._core.prompt import ChatMessage, ContextItem, ContextManifest, Prompt
from clearance._core.spec import Agent, AgentLimits, MemoryScope, Task, Team
from clearance._orchestration.chat import AgentChat
from clearance._orchestration.orchestrator import Orchestrator
from clearance._orchestration.result import RunEvent, RunResult, TaskOutcome
from clearance._state.conversation import ConversationMemory, Turn
from clearance._state.graph import TaskGraph
from clearance._state.ledger import RunLedger
from clearance._state.memory import Embedder, MemoryRecord, PersistentMemory, memory_lookup
from clearance._state.messages import Message, MessageBus
from clearance._state.queue import TaskQueue, TaskState, TaskStatus
from clearance._state.shared_memory import SharedMemory
from clearance._state.team_conversation import TeamConversation

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "Agent",
    "AgentChat",
    "AgentLimits",
    "ChatMessage",
    "Clearance",
    "ClearanceError",
    "CompressionRecord",
    "ConfigError",
    "ContextBuilder",
    "ContextItem",
    "ContextManifest",
    "ContextViolation",
    "ContextWindowMonitor",
    "ConversationMemory",
    "CycleError",
    "DependencyPayloadError",
    "DuplicateTaskError",
    "Embedder",
    "GraphError",
    "LimitExceeded",
    "MemoryGroup",
    "MemoryRecord",
    "MemoryScope",
    "Message",
    "MessageBus",
    "ModelError",
    "Orchestrator",
    "OutputValidationError",
    "PathEscapeError",
    "PersistentMemory",
    "PlanError",
    "Prompt",
    "RunEvent",
    "RunLedger",
    "RunResult",
    "SelfDependencyError",
    "SharedConversation",
    "SharedMemory",
    "StoreError",
    "Task",
    "TaskGraph",
    "TaskOutcome",
    "TaskQueue",
    "TaskState",
    "TaskStatus",
    "Team",
    "TeamConversation",
    "Turn",
    "UnknownDependencyError",
    "memory_lookup",
]
