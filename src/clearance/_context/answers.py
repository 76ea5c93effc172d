"""Marking model answers that were cut off or that loop.

An answer that needs neither mark is kept verbatim. A completion that stopped at the output
limit (``finish_reason == "length"``) is kept, with
`TRUNCATED_MARK` appended, so no dependent, ``inspect`` or report takes it for a whole answer.
A completion that repeats itself (the same line three times or more; and, in a cut-off
answer, a word part or short phrase over and over: a small model's typical failure) has the
repeats removed and `REPEAT_MARK` appended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["REPEAT_MARK", "TRUNCATED_MARK", "MarkedAnswer", "mark_answer", "remove_repeats"]

TRUNCATED_MARK = "[cut off: this answer reached its output limit and is incomplete]"
"""Appended (after a blank line) to an answer that stopped at the output limit."""
REPEAT_MARK = "[repetition removed: the model repeated itself]"
"""Appended (after a blank line) to an answer whose repeated lines or phrases were removed."""

_WORD = re.compile(r"\S+")
_CHAR_LOOP = re.compile(r"([A-Za-z_]{2,24}?)\1{5,}")
_MIN_LINE_REPEATS = 3
_MIN_PHRASE_REPEATS = 4


@dataclass(frozen=True, kw_only=True, slots=True)
class MarkedAnswer:
    """An answer with its marks.

    Attributes:
        text: The text to keep (marks appended).
        truncated: It stopped at the output limit.
        repetitive: Repeats were removed.
    """

    text: str
    truncated: bool
    repetitive: bool


def _phrase_loop(words: list[str]) -> int | None:
    """Index where a phrase of 1 to 8 words starts repeating to the end (4+ times), or None."""
    n = len(words)
    for size in range(1, 9):
        repeats = 1
        i = n - 2 * size
        while i >= 0 and words[i : i + size] == words[n - size : n]:
            repeats += 1
            i -= size
        if repeats >= _MIN_PHRASE_REPEATS:
            return i + 2 * size  # keep one copy of the phrase
    return None


def remove_repeats(text: str, *, loops: bool = True) -> tuple[str, bool]:
    """Drop repeats: lines seen 3+ times, word-part loops and a trailing phrase loop.

    A looping line is kept at its first place only; a word part repeated 6+ times in a row
    (``_list_list_list...``) keeps one copy; a phrase of 1 to 8 words repeated 4+ times at
    the end keeps one copy.

    Args:
        text: The answer.
        loops: Also remove word-part and phrase loops (done for answers that ran to the
            output limit: a loop does not stop by itself).

    Returns:
        ``(text, changed)``.
    """
    lines = text.splitlines()
    seen: dict[str, int] = {}
    for line in lines:
        key = line.strip()
        if key:
            seen[key] = seen.get(key, 0) + 1
    looping = {k for k, count in seen.items() if count >= _MIN_LINE_REPEATS}
    kept: list[str] = []
    emitted: set[str] = set()
    for line in lines:
        key = line.strip()
        if key in looping:
            if key in emitted:
                continue
            emitted.add(key)
        kept.append(line)
    changed = len(kept) != len(lines)
    body = "\n".join(kept)
    if not loops:
        return body.rstrip(), changed
    body, count = _CHAR_LOOP.subn(r"\1", body)
    changed = changed or count > 0
    words = _WORD.findall(body)
    cut = _phrase_loop(words)
    if cut is not None:
        # Rebuild the text up to the start of the loop's second copy.
        spans = [m.span() for m in _WORD.finditer(body)]
        body = body[: spans[cut - 1][1]] if cut > 0 else ""
        changed = True
    return body.rstrip(), changed


def mark_answer(text: str, *, finish_reason: str | None) -> MarkedAnswer:
    """`remove_repeats`, then append the marks that apply (see the module docstring).

    An answer that needs no mark is kept verbatim (surrounding whitespace included), so a
    dependent receives exactly what the model answered. A marked answer is the answer with
    surrounding whitespace and the repeats removed, then a blank line and the marks.
    """
    truncated = finish_reason == "length"
    body, repetitive = remove_repeats(text.strip(), loops=truncated)
    if not truncated and not repetitive:
        return MarkedAnswer(text=text, truncated=False, repetitive=False)
    marks = [m for m, on in ((REPEAT_MARK, repetitive), (TRUNCATED_MARK, truncated)) if on]
    if marks:
        body = "\n\n".join([body, *marks]) if body else "\n\n".join(marks)
    return MarkedAnswer(text=body, truncated=truncated, repetitive=repetitive)
