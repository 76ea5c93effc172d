"""Time, injected where timestamps matter so tests never sleep."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "utc_iso_text", "utc_now"]

Clock = Callable[[], datetime]
"""A function returning the current time as a timezone-aware UTC datetime."""


def utc_now() -> datetime:
    """Return the current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


_ISO_TEXTS: dict[datetime, str] = {}
"""`utc_iso_text`'s memo: a plain dict keyed by the time itself (`functools.lru_cache` would make
a tuple key per time, an object the garbage collector counts and walks)."""

_MEMO_SIZE = 4096
"""The times the memo keeps; it is emptied when full (a run's times are converted soon after
they are read)."""


def utc_iso_text(value: datetime) -> str:
    """``value.isoformat(timespec="microseconds")`` of an aware UTC time, memoized.

    That is ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00``, 32 characters. The ledger converts each
    time it records more than once (for a record's digest and for its column; a task's start
    with each of its states): each is converted once.

    Args:
        value: A `datetime` whose ``tzinfo`` is `datetime.UTC` (what `utc_now` returns).
    """
    text = _ISO_TEXTS.get(value)
    if text is None:
        if len(_ISO_TEXTS) >= _MEMO_SIZE:
            _ISO_TEXTS.clear()
        text = _ISO_TEXTS[value] = value.isoformat(timespec="microseconds")
    return text
