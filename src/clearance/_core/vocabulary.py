"""The run's vocabulary: every kind of prompt, origin, recorded event and progress event.

Each kind has one typed definition here, a `StrEnum`, so a member *is* its string: the values
stored in a ledger are the same strings they always were, and ledgers recorded before these
types existed read back unchanged. Code compares kinds with members (``kind ==
OriginKind.FILE``), never with string literals; ``tests/test_vocabulary.py`` parses the sources
and fails on a ``kind == "..."`` anywhere else.

=================  ==========================================================================
enum               what it names
=================  ==========================================================================
`PromptKind`       a kind of prompt (one layout each in ``_context/layout.py``); every kind but
                   ``synthesis_reduce`` is also the kind of a model call's subject
`OriginKind`       where one prompt item came from (``_core/origins.py`` lists them with
                   their references)
`EventKind`        a recorded event of a run (the ledger's ``events`` table); each has a
                   schema in ``_core/event_schema.py``
`RunEventKind`     a progress event delivered to ``on_event`` (`RunEvent`), never recorded
`StepKind`         the built-in steps an `AgentSession` records
`ApprovalKind`     what a human approval is asked for (a tool call, a task, or a rerun)
`ClarificationKind`  what an isolated subagent asked for (a question or a file)
`ExecutorKind`     where a run's model calls are answered (``executor.kind`` of a run spec)
`RecordKind`       a kind of record in the ledger's hash chain
`MemoryKind`       a long-term memory record: a conversation turn or a fact
`NameKind`         a name a module binds at its top level, as its module facts list it
`RankedKind`       an entry of the module facts' ranking of where to look first
=================  ==========================================================================

A new kind is one member here; a new recorded event also gets one model in
``event_schema.py`` (see ``docs/architecture.md``).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ApprovalKind",
    "ClarificationKind",
    "EventKind",
    "ExecutorKind",
    "MemoryKind",
    "NameKind",
    "OriginKind",
    "PromptKind",
    "RankedKind",
    "RecordKind",
    "RunEventKind",
    "StepKind",
]


class PromptKind(StrEnum):
    """A kind of prompt, and (all but ``SYNTHESIS_REDUCE``) the kind of a call's subject."""

    TASK = "task"
    ISOLATED = "isolated"
    DELEGATION = "delegation"
    CHILD = "child"
    CLARIFICATION = "clarification"
    CONVERSATION = "conversation"
    SUMMARY = "summary"
    SYNTHESIS_MAP = "synthesis_map"
    SYNTHESIS = "synthesis"
    SYNTHESIS_REDUCE = "synthesis_reduce"
    """The reduce step of a hierarchical synthesis; its call's subject is ``synthesis``."""
    PLAN = "plan"
    REVIEW = "review"
    """A reviewer's prompt in a review loop; its call's subject is ``review:<task>/<n>/<s>``."""


class OriginKind(StrEnum):
    """Where one prompt item came from (the part of its origin before the first ``:``)."""

    INSTRUCTIONS = "instructions"
    TASK = "task"
    TASK_RESULT = "task_result"
    TASK_STATUS = "task_status"
    FILE = "file"
    MESSAGE = "message"
    MEMORY = "memory"
    TOOL_SPEC = "tool_spec"
    TOOL = "tool"
    STORE = "store"
    REPAIR = "repair"
    DELEGATION = "delegation"
    CHILD_GOAL = "child_goal"
    CHILD_RESULT = "child_result"
    ARCH = "arch"
    CONSTRAINT = "constraint"
    CLARIFICATION = "clarification"
    QUESTION = "question"
    HISTORY = "history"
    GOAL = "goal"
    AGENT = "agent"
    PLAN_FEEDBACK = "plan_feedback"
    SHARED_MEMORY = "shared_memory"
    SUMMARY_OF = "summary_of"
    TURN = "turn"
    SUMMARY = "summary"
    REVIEW = "review"
    CANDIDATE = "candidate"
    HOOK = "hook"


