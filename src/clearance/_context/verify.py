"""Verifying a recorded run: every prompt against its task's clearance, from the ledger alone.

`verify_run` re-derives, for every recorded model call:

1. **Integrity.** The call's digest (`call_record_sha256`) matches its recorded messages and
   manifest, and the manifest's prompt hash matches the messages: an edit to any recorded
   field of a prompt or manifest is detected.
2. **Accounting.** The prompt parses back (`parse_user_message`) into exactly the manifest's
   items, in order, each under the section its kind belongs to, with the same heading and
   content hash; re-rendering them reproduces the recorded text byte for byte, and the
   closing instruction is the builder's. No text reached the model that the manifest does
   not account for.
3. **Clearance.** Each task's clearance is recomputed from the recorded graph (never from
   model output) and must equal the recorded one; every item's origin must be admitted by
   it, and messages must be addressed to the task's agent. The coordinator's synthesis and
   planning prompts may hold only the kinds of item they are built from; the map steps and
   reduce of a hierarchical synthesis are checked as `verify_synthesis` describes (each
   result in one map step, each summary the recorded answer of its map call).
4. **Provenance.** An item's content is what its origin says it is: the task text from the
   graph, a result from the recorded result of that task, a message from the recorded
   message, the instructions from the recorded agent.

Memory items (``memory:<id>``) are admitted when the scope their title names is one of the
task's (or conversation's) memory scopes, recomputed from the team's recorded memory groups;
given a lookup into the memory store, their content and scope are checked against the stored
record too.

5. **Chain.** Every record of the run (the run, tasks, task reasons, messages, calls with
   their responses, tool calls, events) matches its entry in the run's hash chain, and the
   chain's links hold (`verify_chain`); with the ledger key, the links are MACs a forger
   without the key cannot recompute.
6. **Results.** Every completed task has a successful model call of its own, and its result
   is that call's response as the orchestrator keeps it: the last successful ``task:<id>``
   call's text with surrounding whitespace removed, or for a task with an
   ``output_schema``, the JSON value it holds re-serialized
   (``json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)``).

What it cannot check: file contents are compared with the manifest's hashes and with the
same file in the task's other prompts, not with the files on disk (which may have changed
since), and anything the model provider did with the prompt after receiving it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from clearance._context.answers import mark_answer
from clearance._context.builder import (
    CHILD_GOAL_SECTION,
    CLARIFICATION_TRAILER,
    PLAN_INSTRUCTIONS,
    QUESTION_SECTION,
    SUMMARIES_SECTION,
    SYNTHESIS_MAP,
    SYNTHESIS_MAP_TRAILER,
    SYNTHESIS_REDUCE_TRAILER,
    SYNTHESIS_TRAILER,
    TASK_TRAILER,
)
from clearance._context.clearance import Clearance
from clearance._context.isolated import ISOLATED_TRAILER, subagent_result
from clearance._context.memory_items import (
    CONVERSATION_TRAILER,
    MEMORY_SECTION,
    SUMMARY_PROMPT,
    TURNS_SECTION,
    scope_of_title,
)
from clearance._context.render import (
    PromptParseError,
    parse_user_message,
    render_user_message,
)
from clearance._context.tool_sections import (
    DELEGATED_SECTION,
    TOOL_RESULTS_SECTION,
    TOOL_TRAILER,
    TOOLS_SECTION,
)
from clearance._context.verify_approvals import check_approvals
from clearance._context.verify_chain import check_chain
from clearance._context.verify_subagents import (
    SubagentFacts,
    check_child_call,
    check_child_result,
    check_clarification_call,
    check_isolated_call,
)
from clearance._context.verify_synthesis import (
    check_synthesis_coverage,
    check_synthesis_step,
    is_synthesis_step,
)
from clearance._core.errors import ConfigError
from clearance._core.memory_spec import memory_scopes_of
from clearance._core.prompt import ChatMessage, messages_sha256, sha256_text
from clearance._core.spec import Agent
from clearance._state.graph import TaskGraph
from clearance._state.ledger import CallRecord, RunLedger, RunRecord, call_record_sha256
from clearance._state.messages import Message

if TYPE_CHECKING:
    from clearance._state.memory import MemoryRecord
    from clearance._state.store import StoreEntry

MemoryLookup = Callable[[str], "MemoryRecord | None"]
"""Finds a memory record by id in the memory store, whatever its scope (for auditing)."""

StoreLookup = Callable[[str, str], "StoreEntry | None"]
"""Finds the live entry at ``(namespace, key)`` in the run's context store (for auditing)."""

