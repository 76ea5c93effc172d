"""Running a blocking function of the user's code off the event loop, under a deadline.

A run's own work happens on one event loop; a function the user provides (a ``run:
python:`` step, a tool written as a plain function) may block for as long as it likes. It
runs in a thread of its own, so the loop, and every other task, goes on meanwhile, and the
caller awaits it under a deadline. A Python thread cannot be stopped: one abandoned at its
deadline is a *daemon* that nothing waits for, so neither ``asyncio.run`` nor the process's
exit is held up by it (``asyncio.to_thread`` would make both wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["in_daemon_thread"]


def in_daemon_thread(function: Callable[..., Any], *args: Any, name: str) -> asyncio.Future[Any]:
    """``function(*args)`` in a new daemon thread; its outcome settles the returned future.

    The thread runs in a copy of the caller's context (its context variables). Await the
    future under a deadline (``asyncio.timeout``): past it the future is cancelled and the
    thread's eventual outcome is dropped.

    Args:
        function: What to call.
        *args: Its positional arguments.
        name: The thread's name (shown by debuggers and thread dumps).

    Returns:
        A future of the running loop, with ``function``'s return value or exception.

    Raises:
        RuntimeError: No event loop is running.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # cancelled at its deadline: nobody waits for it
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def target() -> None:
        try:
            value, error = context.run(function, *args), None
        except BaseException as exc:  # handed to the awaiting task, which reports it
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future
