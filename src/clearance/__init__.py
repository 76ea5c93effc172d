"""Clearance: teams of LLM agents on a task graph, with need-to-know context.

Agents are pure functions of their task and the results of the tasks they depend on. The
orchestrator decides what each agent sees, through one choke point, the `ContextBuilder`;
every prompt carries a `ContextManifest` of where each part came from, and every run is
recorded in a `RunLedger`.

This package holds what a user needs to declare and run a team: the run's definition
(`RunSpec`, read from a team file with `load_team_file` or `RunSpec.from_file`, run with
`run_spec` as ``clearance run`` does, resumed with `resume_run`, checked with `verify_run`),
the specs (`Team`, `Agent`, `Task`), the `Orchestrator` and its results, the prompt types,
the ledger and store, and the errors. The rest lives in namespaces:

- `clearance.subagents`: fresh-context dispatch, workspaces, spawning, aggregation.
- `clearance.memory`: conversation and long-term memory, memory groups, window monitoring.
- `clearance.models`: the `ChatModel` protocol and providers (`get_model`).
- `clearance.tokens`: token counting.
- `clearance.testing`: test doubles (`ScriptedModel`, `FunctionModel`, `FakeModel` ...).
- `clearance.analysis`: the built-in steps of a team file.
"""

import typing

from clearance._core import lazy as _lazy

if typing.TYPE_CHECKING:
    from clearance._agents.retry import RetryPolicy
    from clearance._agents.tools import Tool, ToolOutput, mark_tool
    from clearance._context.builder import ContextBuilder
    from clearance._context.clearance import Clearance
    from clearance._context.verify import Finding, VerificationReport, verify_run
    from clearance._core.budget import ModelPrice, RunBudget
    from clearance._core.errors import (
        AccessDenied,
        ApprovalDenied,
        ApprovalPending,
        BudgetExceeded,
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
        MalformedRecord,
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
    from clearance._core.hooks import ModelCallInfo, RunHooks, RunInfo, TaskInfo, ToolCallInfo
    from clearance._core.prompt import ChatMessage, ContextItem, ContextManifest, Prompt
    from clearance._core.routing import EdgeCondition
    from clearance._core.run_spec import RunSpec
    from clearance._core.spec import (
        Agent,
        AgentLimits,
        FanOut,
        FileCaps,
        MemoryScope,
        Task,
        TaskMode,
        Team,
    )
    from clearance._core.teamfile import LoadedTeam, load_team_file, prepare_run
    from clearance._core.vocabulary import (
        ApprovalKind,
        OriginKind,
        PromptKind,
        RunEventKind,
    )
    from clearance._orchestration.approval import ApprovalDecision, ApprovalRequest
    from clearance._orchestration.chat import AgentChat
    from clearance._orchestration.executor import ModelExecutor
    from clearance._orchestration.orchestrator import Orchestrator
    from clearance._orchestration.ray_executor import RayExecutor
    from clearance._orchestration.result import RunEvent, RunResult, TaskOutcome
    from clearance._orchestration.run import RunOptions, RunServices
    from clearance._orchestration.spec_run import (
        recorded_run_spec,
        resume_run,
        run_spec,
        run_spec_sync,
    )
    from clearance._orchestration.stream import RunStream
    from clearance._state.grants import StoreView
    from clearance._state.graph import TaskGraph
    from clearance._state.ledger import RunLedger
    from clearance._state.messages import Message, MessageBus
    from clearance._state.null_ledger import NullLedger
    from clearance._state.queue import TaskStatus
    from clearance._state.store import ContextStore, StoreEntry

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "Agent",
    "AgentChat",
    "AgentLimits",
    "ApprovalDecision",
    "ApprovalDenied",
    "ApprovalKind",
    "ApprovalPending",
    "ApprovalRequest",
    "BudgetExceeded",
    "ChatMessage",
    "Clearance",
    "ClearanceError",
    "ConfigError",
    "ContextBuilder",
    "ContextItem",
    "ContextManifest",
    "ContextStore",
    "ContextViolation",
    "CycleError",
    "DelegationError",
    "DelegationLoopError",
    "DependencyPayloadError",
    "DuplicateTaskError",
    "EdgeCondition",
    "FanOut",
    "FileCaps",
    "Finding",
    "GraphError",
    "LedgerError",
    "LimitExceeded",
    "LoadedTeam",
    "MalformedRecord",
    "MaxDepthError",
    "MemoryScope",
    "Message",
    "MessageBus",
    "ModelCallInfo",
    "ModelError",
    "ModelExecutor",
    "ModelPrice",
    "NullLedger",
    "Orchestrator",
    "OriginKind",
    "OutputValidationError",
    "PathEscapeError",
    "PlanError",
    "Prompt",
    "PromptKind",
    "RayExecutor",
    "RetryPolicy",
    "RunBudget",
    "RunEvent",
    "RunEventKind",
    "RunHooks",
    "RunInfo",
    "RunLedger",
    "RunOptions",
    "RunResult",
    "RunServices",
    "RunSpec",
    "RunStream",
    "SelfDependencyError",
    "StoreEntry",
    "StoreError",
    "StoreView",
    "SubagentError",
    "Task",
    "TaskGraph",
    "TaskInfo",
    "TaskMode",
    "TaskOutcome",
    "TaskStatus",
    "Team",
    "Tool",
    "ToolCallInfo",
    "ToolOutput",
    "UnknownDependencyError",
    "VerificationReport",
    "load_team_file",
    "mark_tool",
    "prepare_run",
    "recorded_run_spec",
    "resume_run",
    "run_spec",
    "run_spec_sync",
    "verify_run",
]

