"""The subagent kit: fresh-context dispatch, workspaces, spawning and aggregation.

These are the parts the orchestrator builds isolated tasks, spawned children and fan-outs
from; a team file reaches all of them through ``clearance run``. Use them directly to dispatch
one task with its `IsolatedContext` (`ContextIsolationManager`), to give an agent its own
folder under limits (`AgentSession`, `Workspace`), to answer spawn requests on an `EventBus`
(`SpawnWorker`), or to merge children's results (`Aggregator`).
"""

from clearance._agents.aggregator import (
    AggregatedFinding,
    AggregateResult,
    Aggregator,
    ChildOutcome,
)
from clearance._agents.compaction import StepCompactor
from clearance._agents.delegation import DelegationChain, DelegationStep
from clearance._agents.isolation import ContextIsolationManager, DispatchResult
from clearance._agents.offload import DataOffloader, OffloadedOutput
from clearance._agents.session import AgentSession, Step
from clearance._agents.spawn import SpawnRequest, SpawnResult, SpawnWorker
from clearance._agents.workspace import Workspace
from clearance._context.architecture import AdrSummary, ArchitecturalContext, Dependency
from clearance._context.isolated import IsolatedContext
from clearance._state.events import Event, EventBus

__all__ = [
    "AdrSummary",
    "AgentSession",
    "AggregateResult",
    "AggregatedFinding",
    "Aggregator",
    "ArchitecturalContext",
    "ChildOutcome",
    "ContextIsolationManager",
    "DataOffloader",
    "DelegationChain",
    "DelegationStep",
    "Dependency",
    "DispatchResult",
    "Event",
    "EventBus",
    "IsolatedContext",
    "OffloadedOutput",
    "SpawnRequest",
    "SpawnResult",
    "SpawnWorker",
    "Step",
    "StepCompactor",
    "Workspace",
]
