"""`check_limit`: the bounds of a read's row limit (``LIMIT``), checked before any query."""

from __future__ import annotations

from clearance._core.errors import ConfigError

__all__ = ["MAX_ROWS", "check_limit"]

MAX_ROWS = 10_000
"""Most rows one listing returns (runs, store entries). A driver refuses an integer past
its column type (SQLite: 64 bits) with its own error; a listing that large is a mistake."""


def check_limit(limit: int, *, field: str = "limit") -> None:
    """Refuse a row limit that is not an integer from 1 to `MAX_ROWS`.

    Raises:
        ConfigError: ``limit`` is out of range or not an integer (``field`` names it).
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ROWS:
        raise ConfigError(f"must be an integer from 1 to {MAX_ROWS}, got {limit!r}", field=field)
