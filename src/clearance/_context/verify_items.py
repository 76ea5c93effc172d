"""Verifying each item of a recorded prompt: admitted by its clearance, and what it says it is.

The clearance of each call is recomputed from the ledger (the recorded graph, team config
and events), never from the prompt; every item's origin must be admitted by it
(`Clearance.admits`), and its content must be what its origin names (provenance): the task
text from the graph, a result from the recorded result of that task, a message from the
recorded message, a tool result from the recorded tool call, and so on. The labels that head
a task's text and each result or failed task (its title and assignee, see `layout`) must be
the ones the recorded graph gives. Isolated tasks,
clarifications and children are checked by `verify_subagents`, hierarchical synthesis steps
by `verify_synthesis`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from clearance._context.clearance import Clearance
from clearance._context.layout import (
    fixed_title,
    item_kinds,
    legacy_task_label,
    result_label,
    status_label,
    task_label,
)
from clearance._context.memory_items import message_title, scope_of_title
from clearance._context.prompts_coordinator import plan_feedback_quotes
from clearance._context.render import one_line
from clearance._context.tool_sections import ToolStep, compacted_result, tool_heading
from clearance._context.verify_compression import check_compression
from clearance._context.verify_delegation import check_delegation_chain
from clearance._context.verify_facts import Problem, RunFacts
from clearance._context.verify_hooks import check_hook_item, hooks_shown
from clearance._context.verify_memory import (
    check_conversation_history,
    check_memory_item,
    not_recalled,
)
from clearance._context.verify_review import check_findings_item, check_review_call
from clearance._context.verify_store import check_store_item
from clearance._context.verify_subagents import (
    check_child_call,
    check_child_result,
    check_clarification_call,
    check_isolated_call,
)
from clearance._context.verify_synthesis import check_synthesis_step, is_synthesis_step
from clearance._core.memory_spec import memory_scopes_of
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.vocabulary import OriginKind, PromptKind
from clearance._state.ledger import CallRecord
from clearance._state.memory_records import partition_of

__all__ = ["check_admission", "check_sources"]

_CONVERSATION_KINDS = item_kinds(PromptKind.CONVERSATION)


def check_sources(
    call: CallRecord, items: list[dict[str, Any]], facts: RunFacts
) -> Iterator[Problem]:
    """Provenance of the items the admission checks do not trace to a record.

    Each item's title is the one its origin (or recorded tool call) gives; each origin
    appears once per prompt; a file holds the same content in every prompt of
    its task; a tool's description is the same in every prompt of the run and names one of
    the agent's recorded tools; a repair or plan feedback quotes an earlier answer of the
    same subject; a roster line is the agent's recorded role summary.
    """
    seen: set[str] = set()
    for item in items:
        origin = str(item.get("origin"))
        parsed = Origin.parse(origin)
        kind, ref = parsed.kind, parsed.id
        if kind in Origin.SINGLE:
            if origin in seen:
                yield origin, "the origin appears twice in one prompt"
            seen.add(origin)
        digest, content = item.get("sha256"), item.get("_content")
        yield from _check_title(call, origin, item, facts)
        if kind == OriginKind.FILE:
            others = {
                i.get("sha256")
                for other in facts.calls_of(call.subject)
                if other.call_id != call.call_id
                for i in other.manifest.get("items", [])
                if i.get("origin") == origin
            }
            if others - {digest}:
                yield (
                    origin,
                    "the file's content differs from the same file in the task's other prompts",
                )
        elif kind == OriginKind.TOOL_SPEC:
            agent = facts.agents.get(call.agent)
            if agent is not None:
                names = set(agent.tools) | ({"delegate"} if agent.can_delegate_to else set())
                names |= {"spawn"} if agent.can_spawn else set()
                if ref not in names:
                    yield origin, f"{ref!r} is not a tool of agent {call.agent!r}"
            known = facts.tool_specs.setdefault((call.agent, ref), digest)
            if known != digest:
                yield origin, "the tool's description differs from the agent's other prompts"
        elif kind in (OriginKind.REPAIR, OriginKind.PLAN_FEEDBACK):
            if content is None or not _quotes_earlier_answer(call, kind, content, facts):
                yield origin, "the content does not quote an earlier answer of the same subject"
        elif kind == OriginKind.AGENT:
            agent = facts.agents.get(ref)
            if agent is not None and digest != sha256_text(agent.summary):
                yield origin, "the roster line is not the agent's recorded role"


def _check_title(
    call: CallRecord, origin: str, item: dict[str, Any], facts: RunFacts
) -> Iterator[Problem]:
    """An item's title is the one the builder gives its origin (or its recorded tool call).

    A title is text of the prompt (a heading or a label) that no item's content holds, so it
    must be derived like the content: from the origin alone (`fixed_title`: a file's path,
    ``Goal``...), or for a tool result from its recorded call (`tool_heading`). Labels of
    tasks, results, messages and memory records are checked with their admission.
    """
    parsed = Origin.parse(origin)
    kind, ref = parsed.kind, parsed.id
    expected = fixed_title(kind, ref)
    subject = Subject.parse(call.subject).kind
    if kind == OriginKind.TASK and subject == PromptKind.ISOLATED:
        expected = one_line(f"Task {ref}")  # `IsolatedContext.parts`
    elif kind == OriginKind.TASK and subject == PromptKind.CLARIFICATION:
        if facts.graph is None or ref not in facts.graph:
            return  # the admission check reports it
        task = facts.graph.get(ref)
        labels = (task_label(task.title), legacy_task_label(task.title, task.id))
        if item.get("title") not in labels:
            yield origin, "the task's label is not its recorded title"
        return
    if kind == OriginKind.TOOL:
        record = facts.tool_calls.get(ref)
        if record is None or record.subject != call.subject:
            return  # the admission check reports it
        step = ToolStep(call_id=ref, name=record.name, arguments=record.arguments, content="")
        expected = one_line(tool_heading(step))
    title = item.get("title")
    if expected is not None and (not isinstance(title, str) or one_line(title) != expected):
        reason = f"the block is titled {title!r}, its origin gives {expected!r}"
        yield origin, reason


def _quotes_earlier_answer(call: CallRecord, kind: str, content: str, facts: RunFacts) -> bool:
    for other in facts.calls_of(call.subject):
        if other.call_id == call.call_id:
            return False  # only calls made before this one
        if other.response is None or other.error:
            continue
        if kind == OriginKind.REPAIR:
            prefixes = [other.response.strip() + "\n\nProblem: "]
        else:  # the rejected plan, whole or cut to fit the coordinator's window
            prefixes = plan_feedback_quotes(other.response)
        if any(content.startswith(prefix) for prefix in prefixes):
            return True
    return False


def check_admission(
    call: CallRecord, items: list[dict[str, Any]], facts: RunFacts
) -> Iterator[Problem]:
    """Every item is admitted by the subject's clearance and is what its origin says."""
    yield from _check_memory_partition(call, items, facts)
    yield from check_compression(call, items, facts.conversation)
    subject = call.subject
    parsed = Subject.parse(subject)
    kind = parsed.kind if parsed.ref is not None else None
    if kind == PromptKind.TASK:
        yield from _check_task_call(call, items, facts)
        return

    def provenance(origin: str, item: dict[str, Any]) -> Iterator[Problem]:
        return _check_provenance(origin, item, facts)

    if kind == PromptKind.ISOLATED:
        yield from check_isolated_call(call, items, facts, provenance)
    elif kind == PromptKind.CLARIFICATION:
        yield from check_clarification_call(call, items, facts, provenance)
    elif kind == PromptKind.CHILD:
        agent = facts.agents.get(call.agent)

        def tool_item(origin: str, item: dict[str, Any]) -> Iterator[Problem]:
            assert agent is not None  # checked before any item
            clearance = Clearance.for_child(parsed.id, agent)
            return _check_tool_item(call, clearance, origin, item, facts)

        yield from check_child_call(call, items, facts, tool_item)
    elif kind == PromptKind.DELEGATION:
        yield from _check_delegation_call(call, items, facts)
    elif kind == PromptKind.REVIEW:
        yield from check_review_call(call, items, facts)
    elif kind in (PromptKind.CONVERSATION, PromptKind.SUMMARY):
        yield from _check_conversation_call(call, items, facts)
    elif is_synthesis_step(subject, items):

        def shown_provenance(origin: str, item: dict[str, Any]) -> Iterator[Problem]:
            yield from _outside_synthesis_from(origin, facts)
            yield from provenance(origin, item)

        yield from check_synthesis_step(
            call, items, facts.calls, facts.run.goal, shown_provenance, facts.graph,
            labelled=facts.prompt_format >= 1,
        )  # fmt: skip
    else:
        yield from _check_coordinator_call(call, items, facts)


