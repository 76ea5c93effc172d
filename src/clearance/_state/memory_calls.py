"""`memory_call`: one long-term-memory operation off the event loop, under a deadline.

`PersistentMemory` is synchronous (SQLAlchemy). Its database may be a PostgreSQL server
that accepts a query and never answers, or an SQLite file another process holds locked. A
run's tasks and a chat's turns reach it through `memory_call`, which runs the operation in a
daemon thread of its own (`in_daemon_thread`) and waits at most ``timeout_s``: the event
loop, and every other task, goes on meanwhile, and a hung operation fails its caller with a
`StoreError` instead of holding it forever. An abandoned thread is a daemon, so neither
``asyncio.run`` nor the process's exit waits for it (``asyncio.to_thread`` would make both
wait, which turned a deadline into a hang at the end of the run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

from clearance._core.daemon_threads import in_daemon_thread
from clearance._core.errors import StoreError
from clearance._core.names import check_seconds
from clearance._state.db import failure_cause

__all__ = [
    "DEFAULT_MEMORY_TIMEOUT_S",
    "MAX_MEMORY_TIMEOUT_S",
    "check_memory_timeout",
    "memory_call",
]

DEFAULT_MEMORY_TIMEOUT_S = 30.0
"""Deadline of one recall or record, in seconds."""
MAX_MEMORY_TIMEOUT_S = 86_400.0
"""Longest deadline accepted (a day)."""

T = TypeVar("T")


def check_memory_timeout(timeout_s: object, *, field: str) -> float:
    """``timeout_s`` as seconds, checked: a number above 0 and at most a day.

    Raises:
        ConfigError: Not a number (``True`` and NaN included), not above 0, or above
            `MAX_MEMORY_TIMEOUT_S`; the message names ``field``.
    """
    return check_seconds(field, timeout_s, most=MAX_MEMORY_TIMEOUT_S)


async def memory_call(what: str, function: Callable[[], T], *, timeout_s: float, where: str) -> T:
    """``function()`` in a daemon thread, awaited for at most ``timeout_s`` seconds.

    Args:
        what: What the operation is, for messages (``"recall for task 'a1'"``).
        function: The blocking operation.
        timeout_s: Its deadline in seconds.
        where: The database, for messages (``"the memory store at sqlite:///m.db"``,
            password masked).

    Returns:
        What ``function`` returned.

    Raises:
        StoreError: The deadline passed (``"<what>: <where> did not answer within 30 s"``;
            the thread is abandoned), or the operation failed with a `StoreError`, a
            database error or an `OSError` (``"<what>: ..."``).
    """
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            return await in_daemon_thread(function, name="clearance-memory")  # type: ignore[no-any-return]
    except TimeoutError as exc:
        if not deadline.expired():  # the driver's own timeout: a failure of the store
            raise StoreError(f"{what}: {where} failed: {failure_cause(exc)}") from exc
        raise StoreError(f"{what}: {where} did not answer within {timeout_s:g} s") from None
    except StoreError as exc:
        raise StoreError(f"{what}: {exc}") from exc
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(f"{what}: {where} failed: {failure_cause(exc)}") from exc
