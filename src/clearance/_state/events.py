"""`EventBus`: in-process publish/subscribe with topics and correlation ids."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from clearance._core.clock import Clock, utc_now
from clearance._core.errors import LimitExceeded
from clearance._core.ids import new_id

__all__ = ["Event", "EventBus", "EventHandler"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """One published event.

    Attributes:
        topic: What kind of event (``"spawn.request"``...).
        correlation_id: Ties a reply to its request.
        payload: JSON-ready fields (read-only).
        event_id: Unique id of the event.
        created_at: When it was published (aware UTC).
    """

    topic: str
    correlation_id: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    event_id: str = ""
    created_at: datetime | None = None


EventHandler = Callable[[Event], None]
"""A subscriber: called synchronously for each event of its topic; start tasks for slow work."""


class EventBus:
    """Publish/subscribe within one process.

    Recent events are kept (``max_history``) so `wait_for` also finds a reply published
    before the wait began.

    Args:
        clock: Timestamps of events.
        max_history: How many recent events to keep for late waiters.
    """

    def __init__(self, *, clock: Clock = utc_now, max_history: int = 1000) -> None:
        self._clock = clock
        self._handlers: dict[str, list[EventHandler]] = {}
        self._history: deque[Event] = deque(maxlen=max_history)
        self._waiters: dict[tuple[str, str], list[asyncio.Future[Event]]] = {}

    def subscribe(self, topic: str, handler: EventHandler) -> Callable[[], None]:
        """Call ``handler`` for every event of ``topic``; returns a function that unsubscribes."""
        self._handlers.setdefault(topic, []).append(handler)

        def unsubscribe() -> None:
            handlers = self._handlers.get(topic, [])
            if handler in handlers:
                handlers.remove(handler)

        return unsubscribe

    def publish(
        self, topic: str, payload: Mapping[str, Any], *, correlation_id: str | None = None
    ) -> Event:
        """Publish an event: wake its waiters, then call its subscribers in order.

        Args:
            topic: The topic.
            payload: JSON-ready fields (copied).
            correlation_id: Ties replies to a request; ``None`` makes a new one.

        Returns:
            The event.
        """
        event = Event(
            topic=topic,
            correlation_id=correlation_id or new_id("corr"),
            payload=MappingProxyType(dict(payload)),
            event_id=new_id("evt"),
            created_at=self._clock(),
        )
        self._history.append(event)
        for future in self._waiters.pop((topic, event.correlation_id), []):
            if not future.done():
                future.set_result(event)
        for handler in list(self._handlers.get(topic, [])):
            handler(event)
        return event

    def history(self, topic: str | None = None) -> tuple[Event, ...]:
        """Recent events, oldest first, optionally of one topic."""
        return tuple(e for e in self._history if topic is None or e.topic == topic)

    async def wait_for(self, topic: str, correlation_id: str, timeout_s: float) -> Event:
        """Wait for the event of ``topic`` with ``correlation_id`` (past or future).

        Args:
            topic: The topic.
            correlation_id: The correlation id to match.
            timeout_s: Seconds to wait at most.

        Raises:
            LimitExceeded: Nothing arrived in time (``limit="timeout_s"``, ``subject``
                ``"<topic>:<correlation id>"``).
        """
        for event in reversed(self._history):
            if event.topic == topic and event.correlation_id == correlation_id:
                return event
        future: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
        key = (topic, correlation_id)
        self._waiters.setdefault(key, []).append(future)
        t0 = time.monotonic()
        try:
            return await asyncio.wait_for(future, max(0.0, timeout_s))
        except TimeoutError as exc:
            raise LimitExceeded("timeout_s", value=round(time.monotonic() - t0, 3),
                                maximum=timeout_s,
                                subject=f"{topic}:{correlation_id}") from exc  # fmt: skip
        finally:
            waiters = self._waiters.get(key, [])
            if future in waiters:
                waiters.remove(future)
            if not waiters:
                self._waiters.pop(key, None)