def _outside_synthesis_from(origin: str, facts: RunFacts) -> Iterator[Problem]:
    """A synthesis item of a task the run's ``synthesis_from`` leaves out (result or failure)."""
    parsed = Origin.parse(origin)
    chosen = facts.synthesis_from
    # A failure's reason is left out since prompt_format 2; older runs showed it.
    kinds = (OriginKind.TASK_RESULT, OriginKind.TASK_STATUS) if facts.prompt_format >= 2 else (
        OriginKind.TASK_RESULT,)  # fmt: skip
    if chosen is None or parsed.kind not in kinds:
        return
    if parsed.id not in chosen:
        yield origin, f"the synthesis shows task {parsed.id!r}, which synthesis_from leaves out"


def _check_coordinator_call(
    call: CallRecord, items: list[dict[str, Any]], facts: RunFacts
) -> Iterator[Problem]:
    """A synthesis or planning prompt holds only the kinds of item it is built from."""
    subject = call.subject
    allowed = item_kinds(
        PromptKind.SYNTHESIS if subject == PromptKind.SYNTHESIS else PromptKind.PLAN
    )
    if subject not in (PromptKind.SYNTHESIS, PromptKind.PLAN):
        yield None, f"unknown call subject {subject!r}"
        return
    agents = set(facts.instructions)
    for item in items[1:]:
        origin = str(item.get("origin"))
        parsed = Origin.parse(origin)
        kind, ref = parsed.kind, parsed.id
        if kind not in allowed:
            yield origin, f"a {subject} prompt may not hold {kind!r} items"
        elif kind == OriginKind.AGENT and agents and ref not in agents:
            yield origin, f"{ref!r} is not an agent of the run"
        elif kind == OriginKind.GOAL and facts.run.goal is not None:
            if item.get("sha256") != sha256_text(facts.run.goal):
                yield origin, "the goal is not the run's goal"
        else:
            if subject == PromptKind.SYNTHESIS:
                yield from _outside_synthesis_from(origin, facts)
            yield from _check_provenance(origin, item, facts)


