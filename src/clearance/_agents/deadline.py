"""`within`: await something for at most a number of seconds (``asyncio.timeout``'s semantics).

Every model call is awaited under a deadline (an agent's ``timeout_s`` defaults to ten
minutes). ``async with asyncio.timeout(...)`` makes a context-manager object and runs two
coroutines of its own per call; this arms and cancels one timer of the loop, which costs
about half as much, with the same outcome: the awaited code is cancelled when the time is
up and `TimeoutError` is raised in its place, unless the task was also cancelled from
outside (then `asyncio.CancelledError` goes on), and the task's count of cancel requests is
left as it was (``Task.uncancel``), so deadlines nest.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["within"]

T = TypeVar("T")


class _Expiry:
    """The timer's callback: cancels the task and notes that it did."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


async def within(awaitable: Awaitable[T], delay_s: float) -> T:
    """Await ``awaitable`` for at most ``delay_s`` seconds, in the current task.

    Args:
        awaitable: What to await (a coroutine is awaited in the current task).
        delay_s: Seconds from now; ``0`` or less expires at the loop's next iteration.

    Returns:
        What ``awaitable`` returned.

    Raises:
        TimeoutError: The time was up first (the awaited code was cancelled).
        asyncio.CancelledError: The task was cancelled from outside.
        RuntimeError: Not called from a task.
    """
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("within() must be awaited from a task")
    loop = task.get_loop()
    cancelling = task.cancelling()
    expiry = _Expiry(task)
    handle = loop.call_at(loop.time() + delay_s, expiry)
    try:
        result = await awaitable
    except BaseException as exc:
        handle.cancel()
        # As asyncio.timeout: our cancel request is withdrawn; TimeoutError only when no
        # other cancel request came meanwhile.
        if (
            expiry.fired
            and task.uncancel() <= cancelling
            and isinstance(exc, asyncio.CancelledError)
        ):
            raise TimeoutError from exc
        raise
    handle.cancel()
    if expiry.fired:  # expired as the awaited code finished: the request is withdrawn
        task.uncancel()
    return result
