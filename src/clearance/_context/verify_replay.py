"""``verify``'s replay checks: every replayed step is byte-identical to its original.

A resumed run answers a model call or a tool call from its record instead of sending or
running it again (see `clearance._agents.replay`), and records a ``replayed`` event naming
the original record and the SHA-256 of what the loop was given: for a model call, its text
and the tool calls it asked for (`answer_sha256`); for a tool call, its result. This module
recomputes each digest from the original record and reports any difference, a replay of a
record that does not exist, and a replay of a request that never got an answer.

The next prompt after a replayed step needs no check of its own: it is either itself
replayed (its prompt hash equals the recorded one) or sent and recorded as a new call,
which the prompt checks of `verify_run` account for like any other.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from clearance._core.prompt import canonical_json, sha256_text
from clearance._core.vocabulary import EventKind, RecordKind
from clearance._state.ledger import CallRecord, EventRecord, ToolCallRecord

__all__ = ["answer_sha256", "check_replays"]

Problem = tuple[str, str | None, str]
"""``(subject, call id or None, reason)`` of one finding."""


def answer_sha256(text: str | None, tool_calls: list[dict[str, Any]]) -> str:
    """Digest of a model answer as a loop receives it: its text and the tool calls asked."""
    return sha256_text(canonical_json({"text": text, "tool_calls": tool_calls}))


def check_replays(
    events: list[EventRecord],
    calls: list[CallRecord],
    tool_calls: Mapping[str, ToolCallRecord],
) -> Iterator[Problem]:
    """Check each ``replayed`` event against the record it names.

    Args:
        events: The run's events.
        calls: The run's model calls.
        tool_calls: The run's tool calls, by id.
    """
    by_id = {c.call_id: c for c in calls}
    asked = {
        str(e.data.get("call_id")): list(e.data.get("tool_calls") or [])
        for e in events
        if e.kind == EventKind.MODEL_TOOL_CALLS
    }
    for event in events:
        if event.kind != EventKind.REPLAYED:
            continue
        original = str(event.data.get("original"))
        digest = event.data.get("sha256")
        if event.data.get("record") == RecordKind.CALL:
            call = by_id.get(original)
            if call is None:
                yield event.subject, original, "replays a model call the run does not hold"
            elif call.pending or call.error is not None:
                yield event.subject, original, "replays a model call that has no answer"
            elif answer_sha256(call.response, asked.get(original, [])) != digest:
                yield event.subject, original, "the replayed answer differs from its original"
            continue
        row = tool_calls.get(original)
        if row is None:
            yield event.subject, None, f"replays tool call {original}, which the run does not hold"
        elif sha256_text(row.result) != digest:
            yield (
                event.subject,
                None,
                f"the replayed result of tool call {original} differs from its original",
            )
