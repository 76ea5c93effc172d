"""Verifying a recorded run: every prompt against its task's clearance, from the ledger alone.

`verify_run` re-derives, for every recorded model call:

1. **Integrity.** The call's digest (`call_record_sha256`) matches its recorded messages and
   manifest, and the manifest's prompt hash matches the messages: an edit to any recorded
   field of a prompt or manifest is detected.
2. **Accounting.** The prompt parses back (`parse_user_message`) into exactly the manifest's
   items, in order, with the same content hash, and follows a layout of its kind (the
   `layout` table: sections in order, each item under a section its kind belongs to, with
   its title on a heading line, on its fence line or nowhere, as the layout says;
   `verify_layout`); re-rendering them
   reproduces the recorded text byte for byte, and the closing instruction is the builder's.
   No text reached the model that the manifest does not account for.
3. **Clearance.** Each task's clearance is recomputed from the recorded graph (never from
   model output) and must equal the recorded one; every item's origin must be admitted by
   it, and messages must be addressed to the task's agent. The coordinator's synthesis and
   planning prompts may hold only the kinds of item they are built from; the map steps and
   reduce of a hierarchical synthesis are checked as `verify_synthesis` describes (each
   result in one map step, each summary the recorded answer of its map call).
4. **Provenance.** An item's content is what its origin says it is: the task text from the
   graph, a result from the recorded result of that task, a message from the recorded
   message, the instructions from the recorded agent. The label of a task's text, result or
   failure is the title (and assignee) the recorded graph gives that task.

Memory items (``memory:<id>``) are admitted when the scope their title names is one of the
task's (or conversation's) memory scopes, recomputed from the team's recorded memory groups;
given a lookup into the memory store, their content and scope are checked against the stored
record too.

5. **Events.** Every recorded event matches its kind's schema (`clearance._core.event_schema`);
   one that does not is a finding, and the other checks read only the events that do.
6. **Chain.** Every record of the run (the run, tasks, task reasons, messages, calls with
   their responses, tool calls, events) matches its entry in the run's hash chain, and the
   chain's links hold (`verify_chain`); with the ledger key, the links are MACs a forger
   without the key cannot recompute. A task that never changed state has no row and no
   entry: the run's chained graph covers it. Every recorded task is a task of that graph.
7. **Results.** Every completed task has a successful model call of its own, and its result
   is that call's response in one of the documented forms `verify_results` lists (verbatim,
   as results reach dependents; with cut-off or repetition marks; or, for a task with an
   ``output_schema``, the JSON value it holds re-serialized). The run's synthesis is the
   answer of a successful ``synthesis`` call, in one of the same plain forms. A ``run:``
   step's result is the output its ``step`` event recorded, and that event names the task's
   own function and files and only results its clearance admits, each as recorded.

What it cannot check: file contents are compared with the manifest's hashes and with the
same file in the task's other prompts, not with the files on disk (which may have changed
since), and anything the model provider did with the prompt after receiving it.

8. **Routing.** A task skipped by a condition on a dependency's result is skipped exactly
   as that condition decides on the recorded result (`verify_routing`).

7. **Capabilities.** No delegate or child used a store grant its caller lacks, and every
   offloaded tool output was shown as its preview (`verify_capabilities`); every call that
   needed a person's approval, a child's included, had one (`verify_approvals`).

9. **Plans.** A ``plan`` event's hashes, task count and ``edited`` flag are those of the
   recorded graphs: the run's, and its plan's run's when that run is in the same ledger;
   a planned run's recorded tasks are its last plan call's answer (`verify_plan`).

10. **Children and delegates.** No task had more children in one session than its
    ``max_children`` (the smaller of its spawner's and its assignee's; from
    ``prompt_format`` 5 the fewest of theirs and every agent a spawning delegate acted
    for), each child is numbered as one session numbers them, no task prompt shows more
    children than its assignee may have, and each ``spawn`` call's output is how its child ended
    (`verify_children`); each delegate's answer, as its delegator was shown it, is an answer
    of the delegate's own calls (`verify_delegation`). Each clarification round of an
    isolated task is a question its subagent asked in a recorded call, answered as the
    coordinator's recorded call answered it (`verify_clarifications`).

11. **Review rounds and store headings.** Every ``review_round`` event is the verdict of a
    recorded call of its reviewer (`verify_review`), and a store entry's heading names the
    entry and the writer its read recorded (`verify_store`).
12. **Compaction order.** A tool result shown as its compacted line comes after the
    ``compacted`` event that names it, and a chat summary after the summarizing call that
    wrote it, in the hash chain's order (`verify_compaction`).

The checks live in `verify_layout` (accounting), `verify_items` (clearance and provenance),
`verify_results` (results), `verify_chain` (the chain), `verify_subagents`,
`verify_clarifications`, `verify_synthesis`, `verify_capabilities`, `verify_approvals`,
`verify_plan`, `verify_children`, `verify_review`, `verify_store` and `verify_compaction`;
`verify_facts` indexes the ledger for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from clearance._context.verify_approvals import check_approvals
from clearance._context.verify_capabilities import (
    check_capabilities,
    check_offered_tools,
    spawn_callers,
)
from clearance._context.verify_chain import (
    audit_at_one_moment,
    check_chain_rows,
    digested_call_row,
    record_positions,
)
from clearance._context.verify_channels import mcp_channels
from clearance._context.verify_children import (
    check_child_events,
    check_child_limits,
    check_spawn_outputs,
)
from clearance._context.verify_clarifications import (
    check_clarification_events,
    recorded_workspace,
)
from clearance._context.verify_compaction import check_compaction_order
from clearance._context.verify_delegation import check_delegate_answers
from clearance._context.verify_facts import MemoryLookup, RunFacts, StoreLookup
from clearance._context.verify_items import check_admission, check_sources
from clearance._context.verify_layout import attach_contents, check_layout
from clearance._context.verify_plan import check_plan_events, check_planned_graph
from clearance._context.verify_replay import check_replays
from clearance._context.verify_results import (
    check_results,
    check_step_inputs,
    check_synthesis_result,
)
from clearance._context.verify_review import check_review_accepted, check_review_rounds
from clearance._context.verify_routing import check_routing
from clearance._context.verify_synthesis import check_synthesis_coverage
from clearance._core.errors import MalformedRecord
from clearance._core.origins import Subject
from clearance._core.prompt import ChatMessage, messages_sha256, sha256_text
from clearance._state.ledger import CallRecord, ChainEntry, RunLedger, call_record_sha256
from clearance._state.ledger.audit import AuditRows, KeepCall

__all__ = ["Finding", "MemoryLookup", "StoreLookup", "VerificationReport", "verify_run"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One problem found in a recorded call.

    Attributes:
        call_id: The call, or ``None`` for a finding about another record.
        subject: ``task:<id>``, ``synthesis`` or ``plan`` for a call; ``run``, ``task <id>``,
            ``message <id>``... for another record.
        origin: The manifest item concerned, or ``None`` for the call as a whole.
        reason: What is wrong, in one line.
    """

    call_id: str | None
    subject: str
    origin: str | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.subject} {self.origin}" if self.origin else self.subject
        call = f" (call {self.call_id})" if self.call_id else ""
        return f"{where}: {self.reason}{call}"


