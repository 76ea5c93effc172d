"""Marking model answers that were cut off at the output limit.

An answer the model finished by itself (any ``finish_reason`` but ``"length"``) is kept
verbatim, byte for byte, whatever it holds: repeated lines are often the answer (three
functions that each end in ``return None``, a pretty-printed JSON array's ``},`` lines).

A completion that stopped at the output limit (``finish_reason == "length"``) is kept with
`TRUNCATED_MARK` appended, so no dependent, ``inspect`` or report takes it for a whole
answer. If such an answer ends in a loop (the same unit of text, from a word part to a few
lines, repeated to the cut-off: a small model's typical failure), the loop is cut after its
first copy and `REPEAT_MARK` is appended too. Only the tail is touched: everything before
the loop is kept as the model wrote it.

Every path that keeps a model's answer (a task, a delegate, a child, a clarification, the
synthesis) keeps it through `kept_answer`, which records an ``answer_marked`` event of the
call's subject whenever it adds marks, so ``inspect`` shows it and ``verify`` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from clearance._core.vocabulary import EventKind

if TYPE_CHECKING:
    from clearance._state.ledger import Recorder

__all__ = [
    "REPEAT_MARK",
    "TRUNCATED_MARK",
    "MarkedAnswer",
    "kept_answer",
    "mark_answer",
    "trailing_loop",
]

TRUNCATED_MARK = "[cut off: this answer reached its output limit and is incomplete]"
"""Appended (after a blank line) to an answer that stopped at the output limit."""
REPEAT_MARK = "[repetition removed: the model repeated itself]"
"""Appended (after a blank line) to a cut-off answer whose trailing loop was cut."""

MAX_LOOP_UNIT = 400
"""Longest unit of text (characters) looked for as a trailing loop."""
MIN_LOOP_COPIES = 3
"""Fewest copies of a unit at the end of a cut-off answer that make a loop."""
MIN_LOOP_CHARS = 24
"""Fewest characters a trailing loop spans (so ``hahaha`` or ``...`` is not one)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MarkedAnswer:
    """An answer with its marks.

    Attributes:
        text: The text to keep (marks appended).
        truncated: It stopped at the output limit.
        repetitive: It stopped at the output limit inside a loop, which was cut.
    """

    text: str
    truncated: bool
    repetitive: bool


def _periodic_tail(text: str, unit: int) -> int:
    """Length of the longest suffix of ``text`` with period ``unit`` (at least ``unit``)."""
    n = len(text)
    # Largest k with text[n-unit-k : n-unit] == text[n-k : n]: monotone in k, so bisect.
    low, high = 0, n - unit
    while low < high:
        k = (low + high + 1) // 2
        if text[n - unit - k : n - unit] == text[n - k :]:
            low = k
        else:
            high = k - 1
    return low + unit


def trailing_loop(text: str) -> int | None:
    """Where the second copy of a loop running to the end of ``text`` starts, or ``None``.

    A loop is the shortest unit (1 to `MAX_LOOP_UNIT` characters) that repeats at least
    `MIN_LOOP_COPIES` times up to the end of the text (the last copy may be partial: the
    output limit cuts anywhere), spanning at least `MIN_LOOP_CHARS` characters. A unit that
    spans a line break is kept to the end of a line.

    Args:
        text: A cut-off answer.

    Returns:
        The index at which to cut to keep one copy of the loop, or ``None`` for no loop.
    """
    n = len(text)
    for unit in range(1, min(MAX_LOOP_UNIT, n // MIN_LOOP_COPIES) + 1):
        span = _periodic_tail(text, unit)
        if span >= unit * MIN_LOOP_COPIES and span >= MIN_LOOP_CHARS:
            cut = n - span + unit
            # The loop may start mid-line (its text before a line break can also end the
            # line before it): a loop of lines keeps its first copy to the end of a line.
            line_end = text.find("\n", cut, cut + unit)
            return cut if line_end < 0 else line_end
    return None


def mark_answer(text: str, *, finish_reason: str | None) -> MarkedAnswer:
    """Keep an answer as its dependents will receive it (see the module docstring).

    Args:
        text: The model's answer, as received.
        finish_reason: The call's finish reason; only ``"length"`` (cut off at the output
            limit) changes anything.

    Returns:
        For a finished answer, ``text`` itself, unmarked. For a cut-off one: the answer less
        surrounding whitespace and any trailing loop after its first copy, then a blank
        line and the marks (`REPEAT_MARK` if a loop was cut, then `TRUNCATED_MARK`).
    """
    if finish_reason != "length":
        return MarkedAnswer(text=text, truncated=False, repetitive=False)
    body = text.strip()
    cut = trailing_loop(body)
    if cut is not None:
        body = body[:cut].rstrip()
    marks = [REPEAT_MARK] if cut is not None else []
    marks.append(TRUNCATED_MARK)
    return MarkedAnswer(
        text="\n\n".join([body, *marks] if body else marks),
        truncated=True,
        repetitive=cut is not None,
    )


def kept_answer(
    recorder: Recorder, run_id: str, subject: str, text: str, *, finish_reason: str | None
) -> str:
    """``text`` as kept (`mark_answer`), with an ``answer_marked`` event when marks were added.

    Args:
        recorder: Where the event is recorded.
        run_id: The run.
        subject: The subject of the call that answered (``task:<id>``,
            ``delegation:<tool call id>``, ``child:<id>``, ``clarification:<task id>``...).
        text: The model's answer, as received.
        finish_reason: The call's finish reason.

    Returns:
        The text to keep: ``text`` itself for a finished answer, else the marked one.
    """
    marked = mark_answer(text, finish_reason=finish_reason)
    if marked.truncated or marked.repetitive:
        recorder.record_event(run_id, EventKind.ANSWER_MARKED, subject, {
            "truncated": marked.truncated, "repetitive": marked.repetitive,
        })  # fmt: skip
    return marked.text
