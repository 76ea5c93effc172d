"""Verifying delegations: each one allowed, loop-free and within depth, from the records.

A delegate's prompt (subject ``delegation:<tool call id>``) exists because a ``delegate`` tool
call was made. Its chain is rebuilt from the recorded ``delegate`` calls alone, following each
call's subject up to the task (or child) the first delegator served, never from the chain the
tool call claims. Then:

- the delegator's ``can_delegate_to`` (as the run's config recorded it) names the delegate;
- each step's delegator is the previous step's delegate (no forged link);
- the delegate is not already in the chain (no loop: not the first delegator, nor any agent
  delegated to on the way), and the chain holds at most `DEFAULT_MAX_DEPTH` steps;
- when the first delegator is a spawned child, the delegate is none of the agents above the
  child (`DelegationChain.above`): its spawner and the chain its spawner acted in, rebuilt
  from the recorded ``spawn`` event and delegate calls (no loop through a spawn);
- the chain recorded with the tool call (what ``inspect`` shows) is the rebuilt one.

And a successful ``delegate`` call's recorded result (what the delegator was shown) is an
answer of a successful call of its delegate (subject ``delegation:<tool call id>``): the
response verbatim, marked when cut off, or stripped as earlier versions kept it; for a
result offloaded to the delegator's workspace, the offloaded text's digest is
(`check_delegate_answers`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clearance._context.answers import mark_answer
from clearance._context.verify_children import Spawns
from clearance._context.verify_facts import Problem
from clearance._core.prompt import sha256_text
from clearance._core.spec import Agent
from clearance._core.vocabulary import EventKind, PromptKind
from clearance._state.ledger import CallRecord, EventRecord, ToolCallRecord

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "check_delegate_answers",
    "check_delegation_chain",
    "delegation_steps",
]

DEFAULT_MAX_DEPTH = 3
"""Most delegation steps in one chain (`DelegationChain`'s default, which every run uses)."""

_DELEGATE = "delegate"


def delegation_steps(
    tool_call_id: str, tool_calls: Mapping[str, ToolCallRecord]
) -> list[ToolCallRecord] | None:
    """The recorded ``delegate`` calls that led to ``tool_call_id``'s delegate, oldest first.

    Returns:
        The calls (the last is ``tool_call_id``'s), or ``None`` when a link is missing, is
        not a ``delegate`` call, or the links go round (forged records).
    """
    steps: list[ToolCallRecord] = []
    seen: set[str] = set()
    ref = tool_call_id
    while ref not in seen and len(seen) <= 4 * DEFAULT_MAX_DEPTH:
        seen.add(ref)
        record = tool_calls.get(ref)
        if record is None or record.name != _DELEGATE:
            return None
        steps.append(record)
        kind, _, parent = record.subject.partition(":")
        if kind != PromptKind.DELEGATION:
            return steps[::-1]
        ref = parent
    return None


def check_delegation_chain(
    tool_call_id: str,
    tool_calls: Mapping[str, ToolCallRecord],
    agents: Mapping[str, Agent],
    spawns: Spawns | None = None,
) -> Iterator[Problem]:
    """Check the delegation a delegate's prompt serves (see the module docstring).

    Args:
        tool_call_id: The ``delegate`` tool call the prompt's subject names.
        tool_calls: The run's tool calls, by id.
        agents: The run's agents as its config recorded them (empty: not recorded, so
            ``can_delegate_to`` is not checked).
        spawns: The run's ``spawn`` events' data, every session's (with the ``task_id``
            they were recorded under), to rebuild what is above a child's chain (as the
            child's session spawned it).
    """
    steps = delegation_steps(tool_call_id, tool_calls)
    if steps is None:
        yield None, "the delegate calls leading to this delegation are not all recorded"
        return
    record = steps[-1]
    delegator, target = record.agent, _target(record)
    agent = agents.get(delegator)
    if agents and (agent is None or target not in agent.can_delegate_to):
        yield (
            None,
            (
                f"{delegator!r} delegated to {target!r}, which its can_delegate_to does not name "
                "(a capability lent)"
            ),
        )
    earlier = [steps[0].agent]
    for previous, step in itertools.pairwise(steps):
        if step.agent != _target(previous):
            yield None, f"delegate call {step.tool_call_id!r} was not made by its delegate"
            return
        earlier.append(step.agent)
    if target in earlier:
        yield None, f"{target!r} is already in the delegation chain {' -> '.join(earlier)}"
    above = _above(steps[0], tool_calls, spawns or Spawns())
    if above and target in above:
        yield (
            None,
            (
                f"{target!r} is above the child that started this chain "
                f"({' -> '.join([*above, *earlier])}): a loop through a spawn"
            ),
        )
    if len(steps) > DEFAULT_MAX_DEPTH:
        yield None, f"the delegation chain has {len(steps)} steps, more than {DEFAULT_MAX_DEPTH}"
    expected = {
        "origin": steps[0].agent,
        "max_depth": DEFAULT_MAX_DEPTH,
        "steps": [
            {"from": s.agent, "to": _target(s), "task": s.arguments.get("task")} for s in steps
        ],
    }
    if record.chain is not None and record.chain != expected:
        yield None, "the recorded delegation chain is not the one the delegate calls give"


def _above(
    first: ToolCallRecord, tool_calls: Mapping[str, ToolCallRecord], spawns: Spawns
) -> list[str]:
    """The agents above a spawned child's chain (``[]`` when ``first`` is not a child's call).

    The child as its session spawned it: the spawn of its id before ``first``'s record.
    """
    kind, _, child_id = first.subject.partition(":")
    at = spawns.position("tool_call", first.tool_call_id)
    spawn = spawns.at(child_id, at) if kind == PromptKind.CHILD else None
    if spawn is None:
        return []
    parent = spawn.get("parent_subject") or f"task:{spawn.get('task_id')}"
    parent_kind, _, ref = str(parent).partition(":")
    if parent_kind == PromptKind.DELEGATION:
        chain = delegation_steps(ref, tool_calls) or []
        return list(dict.fromkeys([*(s.agent for s in chain[:1]), *map(_target, chain)]))
    return [str(spawn.get("parent_agent"))]


def _target(record: ToolCallRecord) -> Any:
    """The agent a ``delegate`` call named (as the model gave it)."""
    return record.arguments.get("agent")


def check_delegate_answers(
    tool_calls: Mapping[str, ToolCallRecord],
    calls: Sequence[CallRecord],
    events: Sequence[EventRecord],
) -> Iterator[tuple[str, str | None, str]]:
    """Every successful ``delegate`` call's result is an answer of its delegate.

    Yields:
        ``(subject, None, reason)`` for each ``delegate`` call (of ``subject``) whose
        recorded result no successful call of its delegate answered.
    """
    answers: dict[str, set[str]] = {}
    for call in calls:
        kind, _, ref = call.subject.partition(":")
        if kind != PromptKind.DELEGATION or call.error is not None or call.pending:
            continue
        response = call.response or ""
        marked = mark_answer(response, finish_reason=call.finish_reason).text
        answers.setdefault(ref, set()).update((response, response.strip(), marked, marked.strip()))
    offloaded = {
        str(e.data.get("tool_call_id")): e.data.get("sha256")
        for e in events
        if e.kind == EventKind.OFFLOADED
    }
    for record in tool_calls.values():
        if record.name != _DELEGATE or record.is_error:
            continue
        given = answers.get(record.tool_call_id, set())
        if record.result in given:
            continue
        if offloaded.get(record.tool_call_id) in {sha256_text(a) for a in given}:
            continue  # too long to show: kept whole in the delegator's workspace
        yield (
            record.subject, None,
            f"the result of delegate call {record.tool_call_id!r} is not an answer of its "
            f"delegate {_target(record)!r}",
        )  # fmt: skip
