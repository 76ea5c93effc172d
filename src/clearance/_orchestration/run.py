"""A run in progress: what its orchestrator fixes for it (`RunSettings`) and its state (`Run`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from clearance._agents.caller import ModelCaller
from clearance._agents.files import FileCaps
from clearance._agents.tools import Tool
from clearance._context.builder import ContextBuilder
from clearance._core.clock import Clock
from clearance._core.spec import Agent, Team
from clearance._core.vocabulary import RunEventKind
from clearance._orchestration.approval import ApprovalGate, Approver
from clearance._orchestration.children import ChildRunner
from clearance._orchestration.run_memory import RunMemory
from clearance._orchestration.runtime import AgentRuntime
from clearance._orchestration.subagents import AskPerson, IsolatedRunner
from clearance._state.ledger import Recorder
from clearance._state.messages import MessageBus
from clearance._state.queue import TaskQueue
from clearance._state.shared_memory import SharedMemory
from clearance._state.store import ContextStore
from clearance.models._base import ChatModel, Usage

__all__ = ["Emit", "Run", "RunSettings", "prompt_budget"]


class Emit(Protocol):
    """Delivers a `RunEvent` to the orchestrator's ``on_event`` callback, if it has one."""

    def __call__(
        self,
        kind: RunEventKind,
        run_id: str,
        *,
        task_id: str | None = None,
        detail: str = "",
        subject: str | None = None,
    ) -> None:
        """Announce one step of run ``run_id`` (of task ``task_id``, if given)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """What an `Orchestrator` fixes for each of its runs (see its arguments)."""

    team: Team
    ledger: Recorder
    messages: MessageBus
    clock: Clock
    model_for: Callable[[Agent], ChatModel]
    emit: Emit
    memory: RunMemory | None
    memory_groups: Mapping[str, frozenset[str]]
    store: ContextStore | None
    tools: Mapping[str, Tool]
    input_root: Path | None
    project_root: Path | None
    file_caps: FileCaps
    clarification_rounds: int
    workspace_root: Path
    ask_person: AskPerson | None
    synthesis_from: tuple[str, ...] | None
    max_concurrency: int
    approval_tools: frozenset[str] = frozenset()
    approver: Approver | None = None


@dataclass(slots=True)
class Run:
    """The state of one session of a run."""

    run_id: str
    goal: str
    queue: TaskQueue
    shared: SharedMemory
    caller: ModelCaller
    memory_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # Usage before this session of the run (the plan's, or a resumed run's earlier calls).
    base_usage: Usage = field(default_factory=Usage)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    # The run's prompt builders, one per model (``id(model)``: the model, its builder); a
    # builder renders each result once for all the prompts it enters (see `ContextBuilder`).
    builders: dict[int, tuple[ChatModel, ContextBuilder]] = field(default_factory=dict)
    # Made when the graph has isolated tasks, or agents that spawn (see `RunExecution`).
    isolated: IsolatedRunner | None = None
    children: ChildRunner | None = None
    gate: ApprovalGate | None = None  # approvals (see `approval.py`)
    runtime: AgentRuntime | None = None  # every agent's capabilities (see `runtime.py`)

    @property
    def usage(self) -> Usage:
        """Tokens of every call of the run so far."""
        return self.base_usage + self.caller.usage

    def builder(self, model: ChatModel) -> ContextBuilder:
        """The run's prompt builder for ``model`` (made on first use)."""
        kept = self.builders.get(id(model))
        if kept is not None:
            return kept[1]
        builder = ContextBuilder(count_tokens=model.count_tokens, memory_groups=self.memory_groups)
        self.builders[id(model)] = (model, builder)  # holding the model keeps its id unique
        return builder


def prompt_budget(agent: Agent, model: ChatModel) -> int | None:
    """An agent's prompt token budget with ``model``; ``None`` for no limit.

    Its ``limits.max_prompt_tokens`` if set, else the model's context window less the
    agent's ``limits.max_output_tokens``, else ``None``.
    """
    if agent.limits.max_prompt_tokens is not None:
        return agent.limits.max_prompt_tokens
    if model.context_window is not None:
        return model.context_window - agent.limits.max_output_tokens
    return None