def _check_memory_partition(
    call: CallRecord, items: list[dict[str, Any]], facts: RunFacts
) -> Iterator[Problem]:
    """A memory item comes from the partition of the model called (fake records: fake model)."""
    if facts.memories is None:
        return
    called = partition_of(call.model_id.partition(":")[0])
    for item in items:
        origin = str(item.get("origin"))
        parsed = Origin.parse(origin)
        if parsed.kind != OriginKind.MEMORY:
            continue
        record = facts.memories(parsed.id)
        if record is not None and partition_of(record.provider) != called:
            yield (
                origin,
                (
                    f"a record of the {partition_of(record.provider)} partition reached "
                    f"{call.model_id}, whose memory is the {called} partition"
                ),
            )


def _check_task_call(
    call: CallRecord, items: list[dict[str, Any]], facts: RunFacts
) -> Iterator[Problem]:
    task_id = Subject.parse(call.subject).id
    if facts.graph is None or task_id not in facts.graph:
        yield None, f"task {task_id!r} is not in the run's recorded graph"
        return
    task = facts.graph.get(task_id)
    if call.agent != task.assignee:
        yield (
            None,
            f"the prompt was built for {call.agent!r}, the task's assignee is {task.assignee!r}",
        )
    clearance = Clearance.for_task(
        facts.graph,
        task_id,
        agent=facts.agents.get(task.assignee),
        memory_groups=facts.memory_groups,
    )
    recorded = call.manifest.get("clearance")
    children = facts.subagents.children_shown(task_id, recorded)
    if children is None:
        yield None, "the recorded clearance names children the task never spawned"
    else:
        clearance = replace(clearance, children=frozenset(children))
    hooks = hooks_shown(facts.hook_events.get(f"task:{task_id}", []), task_id, recorded)
    if hooks is None:
        yield None, "the recorded clearance names hook items never recorded for the task"
    else:
        clearance = replace(clearance, hooks=frozenset(hooks))
    expected = clearance.to_dict()
    if isinstance(recorded, dict) and "memory_scopes" not in recorded:
        # Recorded before clearances carried memory scopes; such prompts hold no memory.
        expected.pop("memory_scopes")
    if recorded != expected:
        yield None, "the recorded clearance differs from the one the graph gives"
    for item in items[1:]:
        origin = str(item.get("origin"))
        parsed = Origin.parse(origin)
        kind, ref = parsed.kind, parsed.id
        message = facts.messages.get(ref) if kind == OriginKind.MESSAGE else None
        scope = scope_of_title(str(item.get("title"))) if kind == OriginKind.MEMORY else None
        if kind == OriginKind.MESSAGE and message is None:
            yield origin, "no such message was recorded in the run"
        elif not clearance.admits(origin, message=message, memory_scope=scope):
            yield origin, f"not in the clearance of task {task_id!r}"
        elif kind == OriginKind.TASK and item.get("sha256") != sha256_text(task.description):
            yield origin, "the task text is not the recorded task's description"
        elif kind == OriginKind.TASK and item.get("title") not in (
            task_label(task.title),
            legacy_task_label(task.title, task.id),
        ):
            yield origin, "the task's label is not its recorded title"
        elif kind == OriginKind.TASK_STATUS and task.after_failure != "proceed":
            yield origin, "only a task that proceeds after failures lists failed prerequisites"
        elif kind in (OriginKind.TOOL, OriginKind.STORE):
            yield from _check_tool_item(call, clearance, origin, item, facts)
        elif kind == OriginKind.CHILD_RESULT:
            yield from check_child_result(task_id, ref, item, facts)
        elif kind == OriginKind.REVIEW:
            yield from check_findings_item(task_id, origin, item, facts)
        elif kind == OriginKind.HOOK:
            yield from check_hook_item(
                facts.hook_events.get(f"task:{task_id}", []), task_id, origin, item
            )
        else:
            if kind == OriginKind.MEMORY:
                yield from not_recalled(call.subject, ref, facts.recalled)
            yield from _check_provenance(origin, item, facts)


