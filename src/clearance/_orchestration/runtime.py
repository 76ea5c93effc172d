"""`AgentRuntime`: the one place a run's tool-using agents get their capabilities from.

Every call path that runs an agent's tool loop — a task's assignee, a spawned child, a
delegate (inside the loop), an isolated task's children — gets its `AgentLoop` here, so each
declared capability applies the same way wherever the agent was called from:

- **tools**: the agent's user, store and MCP tools, ``delegate`` (``can_delegate_to``) and
  ``spawn`` (``can_spawn``, where children can run); a child or delegate is given only the
  ``tools:`` entries its caller may call too, workspace tools aside (`Authority`; the
  others are a ``tools_withheld`` event), and ``clearance verify`` flags a call outside;
- **store grants**: a view of the store of at most the caller's grants (`Authority`):
  a child acts with at most its parent's, a delegate with at most its delegator's. An
  operation refused only for that reason is recorded (``grant_withheld``), and
  ``clearance verify`` flags any store read outside the intersection;
- **workspace**: a fresh folder per agent run (``write_output``, offloading of long tool
  outputs with a preview in the prompt), made on first use under the run's folder;
- **approval gate**: tools that need a person's approval pause (or ask) on every path —
  a child's and a delegate's calls are requests of the task they serve;
- **limits and sampling**: applied by the `ModelCaller` from the agent's spec on every call.

The paths that call a model without a tool loop (an isolated task's dispatches, a
clarification, the coordinator's plan and synthesis, chat) take limits and sampling from the
same `ModelCaller`; what cannot apply there is refused when the team file is loaded
(`clearance._core.teamfile_checks.check_paths`). The capability-by-path table is in
``docs/architecture.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TypeVar

from clearance._agents.caller import CallBudget, ModelCaller
from clearance._agents.loop import AgentLoop, SpawnCalls
from clearance._agents.tools import Tool
from clearance._agents.workspace import Workspace
from clearance._context.authority import Authority
from clearance._core.errors import ConfigError
from clearance._core.spec import Agent, Team
from clearance._orchestration.approval import ApprovalGate
from clearance._orchestration.run_dir import new_run_dir
from clearance._state.ledger import Recorder
from clearance._state.store import ContextStore
from clearance.models._base import ChatModel

__all__ = ["AgentRuntime"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_Made = TypeVar("_Made")


class AgentRuntime:
    """Makes the tool loops of one run's agents, with every capability applied.

    Args:
        run_id: The run.
        team: The team.
        ledger: Where tool calls and events are recorded.
        caller: The run's `ModelCaller`.
        store: The run's context store, or ``None``.
        user_tools: Tools registered with the orchestrator, by name.
        model_for: An agent's model.
        prompt_budget: An agent's prompt token budget for a model.
        gate: The run's approval gate, or ``None`` when nothing needs approval.
        workspace_root: Under which the run's folder (every workspace of the run) is made,
            on first use.
    """

    def __init__(
        self,
        *,
        run_id: str,
        team: Team,
        ledger: Recorder,
        caller: ModelCaller,
        store: ContextStore | None,
        user_tools: Mapping[str, Tool],
        model_for: Callable[[Agent], ChatModel],
        prompt_budget: Callable[[Agent, ChatModel], int | None],
        gate: ApprovalGate | None,
        workspace_root: Path,
    ) -> None:
        self.run_id = run_id
        self.team = team
        self.ledger = ledger
        self.caller = caller
        self.store = store
        self.user_tools = dict(user_tools)
        self.model_for = model_for
        self.prompt_budget = prompt_budget
        self.gate = gate
        self.workspace_root = workspace_root
        self._run_dir: Path | None = None

    @property
    def run_dir(self) -> Path:
        """The run's own folder for its workspaces (made on first use, exclusively).

        Raises:
            ConfigError: No folder could be made.
        """
        if self._run_dir is None:
            self._run_dir = new_run_dir(self.workspace_root, self.run_id)
        return self._run_dir

    def workspace(self, subject: str, agent: Agent) -> Workspace:
        """A fresh workspace for ``agent`` running for ``subject``, with its output limits.

        Named after the subject (``task_<id>``, ``delegation_<call id>``), with ``.2``,
        ``.3``... for a later attempt; never a folder used before.

        Raises:
            ConfigError: No fresh folder could be made.
        """

        def make(name: str) -> Workspace:
            return Workspace(
                self.run_dir / name, limits=agent.limits, subject=f"agent:{agent.name}"
            )

        return self.fresh(_UNSAFE.sub("_", subject)[:100], make, what=subject)

    def fresh(self, base: str, make: Callable[[str], _Made], *, what: str) -> _Made:
        """``make(name)`` for the first name of ``base``, ``base.2``, ``base.3``... free in the run.

        Every folder of the run's workspaces is named here (tasks', delegates' and children's),
        so two of them never ask for one name: a child ``b.2`` of task ``b`` and the second
        attempt of a task whose workspace is ``b`` get folders of their own.

        Args:
            base: The first name tried (letters, digits, ``_.-``).
            make: Makes the folder exclusively; raises `ConfigError` when it exists.
            what: Named in the error.

        Raises:
            ConfigError: No fresh folder could be made.
        """
        for n in range(1, 1000):
            name = base if n == 1 else f"{base}.{n}"
            if (self.run_dir / name).exists():
                continue
            try:
                return make(name)
            except ConfigError:
                continue  # made meanwhile by another attempt
        raise ConfigError(f"cannot make a workspace for {what}", field="workspace_root")

    def loop(
        self,
        *,
        task_id: str,
        budget: CallBudget,
        workspace: Workspace | None = None,
        ceiling: Authority | None = None,
        spawn: SpawnCalls | None = None,
    ) -> AgentLoop:
        """The tool loop of an agent serving ``task_id`` (its own, or its caller's task).

        Args:
            task_id: The task the loop's calls serve (approval requests name it).
            budget: The task's model-call budget.
            workspace: The agent's workspace when it has one already (a child's session);
                ``None`` makes one on first use.
            ceiling: The authority of the agent it acts for (a child's parent), or
                ``None`` for a task's own assignee.
            spawn: Runs ``spawn`` calls; ``None`` where children cannot be spawned.
        """
        gate = self.gate
        return AgentLoop(
            run_id=self.run_id, team=self.team, ledger=self.ledger, store=self.store,
            user_tools=self.user_tools, model_for=self.model_for, caller=self.caller,
            call_budget=budget, budget=self.prompt_budget, workspace=workspace,
            make_workspace=self.workspace, ceiling=ceiling, spawn=spawn,
            approve=partial(gate.check_tools, task_id) if gate is not None else None,
        )  # fmt: skip