class EventKind(StrEnum):
    """A recorded event of a run (one row of the ledger's ``events`` table)."""

    SPAWN = "spawn"
    CHILD = "child"
    STEP = "step"
    LIMIT_EXCEEDED = "limit_exceeded"
    FILES = "files"
    CLARIFICATION = "clarification"
    ISOLATED_CONTEXT = "isolated_context"
    ARCHITECTURE = "architecture"
    MCP_CALL = "mcp_call"
    OFFLOADED = "offloaded"
    ANSWER_MARKED = "answer_marked"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVAL_DECIDED = "approval_decided"
    WORKER_LOST = "worker_lost"
    GRANT_WITHHELD = "grant_withheld"
    TOOLS_WITHHELD = "tools_withheld"
    COMPACTED = "compacted"
    MODEL_TOOL_CALLS = "model_tool_calls"
    TOOL_STARTED = "tool_started"
    REPLAYED = "replayed"
    REPLAY_DECLINED = "replay_declined"
    PLAN = "plan"
    REVIEW_ROUND = "review_round"
    BUDGET = "budget"
    HOOK_CONTEXT = "hook_context"
    USER_MESSAGE = "user_message"


class RunEventKind(StrEnum):
    """A progress event of a run (`RunEvent.kind`), delivered while it runs."""

    RUN_STARTED = "run_started"
    PLAN_READY = "plan_ready"
    TASK_STARTED = "task_started"
    TASK_COMPLETED = "task_completed"
    TASK_FAILED = "task_failed"
    TASK_SKIPPED = "task_skipped"
    SYNTHESIS_STARTED = "synthesis_started"
    RUN_FINISHED = "run_finished"
    MODEL_CALL = "model_call"
    TEXT = "text"
    TOOL_CALL = "tool_call"
    AWAITING_APPROVAL = "awaiting_approval"
    REVIEW_ROUND = "review_round"
    RUN_REPLAYED = "run_replayed"


class StepKind(StrEnum):
    """A built-in step of an `AgentSession` (a caller may record steps of its own kinds)."""

    GOAL = "goal"
    MODEL = "model"
    TOOL = "tool"
    SPAWN = "spawn"
    LIMIT_EXCEEDED = "limit_exceeded"


class ApprovalKind(StrEnum):
    """What a human approval is asked for."""

    TOOL = "tool"
    TASK = "task"
    RERUN = "rerun"
    """A tool call the stopped run may have run, about to run again on resume."""


class ClarificationKind(StrEnum):
    """What an isolated subagent asked for in one clarification round."""

    QUESTION = "question"
    FILE = "file"


class ExecutorKind(StrEnum):
    """Where a run's model calls are answered (``executor.kind`` of a `RunSpec`)."""

    LOCAL = "local"
    """In this process."""
    RAY = "ray"
    """On Ray worker actors (prompts are still built in this process)."""


class RecordKind(StrEnum):
    """A kind of record in a run's hash chain (one ledger table each)."""

    RUN = "run"
    TASK = "task"
    TASK_REASON = "task_reason"
    MESSAGE = "message"
    CALL = "call"
    TOOL_CALL = "tool_call"
    EVENT = "event"


class MemoryKind(StrEnum):
    """A long-term memory record."""

    MESSAGE = "message"
    FACT = "fact"


class NameKind(StrEnum):
    """A name a module binds at its top level (an entry of its module facts' ``names``)."""

    FUNCTION = "function"
    CLASS = "class"
    CONSTANT = "constant"
    IMPORT = "import"
    RE_EXPORT = "re-export"
    """An imported name the module exports (in ``__all__``, or ``import x as x``)."""
    UNBOUND = "unbound"
    """A name ``__all__`` lists that the module does not bind."""


class RankedKind(StrEnum):
    """An entry of the module facts' ranking of where to look first."""

    FUNCTION = "function"
    FINDING = "finding"
