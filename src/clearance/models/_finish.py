"""A model server's ``finish_reason``: known values as sent, any other text kept short.

The finish reason is the server's text, recorded with the call, shown by ``inspect`` and the
run page, and put on a span. The values servers send (``"stop"``, ``"length"``,
``"tool_calls"``...) are a word; a hostile server could send megabytes there instead (or
escape sequences), and a PostgreSQL ledger's column holds 64 characters. Only ``"length"``
changes what is done with an answer (it is marked cut off), so an unknown reason is kept,
but as a person may read it: each control character or bidirectional override as its
escape (`clearance._core.shown_text.shown`), runs of whitespace as one space, at most
`MAX_FINISH_REASON_CHARS` characters (a longer one cut, ending ``...``).
"""

from __future__ import annotations

from clearance._core.shown_text import shown

__all__ = ["MAX_FINISH_REASON_CHARS", "bounded_finish_reason"]

MAX_FINISH_REASON_CHARS = 64
"""Most characters of a recorded finish reason (the ledger's ``calls.finish_reason`` column)."""


def bounded_finish_reason(reason: str | None) -> str | None:
    """``reason`` as recorded: unchanged when it is a short printable word, else made so.

    Args:
        reason: The finish reason a server (or a `ChatModel`) gave; ``None``: none given.

    Returns:
        ``None`` for ``None``; ``reason`` itself when it is at most `MAX_FINISH_REASON_CHARS`
        printable characters without whitespace (every real value); otherwise its control
        characters as escapes, its whitespace runs as one space, cut to
        `MAX_FINISH_REASON_CHARS` characters ending ``...`` when longer.
    """
    if reason is None:
        return None
    if len(reason) <= MAX_FINISH_REASON_CHARS and reason.isprintable() and " " not in reason:
        return reason
    # Cut before escaping (a megabyte is not escaped whole), then cut again after.
    text = " ".join(shown(reason[: 4 * MAX_FINISH_REASON_CHARS]).split())
    if len(text) <= MAX_FINISH_REASON_CHARS and len(reason) <= 4 * MAX_FINISH_REASON_CHARS:
        return text
    return text[: MAX_FINISH_REASON_CHARS - 3] + "..."