def _check_delegation_call(
    call: CallRecord, items: list[dict[str, Any]], facts: RunFacts
) -> Iterator[Problem]:
    """A delegate's prompt: the recorded ``delegate`` call's task text and its own tools."""
    tool_call_id = Subject.parse(call.subject).id
    # One the run stopped inside (started, asked for, not answered yet) counts too.
    record = facts.delegations.get(tool_call_id)
    if record is None or record.name != "delegate":
        yield None, f"no delegate tool call {tool_call_id!r} was recorded in the run"
        return
    if record.arguments.get("agent") != call.agent:
        yield None, f"the delegation was to {record.arguments.get('agent')!r}, not {call.agent!r}"
    yield from check_delegation_chain(
        tool_call_id, facts.delegations, facts.agents, facts.subagents.spawns
    )
    agent = facts.agents.get(call.agent)
    if agent is None:
        yield None, f"agent {call.agent!r} is not in the run's recorded config"
        return
    clearance = Clearance.for_delegation(tool_call_id, agent)
    if call.manifest.get("clearance") != clearance.to_dict():
        yield None, "the recorded clearance differs from the one the team gives"
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind = Origin.parse(origin).kind
        if not clearance.admits(origin):
            yield origin, f"not in the clearance of {call.subject}"
        elif kind == OriginKind.DELEGATION:
            if item.get("sha256") != sha256_text(str(record.arguments.get("task", ""))):
                yield origin, "the task text is not the recorded delegated task"
        elif kind in (OriginKind.TOOL, OriginKind.STORE):
            yield from _check_tool_item(call, clearance, origin, item, facts)