_EXPORTS = {
    "AccessDenied": "clearance._core.errors",
    "Agent": "clearance._core.spec",
    "AgentChat": "clearance._orchestration.chat",
    "AgentLimits": "clearance._core.spec",
    "ApprovalDecision": "clearance._orchestration.approval",
    "ApprovalDenied": "clearance._core.errors",
    "ApprovalKind": "clearance._core.vocabulary",
    "ApprovalPending": "clearance._core.errors",
    "ApprovalRequest": "clearance._orchestration.approval",
    "BudgetExceeded": "clearance._core.errors",
    "ChatMessage": "clearance._core.prompt",
    "Clearance": "clearance._context.clearance",
    "ClearanceError": "clearance._core.errors",
    "ConfigError": "clearance._core.errors",
    "ContextBuilder": "clearance._context.builder",
    "ContextItem": "clearance._core.prompt",
    "ContextManifest": "clearance._core.prompt",
    "ContextStore": "clearance._state.store",
    "ContextViolation": "clearance._core.errors",
    "CycleError": "clearance._core.errors",
    "DelegationError": "clearance._core.errors",
    "DelegationLoopError": "clearance._core.errors",
    "DependencyPayloadError": "clearance._core.errors",
    "DuplicateTaskError": "clearance._core.errors",
    "EdgeCondition": "clearance._core.routing",
    "FanOut": "clearance._core.spec",
    "FileCaps": "clearance._core.spec",
    "Finding": "clearance._context.verify",
    "GraphError": "clearance._core.errors",
    "LedgerError": "clearance._core.errors",
    "MalformedRecord": "clearance._core.errors",
    "LimitExceeded": "clearance._core.errors",
    "LoadedTeam": "clearance._core.teamfile",
    "MaxDepthError": "clearance._core.errors",
    "MemoryScope": "clearance._core.spec",
    "Message": "clearance._state.messages",
    "MessageBus": "clearance._state.messages",
    "ModelCallInfo": "clearance._core.hooks",
    "ModelError": "clearance._core.errors",
    "ModelExecutor": "clearance._orchestration.executor",
    "ModelPrice": "clearance._core.budget",
    "NullLedger": "clearance._state.null_ledger",
    "Orchestrator": "clearance._orchestration.orchestrator",
    "OriginKind": "clearance._core.vocabulary",
    "OutputValidationError": "clearance._core.errors",
    "PathEscapeError": "clearance._core.errors",
    "PlanError": "clearance._core.errors",
    "Prompt": "clearance._core.prompt",
    "PromptKind": "clearance._core.vocabulary",
    "RayExecutor": "clearance._orchestration.ray_executor",
    "RetryPolicy": "clearance._agents.retry",
    "RunBudget": "clearance._core.budget",
    "RunEvent": "clearance._orchestration.result",
    "RunEventKind": "clearance._core.vocabulary",
    "RunHooks": "clearance._core.hooks",
    "RunInfo": "clearance._core.hooks",
    "RunLedger": "clearance._state.ledger",
    "RunOptions": "clearance._orchestration.run",
    "RunResult": "clearance._orchestration.result",
    "RunServices": "clearance._orchestration.run",
    "RunSpec": "clearance._core.run_spec",
    "RunStream": "clearance._orchestration.stream",
    "SelfDependencyError": "clearance._core.errors",
    "StoreEntry": "clearance._state.store",
    "StoreError": "clearance._core.errors",
    "StoreView": "clearance._state.grants",
    "SubagentError": "clearance._core.errors",
    "Task": "clearance._core.spec",
    "TaskGraph": "clearance._state.graph",
    "TaskInfo": "clearance._core.hooks",
    "TaskMode": "clearance._core.spec",
    "TaskOutcome": "clearance._orchestration.result",
    "TaskStatus": "clearance._state.queue",
    "Team": "clearance._core.spec",
    "Tool": "clearance._agents.tools",
    "ToolCallInfo": "clearance._core.hooks",
    "ToolOutput": "clearance._agents.tools",
    "UnknownDependencyError": "clearance._core.errors",
    "VerificationReport": "clearance._context.verify",
    "load_team_file": "clearance._core.teamfile",
    "mark_tool": "clearance._agents.tools",
    "prepare_run": "clearance._core.teamfile",
    "recorded_run_spec": "clearance._orchestration.spec_run",
    "resume_run": "clearance._orchestration.spec_run",
    "run_spec": "clearance._orchestration.spec_run",
    "run_spec_sync": "clearance._orchestration.spec_run",
    "verify_run": "clearance._context.verify",
}
"""Each public name and the module that defines it, imported on first use."""

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)