__all__ = ["Finding", "VerificationReport", "verify_run"]

SECTION_KINDS: Mapping[str, frozenset[str]] = {
    "# Task": frozenset({"task"}),
    "## Files": frozenset({"file"}),
    "## Context from prerequisite tasks": frozenset({"task_result"}),
    "## Prerequisite tasks that did not complete": frozenset({"task_status"}),
    "## Messages from team members": frozenset({"message"}),
    "## Your previous answer was rejected": frozenset({"repair"}),
    "# Goal": frozenset({"goal"}),
    "## Completed tasks": frozenset({"task_result"}),
    "## Failed tasks": frozenset({"task_status"}),
    "## Skipped tasks": frozenset({"task_status"}),
    "## Shared memory": frozenset({"shared_memory"}),
    SUMMARIES_SECTION: frozenset({"summary_of"}),
    "## Team members": frozenset({"agent"}),
    "## Your previous plan was rejected": frozenset({"plan_feedback"}),
    "## Project architecture": frozenset({"arch"}),
    "## Constraints": frozenset({"constraint"}),
    "## Clarifications": frozenset({"clarification"}),
    "## Results from subagents": frozenset({"child_result"}),
    "## Your earlier steps": frozenset({"history"}),
    DELEGATED_SECTION: frozenset({"delegation"}),
    TOOLS_SECTION: frozenset({"tool_spec"}),
    TOOL_RESULTS_SECTION: frozenset({"tool", "store"}),
    MEMORY_SECTION: frozenset({"memory"}),
    TURNS_SECTION: frozenset({"turn", "summary"}),
    QUESTION_SECTION: frozenset({"question"}),
    CHILD_GOAL_SECTION: frozenset({"child_goal"}),
}
"""Which kinds of item each section of a prompt may hold."""

