"""Which HTTP answers are worth retrying, and how long the server asked us to wait."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

__all__ = ["TRANSIENT_STATUSES", "is_transient_status", "parse_retry_after"]

TRANSIENT_STATUSES = frozenset({408, 409, 429})
"""4xx statuses that a retry may cure (timeout, conflict, rate limit); every 5xx is too."""


def is_transient_status(status: int) -> bool:
    """Whether a request that got HTTP ``status`` may succeed if retried (429, 5xx...)."""
    return status in TRANSIENT_STATUSES or 500 <= status <= 599


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait before a retry, from ``Retry-After`` (or ``retry-after-ms``).

    Args:
        headers: Response headers (looked up case-insensitively when the mapping is not).
        now: The current POSIX time in seconds, for an HTTP-date value; ``None`` means
            ``time.time()``.

    Returns:
        Seconds (0 or more), or ``None`` when no header is present or it cannot be parsed.
        ``retry-after-ms`` (OpenAI) is preferred over ``Retry-After``, which may hold
        seconds or an HTTP date (RFC 9110, section 10.2.3).
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
        return max(seconds, 0.0)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
