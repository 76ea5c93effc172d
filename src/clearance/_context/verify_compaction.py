"""``clearance verify``'s check that a compaction is recorded before the prompt that uses it.

A prompt shows compacted context only after the compaction was recorded:

- a tool loop records a ``compacted`` event (`CompactingPrompts`) before the prompt that
  shows an older tool result as its one line (`compacted_result`), so such a line needs a
  ``compacted`` event of the prompt's subject naming the tool call, chained before the
  prompt's request;
- a chat's summary of earlier turns is the answer of a summarizing call of the agent
  (``summary:<agent>``), so a conversation prompt showing it needs that call (its request
  and its answer) chained before the prompt's request.

The order is the hash chain's (`verify_chain.chained_records`), which is the order the
ledger wrote the records in; it is indexed only when a prompt shows compacted context.
Whether the compacted line or the summary is the right one is checked elsewhere
(`verify_items`, `verify_memory`); this module checks only when it was recorded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clearance._context.tool_sections import compacted_result
from clearance._context.verify_chain import ChainedRecord
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.vocabulary import EventKind, OriginKind, PromptKind, RecordKind
from clearance._state.ledger import CallRecord, EventRecord, ToolCallRecord

__all__ = ["check_compaction_order"]

Problem = tuple[str, str | None, str | None, str]
"""``(subject, call id, origin, reason)``: one finding."""

_Use = tuple[CallRecord, str, Sequence[str]]
"""A prompt, the origin of compacted context it shows, and the records that may hold it:
``event:<id>`` of ``compacted`` events, ``call:<id>`` of summarizing calls."""


def check_compaction_order(
    chained: Sequence[ChainedRecord],
    calls: Sequence[CallRecord],
    events: Sequence[EventRecord],
    tool_calls: Mapping[str, ToolCallRecord],
) -> Iterator[Problem]:
    """Each prompt's compacted tool results and chat summaries, recorded before it.

    Args:
        chained: The records the run's hash chain holds, in its order (`ChainReport.records`).
        calls: The run's model calls, in the order recorded.
        events: The run's well-formed events, in the order recorded.
        tool_calls: The run's tool calls, by id.
    """
    uses = [*_compacted_tool_results(calls, events, tool_calls), *_shown_summaries(calls)]
    if not uses:
        return
    first: dict[str, int] = {}  # "kind:subject" -> its first place in the chain
    last: dict[str, int] = {}  # and its latest (a call's answer)
    for record in chained:
        first.setdefault(f"{record.kind}:{record.subject}", record.position)
        last[f"{record.kind}:{record.subject}"] = record.position
    for call, origin, holders in uses:
        at = first.get(f"{RecordKind.CALL}:{call.call_id}")
        if at is None:
            continue  # the chain check reports a call it does not hold
        if any(last.get(h, at) < at for h in holders):
            continue
        kind = Origin.parse(origin).kind
        if kind == OriginKind.TOOL:
            reason = (
                f"the tool result is shown compacted, but the compacted event "
                f"{holders[0].partition(':')[2]} that records it was recorded after the prompt"
            )
        else:
            reason = (
                f"the summary was written by {holders[0].partition(':')[2]}, a summarizing "
                "call recorded after the prompt that shows it"
            )
        yield call.subject, call.call_id, origin, reason


def _items(call: CallRecord) -> list[dict[str, Any]]:
    items = call.manifest.get("items")
    return [i for i in items[1:] if isinstance(i, dict)] if isinstance(items, list) else []


def _compacted_tool_results(
    calls: Sequence[CallRecord],
    events: Sequence[EventRecord],
    tool_calls: Mapping[str, ToolCallRecord],
) -> Iterator[_Use]:
    """Tool results prompts show as their compacted line, with the events that compacted them."""
    compacted: dict[tuple[str, str], list[str]] = {}  # (subject, tool call id) -> events
    for event in events:
        if event.kind == EventKind.COMPACTED:
            for tool_call_id in event.data.get("tool_call_ids") or ():
                key = (event.subject, str(tool_call_id))
                compacted.setdefault(key, []).append(f"{RecordKind.EVENT}:{event.event_id}")
    if not compacted:
        return
    for call in calls:
        for item in _items(call):
            origin = str(item.get("origin"))
            parsed = Origin.parse(origin)
            holders = compacted.get((call.subject, parsed.id))
            record = tool_calls.get(parsed.id)
            if parsed.kind != OriginKind.TOOL or not holders or record is None:
                continue
            digest = item.get("sha256")
            line = compacted_result(record.name, record.result, is_error=record.is_error)
            if digest != sha256_text(record.result) and digest == sha256_text(line):
                yield call, origin, holders


def _shown_summaries(calls: Sequence[CallRecord]) -> Iterator[_Use]:
    """Summaries conversation prompts show, with the summarizing calls that wrote them."""
    written: dict[tuple[str, str], list[str]] = {}  # (agent, summary digest) -> calls
    for call in calls:
        summarized = Subject.parse(call.subject).kind == PromptKind.SUMMARY
        if summarized and call.response is not None and not call.error:
            key = (call.agent, sha256_text(call.response.strip()))  # the monitor keeps it so
            written.setdefault(key, []).append(f"{RecordKind.CALL}:{call.call_id}")
    if not written:
        return
    for call in calls:
        if Subject.parse(call.subject).kind != PromptKind.CONVERSATION:
            continue
        for item in _items(call):
            origin = str(item.get("origin"))
            holders = written.get((call.agent, str(item.get("sha256"))))
            if Origin.parse(origin).kind == OriginKind.SUMMARY and holders:
                yield call, origin, holders