@dataclass(frozen=True, kw_only=True, slots=True)
class VerificationReport:
    """The outcome of `verify_run`.

    Attributes:
        run_id: The run verified.
        calls_checked: How many model calls were checked.
        findings: Every problem found; empty when the run is clean.
        entries_checked: How many hash-chain entries were checked.
        keyed: Whether the run's chain is keyed (HMAC under a ledger key).
        macs_checked: Whether the chain's links were checked (for a keyed run: only when
            the ledger key was given).
        chain_head: The chain's last value; keep it elsewhere to detect a later removal of
            the chain's tail.
        channels: The declared channels between agents the run used (MCP servers declared
            ``share: true``), one line each.
    """

    run_id: str
    calls_checked: int
    findings: tuple[Finding, ...]
    entries_checked: int = 0
    keyed: bool = False
    macs_checked: bool = False
    chain_head: str = ""
    channels: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.findings


def verify_run(
    ledger: RunLedger,
    run_id: str,
    *,
    memories: MemoryLookup | None = None,
    store: StoreLookup | None = None,
    key: bytes | None = None,
    head: str | None = None,
) -> VerificationReport:
    """Check a run's records: its hash chain, its results, and every call's clearance.

    Every model call is checked against its clearance and its manifest (see the module's
    docstring for each check).

    Args:
        ledger: The ledger holding the run.
        run_id: The run's id, or a unique prefix of it.
        memories: Optional lookup into the memory store (`clearance.memory_lookup`); when
            given, every ``memory:<id>`` item must be a stored record with that content in
            the scope its title names.
        store: Optional lookup into the run's context store (`ContextStore.get_entry`);
            when given, a ``store:<namespace>/<key>`` item whose entry has not been written
            since the recorded read (same version and ``updated_at``) must hold the stored
            value.
        key: The ledger key to check a keyed chain with; ``None`` means the ledger's own
            (`RunLedger.chain_key`, from ``CLEARANCE_LEDGER_KEY``), if any. With a key, an
            unkeyed run is a finding (its chain proves nothing against a forger).
        head: A head of the run's chain noted earlier (`VerificationReport.chain_head`):
            when given, a chain that no longer holds it (cut short, or the ledger rolled
            back) is a finding.

    Returns:
        A report; ``report.ok`` is true when no problem was found.

    Raises:
        StoreError: The run is unknown or the ledger cannot be read.
        MalformedRecord: A record is not of the shape the ledger writes (edited by hand):
            the ledger's reads refuse what they check, and a value of the wrong type met by
            a check (a key of a run's config, of an event's data) is refused here: never a
            traceback, never a pass.
    """
    try:
        return _verified(ledger, run_id, memories, store, key, head)
    except (TypeError, AttributeError, KeyError, ValueError, IndexError, RecursionError) as exc:
        text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise MalformedRecord(
            f"run {run_id}: a record is not of the shape the ledger writes ({text})"
        ) from exc


