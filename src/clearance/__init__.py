"""Clearance: teams of LLM agents on a task graph, with need-to-know context.

Agents are pure functions of their task and the results of the tasks they depend on. The
orchestrator decides what each agent sees, through one choke point, the `ContextBuilder`;
every prompt carries a `ContextManifest` of where each part came from, and every run is
recorded in a `RunLedger`.
"""

from clearance._agents.aggregator import (
    AggregatedFinding,
    AggregateResult,
    Aggregator,
    ChildOutcome,
)
from clearance._agents.compaction import StepCompactor
from clearance._agents.delegation import DelegationChain, DelegationStep
from clearance._agents.files import FileCaps
from clearance._agents.isolation import ContextIsolationManager, DispatchResult
from clearance._agents.offload import DataOffloader, OffloadedOutput
from clearance._agents.retry import RetryPolicy
from clearance._agents.session import AgentSession, Step
from clearance._agents.spawn import SpawnRequest, SpawnResult, SpawnWorker
from clearance._agents.tools import Tool, ToolOutput
from clearance._agents.workspace import Workspace
from clearance._context.architecture import AdrSummary, ArchitecturalContext, Dependency
from clearance._context.builder import ContextBuilder
from clearance._context.clearance import Clearance
from clearance._context.isolated import IsolatedContext
from clearance._context.window import CompressionRecord, ContextWindowMonitor
from clearance._core.errors import (
    AccessDenied,
    ClearanceError,
    ConfigError,
    ContextViolation,
    CycleError,
    DelegationError,
    DelegationLoopError,
    DependencyPayloadError,
    DuplicateTaskError,
    GraphError,
    LedgerError,
    LimitExceeded,
    MaxDepthError,
    ModelError,
    OutputValidationError,
    PathEscapeError,
    PlanError,
    SelfDependencyError,
    StoreError,
    SubagentError,
    UnknownDependencyError,
)
from clearance._core.memory_spec import MemoryGroup, SharedConversation
from clearance._core.prompt import ChatMessage, ContextItem, ContextManifest, Prompt
from clearance._core.spec import Agent, AgentLimits, FanOut, MemoryScope, Task, TaskMode, Team
from clearance._orchestration.chat import AgentChat
from clearance._orchestration.executor import ModelExecutor
from clearance._orchestration.orchestrator import Orchestrator
from clearance._orchestration.ray_executor import RayExecutor
from clearance._orchestration.result import RunEvent, RunResult, TaskOutcome
from clearance._state.conversation import ConversationMemory, Turn
from clearance._state.events import Event, EventBus
from clearance._state.grants import StoreGrants, StoreView
from clearance._state.graph import TaskGraph
from clearance._state.ledger import RunLedger
from clearance._state.memory import Embedder, MemoryRecord, PersistentMemory, memory_lookup
from clearance._state.messages import Message, MessageBus
from clearance._state.null_ledger import NullLedger
from clearance._state.queue import TaskQueue, TaskState, TaskStatus
from clearance._state.shared_memory import SharedMemory
from clearance._state.store import ContextStore, StoreEntry
from clearance._state.team_conversation import TeamConversation

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "AdrSummary",
    "Agent",
    "AgentChat",
    "AgentLimits",
    "AgentSession",
    "AggregateResult",
    "AggregatedFinding",
    "Aggregator",
    "ArchitecturalContext",
    "ChatMessage",
    "ChildOutcome",
    "Clearance",
    "ClearanceError",
    "CompressionRecord",
    "ConfigError",
    "ContextBuilder",
    "ContextIsolationManager",
    "ContextItem",
    "ContextManifest",
    "ContextStore",
    "ContextViolation",
    "ContextWindowMonitor",
    "ConversationMemory",
    "CycleError",
    "DataOffloader",
    "DelegationChain",
    "DelegationError",
    "DelegationLoopError",
    "DelegationStep",
    "Dependency",
    "DependencyPayloadError",
    "DispatchResult",
    "DuplicateTaskError",
    "Embedder",
    "Event",
    "EventBus",
    "FanOut",
    "FileCaps",
    "GraphError",
    "IsolatedContext",
    "LedgerError",
    "LimitExceeded",
    "MaxDepthError",
    "MemoryGroup",
    "MemoryRecord",
    "MemoryScope",
    "Message",
    "MessageBus",
    "ModelError",
    "ModelExecutor",
    "NullLedger",
    "OffloadedOutput",
    "Orchestrator",
    "OutputValidationError",
    "PathEscapeError",
    "PersistentMemory",
    "PlanError",
    "Prompt",
    "RayExecutor",
    "RetryPolicy",
    "RunEvent",
    "RunLedger",
    "RunResult",
    "SelfDependencyError",
    "SharedConversation",
    "SharedMemory",
    "SpawnRequest",
    "SpawnResult",
    "SpawnWorker",
    "Step",
    "StepCompactor",
    "StoreEntry",
    "StoreError",
    "StoreGrants",
    "StoreView",
    "SubagentError",
    "Task",
    "TaskGraph",
    "TaskMode",
    "TaskOutcome",
    "TaskQueue",
    "TaskState",
    "TaskStatus",
    "Team",
    "TeamConversation",
    "Tool",
    "ToolOutput",
    "Turn",
    "UnknownDependencyError",
    "Workspace",
    "memory_lookup",
]
