"""`deadline`: `asyncio.timeout` for many concurrent calls, with one timer per event loop.

Every model call runs under a deadline (`AgentLimits.timeout_s`, 600 s by default). With
`asyncio.timeout`, each call pushes a timer onto the event loop's heap and cancels it when the
call returns; the heap orders its timers with a Python-level comparison, about ten per push
with hundreds of calls in flight. That was 2.7% of the instructions of a 1,000-task run (and
grows with the calls in flight), for timers that almost never fire.

Here the deadlines of one event loop share one timer, set for the earliest of them. A call
registers its deadline on entry and removes it on exit (a dict insert and pop); when the
timer fires, it cancels the tasks whose deadline has passed and is set again for the
earliest deadline left. A call that returns leaves the timer as it is: when it fires for a
deadline no call has any more, it is set again for the earliest left, if any. With one
timeout for every call, each new deadline is later than the timer, so the timer is set about
once per timeout. A call's deadline is kept to the event loop's clock resolution, as with
`asyncio.timeout`.

The semantics are `asyncio.timeout`'s (Python 3.11): on expiry the task is cancelled, and
on exit a cancellation that came only from the deadline becomes `TimeoutError`; a
cancellation from elsewhere (Ctrl-C, a sibling's failure) propagates as it is, also when the
deadline passed meanwhile.
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType

__all__ = ["deadline"]


class _Timer:
    """The deadlines of one event loop, and the one timer for the earliest of them."""

    __slots__ = ("__weakref__", "_handle", "_loop", "_when", "scopes")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # The loop and its timer's handle (which refers to the loop) weakly: `_TIMERS` keeps
        # this object while the loop lives, and it must not keep the loop alive. The loop's
        # own heap holds the handle until it fires.
        self._loop = weakref.ref(loop)
        self.scopes: dict[_Deadline, float] = {}  # each open scope -> its deadline
        self._handle: weakref.ref[asyncio.TimerHandle] | None = None
        self._when = 0.0  # when the handle fires (loop time)

    def add(self, scope: _Deadline, when: float) -> None:
        self.scopes[scope] = when
        # No handle pending (none set, fired, or dropped by a closed loop), or a later one.
        if self._handle is None or self._handle() is None or when < self._when:
            self._set(when)

    def _set(self, when: float) -> None:
        handle = self._handle() if self._handle is not None else None
        if handle is not None:
            handle.cancel()
        loop = self._loop()
        if loop is not None:
            self._when = when
            self._handle = weakref.ref(loop.call_at(when, self._fire))

    def _fire(self) -> None:
        # Set for the earliest deadline when it was set; that call may have returned since.
        self._handle = None
        loop = self._loop()
        if loop is None:  # pragma: no cover - a closed loop runs no callback
            return
        # As `BaseEventLoop._run_once`, a timer due within the clock's resolution is due now.
        due = loop.time() + getattr(loop, "_clock_resolution", 0.0)
        expired = [scope for scope, when in self.scopes.items() if when <= due]
        for scope in expired:
            del self.scopes[scope]
            scope.expire()
        if self.scopes:
            self._set(min(self.scopes.values()))


_TIMERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Timer] = weakref.WeakKeyDictionary()


class _Deadline:
    """The async context manager `deadline` returns (one use)."""

    __slots__ = ("_cancelling", "_delay", "_expired", "_task", "_timer")

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._expired = False
        self._task: asyncio.Task[object] | None = None
        self._timer: _Timer | None = None
        self._cancelling = 0

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline must be used inside a task")
        loop = task.get_loop()
        timer = _TIMERS.get(loop)
        if timer is None:
            timer = _TIMERS[loop] = _Timer(loop)
        self._task, self._timer = task, timer
        self._cancelling = task.cancelling()
        timer.add(self, loop.time() + self._delay)

    def expire(self) -> None:
        """Cancel the task (its deadline passed); its exit turns that into `TimeoutError`."""
        assert self._task is not None
        self._expired = True
        self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None and self._timer is not None
        if not self._expired:  # an expired scope was removed when it expired
            del self._timer.scopes[self]
        elif self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc


def deadline(delay: float) -> _Deadline:
    """An async context manager that cancels the task ``delay`` seconds after entry.

    ``async with deadline(delay):`` behaves as ``async with asyncio.timeout(delay):``.

    Args:
        delay: Seconds from entry (the event loop's clock) until the task is cancelled.

    Raises:
        TimeoutError: On exit, when the deadline passed and cancelled the task (and nothing
            else cancelled it).
        RuntimeError: Entered outside a task.
    """
    return _Deadline(delay)