_SYNTHESIS_KINDS = frozenset(
    {"instructions", "goal", "task_result", "task_status", "shared_memory"}
)
_PLAN_KINDS = frozenset({"instructions", "goal", "agent", "plan_feedback"})
_CLARIFICATION_KINDS = frozenset({"instructions", "task", "task_result", "question"})
_CONVERSATION_KINDS = frozenset({"instructions", "turn", "summary", "memory"})


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
    """

    run_id: str
    calls_checked: int
    findings: tuple[Finding, ...]
    entries_checked: int = 0
    keyed: bool = False
    macs_checked: bool = False
    chain_head: str = ""

    @property
    def ok(self) -> bool:
        """Whether no problem was found."""
        return not self.findings


class _RunFacts:
    """What the ledger says about a run, indexed for the checks."""

    def __init__(
        self,
        ledger: RunLedger,
        run: RunRecord,
        memories: MemoryLookup | None = None,
        store: StoreLookup | None = None,
    ):
        self.run = run
        self.memories = memories
        self.store = store
        self.graph = TaskGraph.from_dict(run.graph) if run.graph else None
        records = ledger.tasks(run.run_id)
        self.results = {t.task_id: t.result for t in records if t.result is not None}
        self.completed = {t.task_id: t.result or "" for t in records if t.status == "completed"}
        self.calls: list[CallRecord] = []
        # Every reason a task was ever recorded with: a resumed run re-runs failed tasks.
        self.errors: dict[str, set[str]] = {
            task_id: set(reasons) for task_id, reasons in ledger.task_reasons(run.run_id).items()
        }
        for t in records:
            if t.error is not None:
                self.errors.setdefault(t.task_id, set()).add(t.error)
        self.messages = {
            m["id"]: Message(
                id=m["id"],
                sender=m["sender"],
                recipient=m["recipient"],
                content=m["content"],
                created_at=m["created_at"],
            )
            for m in ledger.messages(run.run_id)
        }
        config = run.config or {}
        self.instructions: dict[str, str] = {
            a["name"]: str(a.get("instructions", "")).strip() for a in config.get("agents", [])
        }
        # Tools and store grants, as the run's config recorded them (never model output).
        self.agents: dict[str, Agent] = {}
        for spec in config.get("agents", []):
            try:
                self.agents[spec["name"]] = Agent(
                    name=spec["name"],
                    instructions=str(spec.get("instructions", "")) or "-",
                    role=str(spec.get("role") or ""),
                    tools=tuple(spec.get("tools", ())),
                    can_delegate_to=tuple(spec.get("can_delegate_to", ())),
                    store_grants=dict(spec.get("store_grants", {})),
                    can_spawn=tuple(spec.get("can_spawn", ())),
                )
            except (ConfigError, KeyError, TypeError):
                continue
        self.tool_calls = {t.tool_call_id: t for t in ledger.tool_calls(run.run_id)}
        # (agent, tool name) to the digest of the tool's description in its first prompt.
        self.tool_specs: dict[tuple[str, str], Any] = {}
        self.memory_groups: dict[str, list[str]] = dict(config.get("memory_groups") or {})
        coordinator = config.get("coordinator")
        self.coordinator: str | None = None
        if isinstance(coordinator, dict) and "instructions" in coordinator:
            self.instructions[coordinator["name"]] = str(coordinator["instructions"]).strip()
            self.coordinator = str(coordinator["name"])
        self.events = ledger.events(run.run_id)
        self.subagents = SubagentFacts(self.events)
        chosen = config.get("synthesis_from")
        self.synthesis_from = frozenset(chosen) if isinstance(chosen, list) else None


def verify_run(
    ledger: RunLedger,
    run_id: str,
    *,
    memories: MemoryLookup | None = None,
    store: StoreLookup | None = None,
    key: bytes | None = None,
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
            since the recorded read (same ``updated_at``) must hold the stored value.
        key: The ledger key to check a keyed chain with; ``None`` means the ledger's own
            (`RunLedger.chain_key`, from ``CLEARANCE_LEDGER_KEY``), if any. With a key, an
            unkeyed run is a finding (its chain proves nothing against a forger).

    Returns:
        A report; ``report.ok`` is true when no problem was found.

    Raises:
        StoreError: The run is unknown or the ledger cannot be read.
    """
    run = ledger.get_run(run_id)
    facts = _RunFacts(ledger, run, memories, store)
    calls = ledger.calls(run.run_id)
    chain = check_chain(ledger, run.run_id, key if key is not None else ledger.chain_key)
    findings = [
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in chain.problems
    ]
    facts.calls = calls
    findings.extend(f for call in calls for f in _check_call(call, facts))
    findings.extend(_check_results(calls, facts))
    findings.extend(
        Finding(call_id=call_id, subject=subject, origin=None, reason=reason)
        for subject, call_id, reason in check_approvals(
            ledger, run, facts.events, calls, facts.tool_calls, set(facts.completed)
        )
    )
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
    )


def _check_results(calls: list[CallRecord], facts: _RunFacts) -> Iterator[Finding]:
    """Every completed task has a successful call of its own whose response is its result."""
    last: dict[str, CallRecord] = {}
    for call in calls:
        ok = call.error is None and not call.pending
        if ok and call.subject.startswith(("task:", "isolated:")):
            last[call.subject.partition(":")[2]] = call
    steps = {
        e.subject.removeprefix("task:"): e.data.get("sha256")
        for e in facts.events
        if e.kind == "step" and e.subject.startswith("task:")
    }
    for task_id, result in facts.completed.items():
        task = facts.graph.get(task_id) if facts.graph and task_id in facts.graph else None
        if task is not None and task.run is not None:  # a non-model task: its step event
            if steps.get(task_id) != sha256_text(result):
                yield Finding(
                    call_id=None,
                    subject=f"task:{task_id}",
                    origin=None,
                    reason="the task's result is not the output its step recorded",
                )
            continue
        if task_id not in last:
            yield Finding(
                call_id=None,
                subject=f"task:{task_id}",
                origin=None,
                reason="the task is recorded completed, but no successful model call of it is",
            )
            continue
        call = last[task_id]
        response = call.response or ""
        accepted: set[str | None] = {response.strip()}
        # Marks for an answer cut off at the output limit, or looping (see `mark_answer`).
        accepted.add(mark_answer(response, finish_reason=call.finish_reason).text)
        if call.subject.startswith("isolated:"):
            accepted = {subagent_result(response)}  # the answer less its STATUS lines
        schema = (
            facts.graph.get(task_id).output_schema
            if facts.graph and task_id in facts.graph
            else None
        )
        if schema is not None:
            accepted.add(_structured(response))
        if result not in accepted:
            yield Finding(
                call_id=call.call_id,
                subject=f"task:{task_id}",
                origin=None,
                reason="the task's recorded result is not the response of its last call",
            )