def _check_tool_item(
    call: CallRecord,
    clearance: Clearance,
    origin: str,
    item: dict[str, Any],
    facts: RunFacts,
) -> Iterator[Problem]:
    """A tool result or store entry is what a recorded tool call of this prompt returned.

    A store entry is checked by `check_store_item` (its read, grant, content and heading).
    """
    parsed = Origin.parse(origin)
    kind, ref = parsed.kind, parsed.id
    digest = item.get("sha256")
    if kind == OriginKind.TOOL:
        record = facts.tool_calls.get(ref)
        if record is None or record.subject != call.subject:
            yield origin, f"no tool call {ref!r} was recorded for {call.subject}"
        elif digest != sha256_text(record.result) and (
            (call.subject, ref) not in facts.compacted
            or digest
            != sha256_text(compacted_result(record.name, record.result, is_error=record.is_error))
        ):
            yield origin, "the content is not the recorded result of the tool call"
        return
    mine = facts.tool_calls_of.get(call.subject, [])
    reads = [r for t in mine for r in t.store_reads if f"{r['namespace']}/{r['key']}" == ref]
    yield from check_store_item(call.subject, origin, ref, item, reads, clearance, facts.store)


def _check_conversation_call(
    call: CallRecord, items: list[dict[str, Any]], facts: RunFacts
) -> Iterator[Problem]:
    """A conversation (or summarizing) prompt holds turns and the agent's readable memory."""
    agent = Subject.parse(call.subject).id
    if call.agent != agent:
        yield None, f"the prompt was built for {call.agent!r}, not {agent!r}"
    scopes = memory_scopes_of(agent, facts.memory_groups)
    expected = {"agent": agent, "memory_scopes": sorted(scopes)}
    if call.manifest.get("clearance") != expected:
        yield None, "the recorded clearance differs from the agent's memory scopes"
    yield from check_conversation_history(call, items, facts.conversation)
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind = Origin.parse(origin).kind
        if kind not in _CONVERSATION_KINDS:
            yield origin, f"a conversation prompt may not hold {kind!r} items"
        elif kind == OriginKind.MEMORY:
            scope = scope_of_title(str(item.get("title")))
            if scope not in scopes:
                yield origin, f"memory scope {scope!r} is not readable by {agent!r}"
            else:
                yield from _check_provenance(origin, item, facts)


def _check_label(kind: str, ref: str, item: dict[str, Any], facts: RunFacts) -> Iterator[Problem]:
    """A result's or failed task's label is the recorded task's title and assignee."""
    if facts.graph is None or ref not in facts.graph:
        return
    task = facts.graph.get(ref)
    labels = {result_label(task.title, task.assignee)}
    if kind == OriginKind.TASK_STATUS:
        labels |= {status_label(task.title, task.assignee, s) for s in ("failed", "skipped")}
    if item.get("title") not in labels:
        yield (
            str(Origin(kind, ref)),
            f"the block is labelled {item.get('title')!r}, the recorded graph says "
            f"{result_label(task.title, task.assignee)!r}",
        )


def _check_provenance(origin: str, item: dict[str, Any], facts: RunFacts) -> Iterator[Problem]:
    parsed = Origin.parse(origin)
    kind, ref = parsed.kind, parsed.id
    digest = item.get("sha256")
    if kind in (OriginKind.TASK_RESULT, OriginKind.TASK_STATUS):
        yield from _check_label(kind, ref, item, facts)
    if kind == OriginKind.TASK_RESULT:
        result = facts.results.get(ref)
        if result is None:
            yield origin, f"task {ref!r} has no recorded result"
        elif digest != sha256_text(result):
            yield origin, f"the content is not the recorded result of task {ref!r}"
    elif kind == OriginKind.TASK_STATUS:
        errors = facts.errors.get(ref)
        if not errors:
            yield origin, f"task {ref!r} has no recorded failure or skip"
        elif digest not in {sha256_text(error) for error in errors}:
            yield origin, f"the content is not the recorded reason of task {ref!r}"
    elif kind == OriginKind.MESSAGE:
        message = facts.messages.get(ref)
        if message is not None and digest != sha256_text(message.content):
            yield origin, "the content is not the recorded message"
        elif message is not None and item.get("title") != one_line(message_title(message)):
            yield origin, f"the message was sent by {message.sender!r}, not as its title says"
    elif kind == OriginKind.MEMORY:
        yield from check_memory_item(origin, ref, item, facts)
