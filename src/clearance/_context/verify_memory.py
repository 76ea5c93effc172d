"""``clearance verify``'s checks of memory items: recalled by their task, read by their agent.

A task's clearance admits its assignee's memory scopes, but a run puts in a task's prompt
only the records the task recalled (`RunMemory.recall`, which notes each recall in the ledger
as a ``memory_recall`` tool call of step 0), never other records of those scopes: an agent
with ``recall: 0`` sees none. A memory group's scope is its name, and another team sharing
the memory database may declare a group of that name with other members: a group's record
in a prompt must be by a member of the group the run declared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from clearance._context.answers import mark_answer
from clearance._context.memory_items import author_of_title, memory_title, scope_of_title
from clearance._context.render import one_line
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.vocabulary import EventKind, OriginKind, PromptKind
from clearance._state.conversation import CHAT_FORMAT, USER_AUTHOR
from clearance._state.ledger import CallRecord, EventRecord, ToolCallRecord

if TYPE_CHECKING:
    from clearance._state.memory import MemoryRecord

__all__ = [
    "ConversationFacts",
    "check_conversation_history",
    "check_memory_item",
    "not_recalled",
    "recalled_memories",
]

Problem = tuple[str | None, str]


class _Facts(Protocol):
    """What the checks read of a run's facts (`RunFacts`)."""

    memory_groups: dict[str, list[str]]
    memories: Callable[[str], MemoryRecord | None] | None


_RECALLED = "recalled: "
"""How `RunMemory.recall` notes a recall: ``recalled: <id>, <id>`` (or ``recalled: none``)."""


def recalled_memories(tool_calls: Iterable[ToolCallRecord]) -> dict[str, frozenset[str]]:
    """The ids of the memory records each subject (``task:<id>``) recalled.

    From its ``memory_recall`` notes: tool calls of step 0 (no model answer asks for a
    step-0 call) that did not fail; every note of a subject counts (a resumed run recalls
    again).
    """
    found: dict[str, set[str]] = {}
    for call in tool_calls:
        if call.name != "memory_recall" or call.step != 0 or call.is_error:
            continue
        ids = found.setdefault(call.subject, set())
        text = call.result
        if text.startswith(_RECALLED) and text != f"{_RECALLED}none":
            ids.update(text[len(_RECALLED) :].split(", "))
    return {subject: frozenset(ids) for subject, ids in found.items()}


def not_recalled(
    subject: str, ref: str, recalled: Mapping[str, frozenset[str]]
) -> Iterator[Problem]:
    """A finding when memory record ``ref`` is in ``subject``'s prompt but was never recalled."""
    if ref not in recalled.get(subject, frozenset()):
        task = subject.partition(":")[2]
        yield f"memory:{ref}", f"the record was not recalled for task {task!r}"


def check_memory_item(
    origin: str, ref: str, item: dict[str, Any], facts: _Facts
) -> Iterator[Problem]:
    """A memory item is a record its prompt's agent reads, and (given the store) the stored one.

    A group's record must be by a member of the group the run declared: another team may
    declare a group of that name with other members, and its records are not this group's.
    """
    title = str(item.get("title"))
    scope, author = scope_of_title(title), author_of_title(title)
    if scope is not None and scope.startswith("group:"):
        group = scope.partition(":")[2]
        if author not in facts.memory_groups.get(group, ()):
            reason = f"the record is by {author!r}, who is not a member of memory group {group!r}"
            yield origin, reason
            return
    if facts.memories is not None:
        digest = item.get("sha256")
        record = facts.memories(ref)
        if record is None:
            yield origin, "no such record in the memory store"
        elif record.scope != scope_of_title(title):
            yield origin, f"the record is in scope {record.scope!r}, not the one its title names"
        elif digest != sha256_text(record.content):
            yield origin, "the content is not the stored memory record"
        elif title != (stored := one_line(memory_title(record))):
            yield origin, f"the record is titled {stored!r} in the memory store, not {title!r}"


_SUMMARY_AUTHOR = "summary of earlier turns"
"""The author a compression's summary turn is titled with (`ContextWindowMonitor`)."""