_FENCED_JSON = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.DOTALL)


def _structured(text: str) -> str | None:
    """A structured answer re-serialized as the orchestrator keeps it, or ``None``."""
    body = text.strip()
    match = _FENCED_JSON.search(body)
    for candidate in (body, match.group(1) if match else None):
        if candidate is None:
            continue
        try:
            # As the orchestrator parses it: raw control characters inside strings allowed.
            value = json.loads(candidate, strict=False)
        except (ValueError, RecursionError):
            continue
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    return None


def _check_call(call: CallRecord, facts: _RunFacts) -> Iterator[Finding]:
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
    _attach_contents(user, items)
    if not items or items[0].get("origin") != "instructions":
        yield finding("the manifest does not start with the agent's instructions")
        return
    if items[0].get("sha256") != sha256_text(system):
        yield finding("the system message is not the manifest's instructions", "instructions")
    expected_instructions = facts.instructions.get(call.agent)
    if expected_instructions is not None and system != expected_instructions:
        yield finding(f"the system message is not agent {call.agent!r}'s instructions")

    yield from (finding(reason, origin) for origin, reason in _check_layout(call, user, items))
    yield from (finding(reason, origin) for origin, reason in _check_admission(call, items, facts))
    yield from (finding(reason, origin) for origin, reason in _check_sources(call, items, facts))


_SINGLE_KINDS = frozenset(
    {"task", "file", "task_result", "message", "repair", "goal", "agent", "plan_feedback",
     "tool_spec", "tool", "delegation", "instructions", "summary_of"}
)  # fmt: skip
"""Kinds of item a prompt holds at most once per origin."""


def _attach_contents(user: str, items: list[dict[str, Any]]) -> None:
    """Give each item after the instructions its block's text (``"_content"``), if parsable."""
    try:
        sections, _ = parse_user_message(user)
    except PromptParseError:
        return
    blocks = [b for s in sections for b in s.blocks]
    if len(blocks) == len(items) - 1:
        for block, item in zip(blocks, items[1:], strict=True):
            item["_content"] = block.content


def _check_sources(
    call: CallRecord, items: list[dict[str, Any]], facts: _RunFacts
) -> Iterator[tuple[str | None, str]]:
    """Provenance of the items the admission checks do not trace to a record.

    Each origin appears once per prompt; a file holds the same content in every prompt of
    its task; a tool's description is the same in every prompt of the run and names one of
    the agent's recorded tools; a repair or plan feedback quotes an earlier answer of the
    same subject; a roster line is the agent's recorded role summary.
    """
    seen: set[str] = set()
    for item in items:
        origin = str(item.get("origin"))
        kind, _, ref = origin.partition(":")
        if kind in _SINGLE_KINDS:
            if origin in seen:
                yield origin, "the origin appears twice in one prompt"
            seen.add(origin)
        digest, content = item.get("sha256"), item.get("_content")
        if kind == "file":
            others = {
                i.get("sha256")
                for other in facts.calls
                if other.subject == call.subject and other.call_id != call.call_id
                for i in other.manifest.get("items", [])
                if i.get("origin") == origin
            }
            if others - {digest}:
                yield (
                    origin,
                    "the file's content differs from the same file in the task's other prompts",
                )
        elif kind == "tool_spec":
            agent = facts.agents.get(call.agent)
            if agent is not None:
                names = set(agent.tools) | ({"delegate"} if agent.can_delegate_to else set())
                names |= {"spawn"} if agent.can_spawn else set()
                if ref not in names:
                    yield origin, f"{ref!r} is not a tool of agent {call.agent!r}"
            known = facts.tool_specs.setdefault((call.agent, ref), digest)
            if known != digest:
                yield origin, "the tool's description differs from the agent's other prompts"
        elif kind in ("repair", "plan_feedback"):
            if content is None or not _quotes_earlier_answer(call, kind, content, facts):
                yield origin, "the content does not quote an earlier answer of the same subject"
        elif kind == "agent":
            agent = facts.agents.get(ref)
            if agent is not None and digest != sha256_text(agent.summary):
                yield origin, "the roster line is not the agent's recorded role"