def _verified(
    ledger: RunLedger,
    run_id: str,
    memories: MemoryLookup | None,
    store: StoreLookup | None,
    key: bytes | None,
    head: str | None = None,
) -> VerificationReport:
    run = ledger.get_run(run_id)
    checked: list[Finding] = []  # each call's own findings, made as its prompt is read
    made: list[RunFacts] = []
    positions: dict[tuple[str, str], int] = {}  # each record's place in the chain

    def entries_read(entries: list[ChainEntry]) -> None:
        positions.clear()
        positions.update(record_positions(entries))

    def sink(read: AuditRows) -> KeepCall:
        checked.clear()
        made[:] = [RunFacts(ledger, run, memories, store, read, positions)]
        made[0].calls = read.calls

        def keep(call: CallRecord, row: dict[str, Any]) -> dict[str, Any]:
            checked.extend(_check_call(call, made[0]))
            return digested_call_row(row)

        return keep

    # Each table read once; each prompt checked as it is read, then let go.
    entries, read = audit_at_one_moment(ledger, run.run_id, sink, entries_read)
    facts = made[0]
    calls = facts.calls
    chain_key = key if key is not None else ledger.chain_key
    chain = check_chain_rows(entries, read.rows, run.run_id, chain_key, head)
    findings = [
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in chain.problems
    ]
    findings.extend(
        Finding(call_id=None, subject=f"event {event.event_id}", origin=None, reason=problem)
        for event, problem in facts.malformed_events
    )
    findings.extend(checked)
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_results(calls, facts)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_step_inputs(facts)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_synthesis_result(run.synthesis, calls)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_delegate_answers(
            facts.tool_calls, calls, facts.events
        )
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_clarification_events(
            facts.events, calls, recorded_workspace(run.config)
        )
    )
    tasks = facts.tasks
    findings.extend(
        Finding(call_id=None, subject=str(Subject.task(t.task_id)), origin=None,
                reason="the task is recorded, but it is not in the run's recorded graph")
        for t in tasks
        if facts.graph is not None and t.task_id not in facts.graph
    )  # fmt: skip
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_routing(facts.graph, tasks, calls)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_review_accepted(facts)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_review_rounds(facts)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_approvals(
            chain.records, run, facts.events, calls, facts.tool_calls, set(facts.completed)
        )
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_capabilities(
            facts.agents,
            facts.delegations,  # with those the run stopped inside: whom a delegate acts for
            facts.subagents.spawns,
            facts.events,
            tool_ceilings=facts.tool_ceilings,
            assignees={t.id: t.assignee for t in facts.graph or ()},
        )
    )
    if facts.tool_ceilings:
        findings.extend(
            Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
            for subject, call_id, reason in check_offered_tools(
                facts.agents, calls, facts.delegations, facts.subagents.spawns
            )
        )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_child_limits(
            run.config or {},
            facts.graph,
            facts.events,
            calls,
            spawn_callers(facts.delegations, facts.subagents.spawns),
        )
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_spawn_outputs(
            facts.tool_calls, facts.subagents.outcomes
        )
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_child_events(facts.events)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_replays(facts.events, calls, facts.tool_calls)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_plan_events(ledger, run, facts.events)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_planned_graph(run, calls)
    )
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=origin, reason=reason)
        for subject, call_id, origin, reason in check_compaction_order(
            chain.records, calls, facts.events, facts.tool_calls
        )
    )
    channels, undeclared = mcp_channels(facts.events, facts.tool_calls)
    findings.extend(Finding(call_id=c, subject=s, origin=None, reason=r) for s, c, r in undeclared)
    shown = [
        task_id
        for task_id in facts.completed
        if facts.synthesis_from is None or task_id in facts.synthesis_from
    ]
    findings.extend(
        Finding(call_id=None, subject=subject, origin=origin, reason=reason)
        for subject, origin, reason in check_synthesis_coverage(calls, shown)
    )
    return VerificationReport(
        run_id=run.run_id,
        calls_checked=len(calls),
        findings=tuple(findings),
        entries_checked=chain.entries,
        keyed=chain.keyed,
        macs_checked=chain.macs_checked,
        chain_head=chain.head,
        channels=channels,
    )


