"""Time, injected where timestamps matter so tests never sleep."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "utc_now"]

Clock = Callable[[], datetime]
"""A function returning the current time as a timezone-aware UTC datetime."""


def utc_now() -> datetime:
    """Return the current time, timezone-aware, in UTC."""
    return datetime.now(UTC)