def _quotes_earlier_answer(call: CallRecord, kind: str, content: str, facts: _RunFacts) -> bool:
    for other in facts.calls:
        if other.call_id == call.call_id:
            return False  # only calls made before this one
        if other.subject != call.subject or other.response is None or other.error:
            continue
        if kind == "repair":
            prefix = other.response.strip() + "\n\nProblem: "
        else:
            prefix = f"Your answer was:\n{other.response}\n\nIt was rejected: "
        if content.startswith(prefix):
            return True
    return False


def _check_layout(
    call: CallRecord, user: str, items: list[dict[str, Any]]
) -> Iterator[tuple[str | None, str]]:
    """The user message is exactly the rendering of the manifest's items."""
    try:
        sections, trailer = parse_user_message(user)
    except PromptParseError as exc:
        yield None, f"the prompt does not have the rendered layout: {exc}"
        return
    blocks = [(s.heading, b) for s in sections for b in s.blocks]
    if len(blocks) != len(items) - 1:
        yield None, f"the prompt holds {len(blocks)} blocks, the manifest lists {len(items) - 1}"
    for (heading, block), item in zip(blocks, items[1:], strict=False):
        origin = str(item.get("origin"))
        kind = origin.split(":", 1)[0]
        if kind not in SECTION_KINDS.get(heading, frozenset()):
            yield origin, f"a {kind!r} item under the section {heading!r}"
        if block.heading != item.get("title"):
            yield (
                origin,
                f"the block is headed {block.heading!r}, the manifest says {item.get('title')!r}",
            )
        if sha256_text(block.content) != item.get("sha256"):
            yield origin, "the block's content does not match the manifest's hash"
    if render_user_message(sections, trailer) != user:
        yield None, "the prompt holds text outside the manifest's items"
    subject = call.subject
    if subject.startswith(("task:", "delegation:", "child:")):
        builders_trailer = trailer == TASK_TRAILER or (
            trailer == TOOL_TRAILER and (call.manifest.get("clearance") or {}).get("tools")
        )
    elif subject == "synthesis" and is_synthesis_step(subject, items):
        builders_trailer = trailer == SYNTHESIS_REDUCE_TRAILER
    elif subject == "synthesis":
        builders_trailer = trailer == SYNTHESIS_TRAILER
    elif subject.startswith(f"{SYNTHESIS_MAP}:"):
        builders_trailer = trailer == SYNTHESIS_MAP_TRAILER
    elif subject.startswith("isolated:"):
        builders_trailer = trailer == ISOLATED_TRAILER
    elif subject.startswith("clarification:"):
        builders_trailer = trailer == CLARIFICATION_TRAILER
    elif subject.startswith("conversation:"):
        builders_trailer = trailer == CONVERSATION_TRAILER
    elif subject.startswith("summary:"):
        builders_trailer = trailer == SUMMARY_PROMPT
    else:
        builders_trailer = trailer.startswith(PLAN_INSTRUCTIONS)
    if not builders_trailer:
        yield None, "the closing instruction is not the builder's"