def _check_call(call: CallRecord, facts: RunFacts) -> Iterator[Finding]:
    def finding(reason: str, origin: str | None = None) -> Finding:
        return Finding(call_id=call.call_id, subject=call.subject, origin=origin, reason=reason)

    manifest: dict[str, Any] = call.manifest
    if call.record_sha256 is None:
        yield finding("the call was recorded without a digest, so edits cannot be ruled out")
    elif call_record_sha256(call.messages, manifest) != call.record_sha256:
        yield finding("the recorded prompt or manifest was altered after the call")

    roles = [m.get("role") for m in call.messages]
    if roles != ["system", "user"]:
        yield finding(f"expected a system and a user message, found roles {roles}")
        return
    system, user = (str(m.get("content", "")) for m in call.messages)
    recorded_hash = messages_sha256(
        (ChatMessage(role="system", content=system), ChatMessage(role="user", content=user))
    )
    if recorded_hash != manifest.get("prompt_sha256") or recorded_hash != call.prompt_sha256:
        yield finding("the prompt text does not match the hash in its manifest")

    items: list[dict[str, Any]] = [dict(i) for i in manifest.get("items", [])]
    attach_contents(user, items)
    if not items or items[0].get("origin") != "instructions":
        yield finding("the manifest does not start with the agent's instructions")
        return
    if items[0].get("sha256") != sha256_text(system):
        yield finding("the system message is not the manifest's instructions", "instructions")
    expected_instructions = facts.instructions.get(call.agent)
    if expected_instructions is not None and system != expected_instructions:
        yield finding(f"the system message is not agent {call.agent!r}'s instructions")

    yield from (finding(reason, origin) for origin, reason in check_layout(call, user, items))
    yield from (finding(reason, origin) for origin, reason in check_admission(call, items, facts))
    yield from (finding(reason, origin) for origin, reason in check_sources(call, items, facts))