@dataclass(frozen=True, slots=True)
class ConversationFacts:
    """What a chat's recorded calls say of its conversation, indexed once per run.

    Attributes:
        first: ``(agent, origin)`` of each turn or summary to ``(sha256, title)`` as the
            first conversation (or summarizing) prompt that held it showed it.
        summaries: Per agent, the digests of the summaries its summarizing calls wrote.
        previous: Per conversation call id, the turn and summary origins of the agent's
            conversation prompt recorded before it (none for its first).
        answers: Per agent, the digests of the answers its conversation calls gave, as a
            chat keeps them (verbatim, or marked when cut off: `mark_answer`).
        recorded: Whether the chat recorded each message of the user (``chat_format`` 1 or
            later): only then is a user turn held to one.
        messages: Per ``(agent, turn id)``, each ``user_message`` event's ``(sha256, n)``:
            its digest and its place among the run's user messages (0 for the first).
    """

    first: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict)
    summaries: dict[str, set[str]] = field(default_factory=dict)
    previous: dict[str, frozenset[str]] = field(default_factory=dict)
    answers: dict[str, set[str]] = field(default_factory=dict)
    recorded: bool = False
    messages: dict[tuple[str, str], list[tuple[Any, int]]] = field(default_factory=dict)

    @classmethod
    def of(
        cls, calls: Sequence[CallRecord], events: Sequence[EventRecord] = (), chat_format: int = 0
    ) -> ConversationFacts:
        """Index ``calls`` and the ``user_message`` ``events`` (each in recorded order).

        ``chat_format`` is the run's recorded one (0 for none): from `CHAT_FORMAT` 1 on, a
        chat records each message of the user.
        """
        facts = cls(recorded=chat_format >= CHAT_FORMAT)
        for event in events:
            subject = Subject.parse(event.subject)
            if event.kind == EventKind.USER_MESSAGE and subject.kind == PromptKind.CONVERSATION:
                key = (subject.id, str(event.data.get("turn_id")))
                place = (event.data.get("sha256"), len(facts.messages))
                facts.messages.setdefault(key, []).append(place)
        last: dict[str, frozenset[str]] = {}  # per agent, its latest conversation prompt's
        for call in calls:
            kind = Subject.parse(call.subject).kind
            if kind not in (PromptKind.CONVERSATION, PromptKind.SUMMARY):
                continue
            items = call.manifest.get("items")
            held: set[str] = set()
            for item in items[1:] if isinstance(items, list) else ():
                if not isinstance(item, dict):
                    continue
                origin = str(item.get("origin"))
                if Origin.parse(origin).kind in (OriginKind.TURN, OriginKind.SUMMARY):
                    value = (item.get("sha256"), item.get("title"))
                    facts.first.setdefault((call.agent, origin), value)
                    held.add(origin)
            if kind == PromptKind.CONVERSATION:
                facts.previous[call.call_id] = last.get(call.agent, frozenset())
                last[call.agent] = frozenset(held)
            if kind == PromptKind.CONVERSATION and call.response is not None and not call.error:
                marked = mark_answer(call.response, finish_reason=call.finish_reason).text
                given = {sha256_text(call.response), sha256_text(marked)}
                facts.answers.setdefault(call.agent, set()).update(given)
            if kind == PromptKind.SUMMARY and call.response is not None and not call.error:
                # The monitor keeps it stripped; a cut-off one with its marks (`mark_answer`).
                marked = mark_answer(call.response, finish_reason=call.finish_reason).text
                written = {sha256_text(call.response.strip()), sha256_text(marked.strip())}
                facts.summaries.setdefault(call.agent, set()).update(written)
        return facts