def _check_admission(
    call: CallRecord, items: list[dict[str, Any]], facts: _RunFacts
) -> Iterator[tuple[str | None, str]]:
    """Every item is admitted by the subject's clearance and is what its origin says."""
    subject = call.subject
    if subject.startswith("task:"):
        yield from _check_task_call(call, items, facts)
        return

    def provenance(origin: str, item: dict[str, Any]) -> Iterator[tuple[str | None, str]]:
        return _check_provenance(origin, item, facts)

    if subject.startswith("isolated:"):
        yield from check_isolated_call(call, items, facts, provenance)
        return
    if subject.startswith("clarification:"):
        yield from check_clarification_call(call, items, facts, provenance)
        return
    if subject.startswith("child:"):
        agent = facts.agents.get(call.agent)

        def tool_item(origin: str, item: dict[str, Any]) -> Iterator[tuple[str | None, str]]:
            assert agent is not None  # checked before any item
            clearance = Clearance.for_child(subject.removeprefix("child:"), agent)
            return _check_tool_item(call, clearance, origin, item, facts)

        yield from check_child_call(call, items, facts, tool_item)
        return
    if subject.startswith("delegation:"):
        yield from _check_delegation_call(call, items, facts)
        return
    if subject.startswith(("conversation:", "summary:")):
        yield from _check_conversation_call(call, items, facts)
        return
    if is_synthesis_step(subject, items):
        yield from check_synthesis_step(call, items, facts.calls, facts.run.goal, provenance)
        return
    allowed = _SYNTHESIS_KINDS if subject == "synthesis" else _PLAN_KINDS
    if subject not in ("synthesis", "plan"):
        yield None, f"unknown call subject {subject!r}"
        return
    agents = set(facts.instructions)
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind, _, ref = origin.partition(":")
        if kind not in allowed:
            yield origin, f"a {subject} prompt may not hold {kind!r} items"
        elif kind == "agent" and agents and ref not in agents:
            yield origin, f"{ref!r} is not an agent of the run"
        elif kind == "goal" and facts.run.goal is not None:
            if item.get("sha256") != sha256_text(facts.run.goal):
                yield origin, "the goal is not the run's goal"
        else:
            yield from _check_provenance(origin, item, facts)


def _check_task_call(
    call: CallRecord, items: list[dict[str, Any]], facts: _RunFacts
) -> Iterator[tuple[str | None, str]]:
    task_id = call.subject.removeprefix("task:")
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
    expected = clearance.to_dict()
    if isinstance(recorded, dict) and "memory_scopes" not in recorded:
        # Recorded before clearances carried memory scopes; such prompts hold no memory.
        expected.pop("memory_scopes")
    if recorded != expected:
        yield None, "the recorded clearance differs from the one the graph gives"
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind, _, ref = origin.partition(":")
        message = facts.messages.get(ref) if kind == "message" else None
        scope = scope_of_title(str(item.get("title"))) if kind == "memory" else None
        if kind == "message" and message is None:
            yield origin, "no such message was recorded in the run"
        elif not clearance.admits(origin, message=message, memory_scope=scope):
            yield origin, f"not in the clearance of task {task_id!r}"
        elif kind == "task" and item.get("sha256") != sha256_text(task.description):
            yield origin, "the task text is not the recorded task's description"
        elif kind == "task_status" and task.after_failure != "proceed":
            yield origin, "only a task that proceeds after failures lists failed prerequisites"
        elif kind in ("tool", "store"):
            yield from _check_tool_item(call, clearance, origin, item, facts)
        elif kind == "child_result":
            yield from check_child_result(task_id, ref, item, facts)
        else:
            yield from _check_provenance(origin, item, facts)


def _check_delegation_call(
    call: CallRecord, items: list[dict[str, Any]], facts: _RunFacts
) -> Iterator[tuple[str | None, str]]:
    """A delegate's prompt: the recorded ``delegate`` call's task text and its own tools."""
    tool_call_id = call.subject.removeprefix("delegation:")
    record = facts.tool_calls.get(tool_call_id)
    if record is None or record.name != "delegate":
        yield None, f"no delegate tool call {tool_call_id!r} was recorded in the run"
        return
    if record.arguments.get("agent") != call.agent:
        yield None, f"the delegation was to {record.arguments.get('agent')!r}, not {call.agent!r}"
    agent = facts.agents.get(call.agent)
    if agent is None:
        yield None, f"agent {call.agent!r} is not in the run's recorded config"
        return
    clearance = Clearance.for_delegation(tool_call_id, agent)
    if call.manifest.get("clearance") != clearance.to_dict():
        yield None, "the recorded clearance differs from the one the team gives"
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind = origin.partition(":")[0]
        if not clearance.admits(origin):
            yield origin, f"not in the clearance of {call.subject}"
        elif kind == "delegation":
            if item.get("sha256") != sha256_text(str(record.arguments.get("task", ""))):
                yield origin, "the task text is not the recorded delegated task"
        elif kind in ("tool", "store"):
            yield from _check_tool_item(call, clearance, origin, item, facts)


