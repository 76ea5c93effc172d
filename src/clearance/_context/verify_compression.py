"""``clearance verify``'s checks of a chat prompt's ``compression`` record.

The context-window monitor records in the next conversation prompt's manifest what it
dropped or summarized (`CompressionRecord`, the latest one, earlier ones under
``"earlier"``). The record is checked against the prompts themselves: a turn or summary an
earlier conversation prompt of the agent showed leaves the conversation only as a dropped
turn of this prompt's record; a turn the record calls dropped is not in the prompt; a
summary it names is one the agent's model wrote (and the one the prompt shows); and only a
conversation prompt carries a record.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from clearance._context.verify_memory import ConversationFacts
from clearance._core.origins import Origin, Subject
from clearance._core.vocabulary import OriginKind, PromptKind
from clearance._state.ledger import CallRecord

__all__ = ["check_compression"]

Problem = tuple[str | None, str]

_STRATEGIES = ("drop_oldest", "summarize")
_COUNTS = ("context_window", "tokens_before", "tokens_after")
_KEYS = frozenset(
    {*_COUNTS, "strategy", "dropped", "summary_id", "summary_sha256", "recorded_to_memory"}
)


def check_compression(
    call: CallRecord, items: list[dict[str, Any]], conversation: ConversationFacts
) -> Iterator[Problem]:
    """A prompt's ``compression`` record is what the conversation's prompts show was done."""
    data = call.manifest.get("compression")
    if Subject.parse(call.subject).kind != PromptKind.CONVERSATION:
        if data is not None:
            yield None, "only a conversation prompt records a compression"
        return
    records: list[Mapping[str, Any]] = []
    if data is not None:
        if not isinstance(data, dict):
            yield None, "the compression record is not an object"
            return
        earlier = data.get("earlier", [])
        if not isinstance(earlier, list) or not all(isinstance(r, dict) for r in earlier):
            yield None, "the compression record's earlier compressions are not a list of objects"
            return
        records = [*earlier, {k: v for k, v in data.items() if k != "earlier"}]
    held = {
        str(item.get("origin")): item
        for item in items[1:]
        if Origin.parse(str(item.get("origin"))).kind in (OriginKind.TURN, OriginKind.SUMMARY)
    }
    dropped: set[str] = set()
    for record in records:
        problem = _shape_problem(record)
        if problem is not None:
            yield None, f"the compression record {problem}"
            return
        dropped.update(record["dropped"])
        yield from _check_record(call, record, held, conversation)
    for origin in sorted(conversation.previous.get(call.call_id, frozenset()) - held.keys()):
        if Origin.parse(origin).id not in dropped:
            yield origin, "left the conversation with no compression recorded"


def _shape_problem(record: Mapping[str, Any]) -> str | None:
    """What is wrong with one record's form (``None``: nothing)."""
    if extra := sorted(set(record) - _KEYS):
        return f"has unknown keys {extra}"
    if record.get("strategy") not in _STRATEGIES:
        return f"names an unknown strategy {record.get('strategy')!r}"
    for key in _COUNTS:
        value = record.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"has a {key} that is not a count: {value!r}"
    for key in ("dropped", "recorded_to_memory"):
        value = record.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return f"has a {key} that is not a list of turn ids"
    for key in ("summary_id", "summary_sha256"):
        if not isinstance(record.get(key), str | None):
            return f"has a {key} that is not text"
    if (record.get("summary_id") is None) != (record.get("summary_sha256") is None):
        return "names a summary without its digest (or a digest without its summary)"
    return None


def _check_record(
    call: CallRecord,
    record: Mapping[str, Any],
    held: Mapping[str, dict[str, Any]],
    conversation: ConversationFacts,
) -> Iterator[Problem]:
    """One record's turns and summary against the prompt and the conversation's summaries."""
    dropped = set(record["dropped"])
    for turn_id in sorted(dropped):
        for kind in (OriginKind.TURN, OriginKind.SUMMARY):
            if (origin := str(Origin(kind, turn_id))) in held:
                yield origin, "recorded as dropped by compression, yet in the prompt"
    if not set(record["recorded_to_memory"]) <= dropped:
        yield None, "the compression record says it kept in memory turns it did not drop"
    summary_id, digest = record.get("summary_id"), record.get("summary_sha256")
    if summary_id is None:
        return
    origin = str(Origin(OriginKind.SUMMARY, summary_id))
    if record["strategy"] != "summarize":
        yield origin, "a summary recorded by a compression that only drops turns"
    elif digest not in conversation.summaries.get(call.agent, set()):
        yield origin, "the compression record names a summary the model never wrote"
    elif origin in held and held[origin].get("sha256") != digest:
        yield origin, "the summary shown is not the one the compression record names"