def check_conversation_history(
    call: CallRecord, items: list[dict[str, Any]], conversation: ConversationFacts
) -> Iterator[Problem]:
    """A conversation prompt's turns and summaries are the conversation's own.

    A turn or summary shows what the first prompt that held it showed (a turn never changes
    while it is kept), and a summary is one the agent's summarizing calls wrote. A turn of a
    conversation prompt is an answer the agent gave or, in a chat that records the user's
    messages, one of them, in the order received (and no prompt's newest message of the user
    is older than its previous prompt's). A summarizing prompt's turns are held to the same
    (in a chat that records the user's messages): it may hold nothing the agent's
    conversation did not.
    """
    kind = Subject.parse(call.subject).kind
    shown: list[int] = []  # the places of the user's messages the prompt shows, in order
    for item in items[1:]:
        origin = str(item.get("origin"))
        parsed = Origin.parse(origin)
        if parsed.kind not in (OriginKind.TURN, OriginKind.SUMMARY):
            continue
        value = (item.get("sha256"), item.get("title"))
        if parsed.kind == OriginKind.SUMMARY and (
            item.get("sha256") not in conversation.summaries.get(call.agent, set())
            or item.get("title") != one_line(f"{_SUMMARY_AUTHOR} ({parsed.id})")
        ):
            yield origin, "not a summary the model wrote in this conversation"
        elif conversation.first.get((call.agent, origin), value) != value:
            yield origin, "the block is not the turn an earlier prompt of the conversation showed"
        elif parsed.kind != OriginKind.TURN:
            continue
        elif kind == PromptKind.SUMMARY and not conversation.recorded:
            continue  # a chat recorded before: its summarizing prompts verify as they did
        elif conversation.recorded and (
            (call.agent, parsed.id) in conversation.messages or _is_titled(item, USER_AUTHOR)
        ):
            yield from _check_user_turn(call.agent, origin, item, conversation, shown)
        else:
            yield from _check_turn(call, origin, item, conversation)
    if conversation.recorded and kind == PromptKind.CONVERSATION:
        before = [
            places[0][1]
            for o in conversation.previous.get(call.call_id, ())
            if (places := conversation.messages.get((call.agent, Origin.parse(o).id)))
        ]
        if max(shown, default=-1) < max(before, default=-1):
            reason = "the prompt's newest message of the user is older than its previous prompt's"
            yield None, reason


def _is_titled(item: Mapping[str, Any], author: str) -> bool:
    """Whether a turn's item is titled as ``author``'s turn (``<author> (<id>)``)."""
    origin = Origin.parse(str(item.get("origin")))
    return item.get("title") == one_line(f"{author} ({origin.id})")


def _check_user_turn(
    agent: str,
    origin: str,
    item: Mapping[str, Any],
    conversation: ConversationFacts,
    shown: list[int],
) -> Iterator[Problem]:
    """A user turn is a message the user sent (a ``user_message`` event), in its place.

    ``shown`` holds the places of the user's messages the prompt showed before this turn;
    this one's is added.
    """
    places = conversation.messages.get((agent, Origin.parse(origin).id))
    if not places:
        reason = "the turn is titled as the user's, but it is not a message the user sent"
        yield origin, f"{reason} in this conversation"
        return
    (digest, place), *others = places
    if others:
        yield origin, "the user's message is recorded more than once"
    elif not _is_titled(item, USER_AUTHOR):
        yield origin, "the user's message is titled as another's turn"
    elif item.get("sha256") != digest:
        yield origin, "the turn is not the message the user sent (its user_message record)"
    if shown and place < shown[-1]:
        yield origin, "the user's message is shown after a message the user sent later"
    shown.append(max(place, shown[-1]) if shown else place)


def _check_turn(
    call: CallRecord, origin: str, item: Mapping[str, Any], conversation: ConversationFacts
) -> Iterator[Problem]:
    """A turn of a conversation or summarizing prompt: a message of the user or an answer.

    The agent's turns are answers its conversation calls gave (as the chat keeps them). The
    user's messages are checked by `_check_user_turn` in a chat that records them; in one
    recorded before (no ``chat_format``), they are in the prompts alone and not checked.
    """
    if _is_titled(item, USER_AUTHOR):
        return
    if not _is_titled(item, call.agent):
        yield origin, f"the turn is titled neither as the user's nor as {call.agent!r}'s"
    elif item.get("sha256") not in conversation.answers.get(call.agent, set()):
        yield origin, "the agent's turn is not an answer the model gave in this conversation"