def _check_tool_item(
    call: CallRecord,
    clearance: Clearance,
    origin: str,
    item: dict[str, Any],
    facts: _RunFacts,
) -> Iterator[tuple[str | None, str]]:
    """A tool result or store entry is what a recorded tool call of this prompt returned."""
    kind, _, ref = origin.partition(":")
    digest = item.get("sha256")
    mine = [t for t in facts.tool_calls.values() if t.subject == call.subject]
    if kind == "tool":
        record = facts.tool_calls.get(ref)
        if record is None or record.subject != call.subject:
            yield origin, f"no tool call {ref!r} was recorded for {call.subject}"
        elif digest != sha256_text(record.result):
            yield origin, "the content is not the recorded result of the tool call"
        return
    reads = [r for t in mine for r in t.store_reads if f"{r['namespace']}/{r['key']}" == ref]
    if not reads:
        yield origin, f"no recorded tool call of {call.subject} read this store entry"
    elif not any(clearance.admits_store(r["namespace"]) for r in reads):
        yield origin, "the store namespace is not granted for reads"
    elif not any(r.get("sha256") == digest for r in reads):
        yield origin, "the content is not what the recorded tool call read"
    elif facts.store is not None:
        namespace, _, key = ref.partition("/")
        entry = facts.store(namespace, key)
        unchanged = entry is not None and any(
            r.get("updated_at") == entry.updated_at.isoformat() for r in reads
        )
        if entry is not None and unchanged and sha256_text(entry.value) != digest:
            yield origin, "the content is not the value in the store"


def _check_conversation_call(
    call: CallRecord, items: list[dict[str, Any]], facts: _RunFacts
) -> Iterator[tuple[str | None, str]]:
    """A conversation (or summarizing) prompt holds turns and the agent's readable memory."""
    agent = call.subject.split(":", 1)[1]
    if call.agent != agent:
        yield None, f"the prompt was built for {call.agent!r}, not {agent!r}"
    scopes = memory_scopes_of(agent, facts.memory_groups)
    expected = {"agent": agent, "memory_scopes": sorted(scopes)}
    if call.manifest.get("clearance") != expected:
        yield None, "the recorded clearance differs from the agent's memory scopes"
    for item in items[1:]:
        origin = str(item.get("origin"))
        kind = origin.split(":", 1)[0]
        if kind not in _CONVERSATION_KINDS:
            yield origin, f"a conversation prompt may not hold {kind!r} items"
        elif kind == "memory":
            scope = scope_of_title(str(item.get("title")))
            if scope not in scopes:
                yield origin, f"memory scope {scope!r} is not readable by {agent!r}"
            else:
                yield from _check_provenance(origin, item, facts)


def _check_provenance(
    origin: str, item: dict[str, Any], facts: _RunFacts
) -> Iterator[tuple[str | None, str]]:
    kind, _, ref = origin.partition(":")
    digest = item.get("sha256")
    if kind == "task_result":
        result = facts.results.get(ref)
        if result is None:
            yield origin, f"task {ref!r} has no recorded result"
        elif digest != sha256_text(result):
            yield origin, f"the content is not the recorded result of task {ref!r}"
    elif kind == "task_status":
        errors = facts.errors.get(ref)
        if not errors:
            yield origin, f"task {ref!r} has no recorded failure or skip"
        elif digest not in {sha256_text(error) for error in errors}:
            yield origin, f"the content is not the recorded reason of task {ref!r}"
    elif kind == "message":
        message = facts.messages.get(ref)
        if message is not None and digest != sha256_text(message.content):
            yield origin, "the content is not the recorded message"
    elif kind == "memory" and facts.memories is not None:
        record = facts.memories(ref)
        if record is None:
            yield origin, "no such record in the memory store"
        elif record.scope != scope_of_title(str(item.get("title"))):
            yield origin, f"the record is in scope {record.scope!r}, not the one its title names"
        elif digest != sha256_text(record.content):
            yield origin, "the content is not the stored memory record"
