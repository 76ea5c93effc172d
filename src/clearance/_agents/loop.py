"""The tool-using agent loop, and delegation between agents.

One loop serves one task (or one delegated run): build the prompt through the
`ContextBuilder`, call the model with the agent's tools, run the tools it asks for, then build
the next prompt with their results as fenced items (``tool:<call id>``,
``store:<namespace>/<key>``), until the model answers with text; ``clearance verify`` accounts
for each prompt. ``AgentLimits.max_steps`` bounds the model calls (`LimitExceeded`). Tools
are opt-in per agent: store tools bound to its scoped `StoreView`, user tools, and
``delegate`` for ``can_delegate_to``. A refused delegation (unknown target, a loop, the chain
at its maximum depth) is a tool error returned to the caller. A delegate starts from a fresh
context (the delegated task text only) with the extended `DelegationChain`, and acts with at
most its delegator's store grants and tools (`Authority`: a store refusal for that reason is
a ``grant_withheld`` event, a withheld tool is not offered), in its own workspace, under the
same approval gate and with its own limits, sampling and compaction policy
(`CompactingPrompts`). With tracing, each tool call is an ``execute_tool`` span
(`telemetry_spans.tool_span`), a delegate an ``invoke_agent`` span under its call's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from clearance._agents.caller import CallBudget, ModelCaller
from clearance._agents.compaction import CompactingPrompts
from clearance._agents.delegation import DelegationChain
from clearance._agents.store_tools import store_tools
from clearance._agents.telemetry import agent_span, tracing_configured
from clearance._agents.telemetry_spans import tool_span, traced_spawns
from clearance._agents.tools import (
    BUILTIN_TOOL_NAMES,
    DELEGATE_TOOL,
    SPAWN_TOOL,
    Tool,
    ToolOutput,
    record_started,
    spawn_tool,
    tool_name,
)
from clearance._agents.workspace import Workspace
from clearance._agents.workspace_tools import (
    READ_OUTPUT_TOOL,
    WORKSPACE_TOOLS,
    WRITE_OUTPUT_TOOL,
    WorkspaceSlot,
    offloaded,
    read_output,
    workspace_tool_spec,
    write_output,
)
from clearance._context.answers import kept_answer
from clearance._context.authority import Authority, missing_tool, withheld_tools
from clearance._context.builder import ContextBuilder
from clearance._context.tool_sections import ToolStep
from clearance._core.errors import (
    ConfigError,
    DelegationError,
    DelegationLoopError,
    LimitExceeded,
    MaxDepthError,
    ModelError,
)
from clearance._core.ids import new_id
from clearance._core.prompt import Prompt
from clearance._core.reasons import bounded_reason
from clearance._core.spec import DEFAULT_TOOL_STEPS, Agent, Team
from clearance._core.vocabulary import EventKind
from clearance._state.grants import StoreGrants, StoreView
from clearance._state.ledger import Recorder
from clearance._state.ledger.recorder import record_breach
from clearance._state.store import ContextStore, read_record
from clearance.models._base import ChatModel

__all__ = ["WRITE_OUTPUT_TOOL", "AgentLoop"]


PromptFactory = Callable[[tuple[dict[str, Any], ...], list[ToolStep]], Prompt]
"""Builds one step's prompt from the agent's tool specs and its finished tool steps."""

ApproveCalls = Callable[[str, list[tuple[str, dict[str, Any]]]], Awaitable[list[str | None]]]
"""Decides the tool calls of one model turn before any runs: ``(agent name, [(tool name,
arguments)])`` to, per call, ``None`` (run it) or the denial text the model gets instead; may
raise `ApprovalPending` to stop the task until a person decides."""

SpawnCalls = Callable[
    [Agent, str, Authority, DelegationChain, CallBudget | None,
     list[tuple[str, dict[str, Any]]]],
    Awaitable[dict[str, ToolOutput]],
]  # fmt: skip
"""Runs the ``spawn`` calls of one model turn together: ``(spawning agent, its subject, its
effective authority, its delegation chain, its call budget, [(call id, arguments)])`` to
each call id's tool output. The spawning agent is the one whose turn it is (a delegate's
own, not its delegator's): its ``can_spawn`` decides, its authority is its children's
ceiling, its chain's agents are above theirs, and its call budget (a delegate's, within its
delegator's) is the one its children's calls are within. The children's results reach the
next prompt as ``child_result:`` items, not as tool results."""


class AgentLoop:
    """Runs tool-using agents for one run of the orchestrator.

    Args:
        run_id: The run.
        team: The team (delegation targets are its agents).
        ledger: Where tool calls are recorded.
        store: The context store, or ``None`` when the run has none.
        user_tools: Tools registered with the orchestrator, by name.
        model_for: The model of an agent.
        caller: Makes (and records) every model call.
        call_budget: The task's model-call budget (a delegate's calls count toward it too).
        budget: An agent's prompt token budget for a model (``None``: no limit).
        workspace: The agent's own folder (a child's session), for ``write_output`` and
            offloading; ``None`` to make one with ``make_workspace`` on first use.
        make_workspace: Makes a fresh workspace for an agent of the loop on first use:
            ``(subject, agent)`` to the workspace; ``None`` when agents have none here.
        ceiling: The authority of whoever the loop's agent acts for (a child's parent), or
            ``None``: its store grants and tools are at most these (`Authority.of`); a
            delegate acts under its delegator's effective authority in turn.
        spawn: Runs the ``spawn`` calls of a turn; ``None`` when spawning is not possible
            here (a spawned child never spawns).
        approve: Decides the tool calls that need a person's approval, per turn, before
            any of them runs; ``None`` when nothing needs approval.
    """

    def __init__(
        self,
        *,
        run_id: str,
        team: Team,
        ledger: Recorder,
        store: ContextStore | None,
        user_tools: Mapping[str, Tool],
        model_for: Callable[[Agent], ChatModel],
        caller: ModelCaller,
        call_budget: CallBudget | None,
        budget: Callable[[Agent, ChatModel], int | None],
        workspace: Workspace | None = None,
        make_workspace: Callable[[str, Agent], Workspace] | None = None,
        ceiling: Authority | None = None,
        spawn: SpawnCalls | None = None,
        approve: ApproveCalls | None = None,
    ):
        self.run_id = run_id
        self.team = team
        self.ledger = ledger
        self.store = store
        self.user_tools = dict(user_tools)
        self.model_for = model_for
        self.caller = caller
        self.call_budget = call_budget
        self.budget = budget
        self.workspace = workspace
        self.make_workspace = make_workspace
        self.ceiling = ceiling
        self.spawn = spawn
        self.approve = approve

    def tools_for(
        self, agent: Agent, chain: DelegationChain, ceiling: Authority | None = None
    ) -> dict[str, Tool]:
        """The agent's tools, by name: only what it opted in to, and its caller may call.

        Its store tools are bound to a view of at most ``ceiling``'s grants (the authority of
        the agent it acts for; ``None`` for its own).
        """
        return self._tools(agent, chain, ceiling)[0]

    def _tools(
        self, agent: Agent, chain: DelegationChain, ceiling: Authority | None
    ) -> tuple[dict[str, Tool], StoreView | None]:
        tools: dict[str, Tool] = {}
        bound: dict[str, Tool] | None = None
        view: StoreView | None = None
        authority = Authority.of(agent, ceiling)
        for entry in agent.tools:
            name = tool_name(entry)
            if authority.withholds(name):
                continue
            if not isinstance(entry, str):
                tools[name] = Tool.from_function(entry)
            elif name in WORKSPACE_TOOLS:
                tools[name] = workspace_tool_spec(name)
            elif name in BUILTIN_TOOL_NAMES:
                if bound is None:
                    if self.store is None:
                        raise ConfigError(f"tool {name!r} needs a context store", field="store")
                    view = StoreView(
                        self.store, agent=agent.name,
                        grants=StoreGrants.parse(agent.store_grants),
                        read_extends_ttl_s=authority.read_extends_ttl_s,
                        ceiling=ceiling.grants if ceiling else None,
                    )  # fmt: skip
                    bound = store_tools(view)
                tools[name] = bound[name]
            else:
                tools[name] = self.user_tools[name]
        if agent.can_delegate_to:
            tools[DELEGATE_TOOL] = self._delegate_tool(agent, chain)
        if agent.can_spawn and self.spawn is not None:
            tools[SPAWN_TOOL] = spawn_tool(agent)
        return tools, view

    async def run(
        self,
        *,
        agent: Agent,
        subject: str,
        chain: DelegationChain,
        build: PromptFactory,
        ceiling: Authority | None = None,
        slot: WorkspaceSlot | None = None,
        call_budget: CallBudget | None = None,
    ) -> str:
        """Run the loop until the model answers with text.

        Args:
            agent: The agent.
            subject: The prompts' subject (``task:<id>`` or ``delegation:<tool call id>``).
            chain: The delegation chain this run is part of.
            build: Builds each step's prompt (through the `ContextBuilder`).
            ceiling: The authority of the agent this one acts for; ``None`` for the loop's
                own ``ceiling``.
            slot: The agent's workspace; ``None`` for the loop's (``workspace``, else one
                made with ``make_workspace`` on first use).
            call_budget: This run's call budget (a delegate's, within its delegator's);
                ``None`` for the loop's.

        Returns:
            The final answer: verbatim, or marked if cut off (`kept_answer`: recorded).

        Raises:
            LimitExceeded: ``agent.limits.max_steps`` model calls were made without a final
                answer (``limit`` is ``"max_steps"``).
            ModelError: The model failed, or answered with neither text nor a tool call.

        A call identical (name and arguments) to an earlier one of the loop is not run
        again: the model gets an error pointing at the earlier result. With
        ``agent.limits.answer_at_max_steps`` the last call offers no tools (the prompt lists
        none and closes with the plain task trailer), so the model must answer.
        """
        model = self.model_for(agent)
        calls = self.call_budget if call_budget is None else call_budget
        ceiling = self.ceiling if ceiling is None else ceiling
        tools, view = self._tools(agent, chain, ceiling)
        withheld = withheld_tools(self.ledger, self.run_id, subject, agent, ceiling)
        if slot is None:
            slot = self._slot(subject, agent, self.workspace)
        specs = tuple(t.to_openai() for t in tools.values())
        build = CompactingPrompts(
            build,
            keep_recent=agent.limits.compact_tool_steps,
            ledger=self.ledger,
            run_id=self.run_id,
            subject=subject,
        )
        steps: list[ToolStep] = []
        limit = agent.limits.max_steps or DEFAULT_TOOL_STEPS
        traced = tracing_configured()  # once per run of the loop: each tool call's span
        for step_no in range(1, limit + 1):
            offered = () if step_no == limit and agent.limits.answer_at_max_steps else specs
            prompt = build(offered, steps)
            response = await self.caller.call(
                subject=subject, agent=agent, model=model, prompt=prompt, tools=offered,
                budget=calls,
            )  # fmt: skip
            if not response.tool_calls:  # the one place a final answer leaves the loop
                if not response.text.strip():
                    raise ModelError(
                        "the model returned an empty completion", model_id=model.model_id
                    )
                # Kept verbatim, or marked (and recorded) when cut off: never passed on as
                # whole to a dependent, a delegator, a parent or the synthesis.
                return kept_answer(self.ledger, self.run_id, subject, response.text,
                                   finish_reason=response.finish_reason)  # fmt: skip
            replay = self.caller.replay  # durable resume: recorded ids, results, reruns
            ids = (replay.tool_ids(subject, step_no, response.tool_calls) if replay
                   else [new_id("tool") for _ in response.tool_calls])  # fmt: skip
            denials: list[str | None] = [None] * len(ids)
            if self.approve is not None:  # before any call of the turn runs
                known = [i for i, c in enumerate(response.tool_calls) if c.name in tools]
                turn = [(response.tool_calls[i].name, response.tool_calls[i].arguments)
                        for i in known]  # fmt: skip
                for i, denial in zip(known, await self.approve(agent.name, turn), strict=True):
                    denials[i] = denial
            spawned: dict[str, ToolOutput] = {}
            batch = [
                (call_id, call.arguments)
                for call_id, call, denial in zip(ids, response.tool_calls, denials, strict=True)
                if call.name == SPAWN_TOOL and SPAWN_TOOL in tools and denial is None
            ]
            if batch and self.spawn is not None:
                own = Authority.of(agent, ceiling)
                spawning = self.spawn(agent, subject, own, chain, calls, batch)
                spawned = await traced_spawns(spawning, batch)
            for call_id, call, denial in zip(ids, response.tool_calls, denials, strict=True):
                with tool_span(traced and call_id not in spawned, call, call_id, tools) as outcome:
                    if replay and (kept := replay.recorded_output(subject, call_id)) is not None:
                        steps.append(ToolStep(call_id=call_id, name=call.name,
                                              arguments=call.arguments, content=kept))  # fmt: skip
                        continue
                    tool = tools.get(call.name)
                    chain_record: dict[str, Any] | None = None
                    repeated = any(
                        prev.name == call.name and prev.arguments == call.arguments
                        for prev in steps
                    )
                    breach: LimitExceeded | None = None
                    source: dict[str, Any] | None = None
                    if denial is not None:  # a person denied it: not run
                        output = ToolOutput(content=denial, is_error=True)
                    elif call_id in spawned:
                        output = spawned[call_id]
                    elif tool is None:  # before a repeat: a withheld call is refused as such
                        output = ToolOutput(
                            content=missing_tool(call.name, tools, withheld), is_error=True
                        )
                    elif repeated and call.name != DELEGATE_TOOL:
                        output = ToolOutput(
                            content=f"error: you already called {call.name} with these arguments; "
                            "its result is above. Use it: answer, or call a different tool.",
                            is_error=True,
                        )
                    elif call.name == DELEGATE_TOOL:  # on record: a resume re-runs it, replaying
                        await record_started(self.ledger, self.run_id, subject, step=step_no,
                                             call_id=call_id, call=call, tool=tool)  # fmt: skip
                        own = Authority.of(agent, ceiling)
                        output, chain_record = await self._delegate(
                            agent, chain, call_id, call.arguments, own, calls
                        )
                    elif call.name == WRITE_OUTPUT_TOOL:
                        output, breach = write_output(slot, call.arguments)
                    elif call.name == READ_OUTPUT_TOOL:  # a page, never offloaded again
                        output = read_output(slot, call.arguments)
                    elif replay and (no := await replay.may_rerun(call_id, agent.name, call.name,
                                                                  call.arguments)):  # fmt: skip
                        output = ToolOutput(content=no, is_error=True)
                    else:
                        await record_started(self.ledger, self.run_id, subject, step=step_no,
                                             call_id=call_id, call=call, tool=tool)  # fmt: skip
                        output = await self.caller.hooks.run_tool(tool, call, run_id=self.run_id,
                            call_id=call_id, subject=subject, agent=agent.name)  # fmt: skip
                        source = output.source
                        output, breach = offloaded(slot, output, ledger=self.ledger,
                                                   run_id=self.run_id, subject=subject,
                                                   call_id=call_id, name=call.name,
                                                   readable=READ_OUTPUT_TOOL in tools)  # fmt: skip
                    if view is not None and view.lent_refusals:
                        self._withheld(view, subject, call_id, chain)
                    self.ledger.record_tool_call(
                        run_id=self.run_id,
                        tool_call_id=call_id,
                        subject=subject,
                        agent=agent.name,
                        step=step_no,
                        name=call.name,
                        arguments=call.arguments,
                        result=output.content,
                        is_error=output.is_error,
                        store_reads=[read_record(e) for e in output.store_reads],
                        chain=chain_record,
                    )
                    if source is not None:
                        self.ledger.record_event(
                            self.run_id,
                            EventKind.MCP_CALL,
                            subject,
                            {"tool_call_id": call_id, **source},
                        )
                    outcome(output)
                    if breach is not None:
                        raise breach
                    steps.append(
                        ToolStep(
                            call_id=call_id,
                            name=call.name,
                            arguments=call.arguments,
                            content=output.content,
                            store_reads=output.store_reads,
                            is_error=output.is_error,
                        )
                    )
        raise LimitExceeded("max_steps", value=limit + 1, maximum=limit, subject=subject)

    # -- delegation -------------------------------------------------------------------------

    def _delegate_tool(self, agent: Agent, chain: DelegationChain) -> Tool:
        targets = ", ".join(agent.can_delegate_to)

        def delegate(agent: str, task: str) -> str:  # pragma: no cover - run by _delegate
            raise AssertionError

        spec = Tool.from_function(delegate, name=DELEGATE_TOOL)
        return Tool(
            name=DELEGATE_TOOL,
            description=(
                f"Hand a self-contained task to another agent ({targets}) and get its answer. "
                "The agent sees only the task text you give it."
            ),
            parameters=spec.parameters,
            run=spec.run,
            idempotent=True,  # its own steps are replayed, its tools run at most once
        )

    def refusal(self, agent: Agent, chain: DelegationChain, target: str) -> DelegationError | None:
        """Why ``agent`` may not delegate to ``target`` along ``chain``, or ``None``."""
        names = {a.name for a in self.team.agents}
        if target not in names:
            return DelegationError(agent.name, target, f"there is no agent {target!r}")
        if target not in agent.can_delegate_to:
            allowed = ", ".join(agent.can_delegate_to) or "nobody"
            return DelegationError(
                agent.name, target, f"{target!r} is not in its can_delegate_to ({allowed})"
            )
        if chain.would_loop(target):
            return DelegationLoopError(agent.name, target, (*chain.above, *chain.agents))
        if chain.is_max_depth():
            return MaxDepthError(agent.name, target, chain.max_depth)
        return None

    async def _delegate(
        self,
        agent: Agent,
        chain: DelegationChain,
        call_id: str,
        arguments: dict[str, Any],
        authority: Authority,
        within: CallBudget | None,
    ) -> tuple[ToolOutput, dict[str, Any] | None]:
        target, task = arguments.get("agent"), arguments.get("task")
        if not isinstance(target, str) or not isinstance(task, str) or not task.strip():
            needs = "error: delegate needs 'agent' (a name) and 'task' (text)"
            return ToolOutput(content=needs, is_error=True), None
        refused = self.refusal(agent, chain, target)
        if refused is not None:
            return ToolOutput(content=f"error: delegation refused: {refused}", is_error=True), None
        extended = chain.add_step(agent.name, target, task)
        delegate = self.team.agent(target)
        model = self.model_for(delegate)
        builder = ContextBuilder(count_tokens=model.count_tokens)
        budget = self.budget(delegate, model)

        def build(specs: tuple[dict[str, Any], ...], steps: list[ToolStep]) -> Prompt:
            return builder.build_delegation_prompt(
                call_id,
                task,
                agent=delegate,
                tools=specs,
                tool_steps=steps,
                max_prompt_tokens=budget,
            )

        subject = f"delegation:{call_id}"
        # Its own max_model_calls, within its delegator's budget (the task's, in the end).
        calls = CallBudget(delegate.limits.max_model_calls, subject=subject, within=within)
        try:
            with agent_span(run_id=self.run_id, agent=target, subject=subject):
                if delegate.uses_tools:
                    answer = await self.run(
                        agent=delegate, subject=subject, chain=extended, build=build,
                        ceiling=authority, slot=self._slot(subject, delegate, None),
                        call_budget=calls,
                    )  # fmt: skip
                else:
                    response = await self.caller.call(
                        subject=subject, agent=delegate, model=model, prompt=build((), []),
                        budget=calls)  # fmt: skip
                    # A cut-off answer is marked (and recorded), never passed on as whole.
                    answer = kept_answer(self.ledger, self.run_id, subject, response.text,
                                         finish_reason=response.finish_reason)  # fmt: skip
                    if not answer.strip():
                        raise ModelError(
                            "the model returned an empty completion", model_id=model.model_id
                        )
        except (LimitExceeded, ModelError) as exc:
            if isinstance(exc, LimitExceeded):  # on record, as a task's or child's breach is
                record_breach(self.ledger, self.run_id, subject, exc)
            failed = bounded_reason(f"error: {target!r} failed: {exc}")
            return ToolOutput(content=failed, is_error=True), extended.to_dict()
        return ToolOutput(content=answer), extended.to_dict()

    # -- capabilities -------------------------------------------------------------------

    def _slot(self, subject: str, agent: Agent, workspace: Workspace | None) -> WorkspaceSlot:
        """The workspace of ``agent`` running for ``subject``: given, or made on first use."""
        make = self.make_workspace
        if workspace is not None or make is None:
            return WorkspaceSlot(workspace)
        return WorkspaceSlot(make=lambda: make(subject, agent))

    def _withheld(
        self, view: StoreView, subject: str, call_id: str, chain: DelegationChain
    ) -> None:
        """Record each store operation refused because its caller lacks the grant."""
        for namespace, operation in view.lent_refusals:
            self.ledger.record_event(self.run_id, EventKind.GRANT_WITHHELD, subject, {
                "tool_call_id": call_id, "agent": view.agent, "namespace": namespace,
                "operation": operation, "chain": list(chain.agents),
            })  # fmt: skip
        view.lent_refusals.clear()
