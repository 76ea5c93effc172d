"""Resuming a run with many messages: restoring them onto the bus takes linear time."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from clearance._state.messages import Message, MessageBus

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _message(n: int) -> Message:
    return Message(id=f"msg-{n}", sender="a", recipient="b", content="x", created_at=AT)


def test_twenty_thousand_messages_restore_in_linear_time():
    """A team file of 1 MiB holds about this many; each restore used to scan the whole bus."""
    bus = MessageBus()
    started = time.perf_counter()
    for n in range(1, 20_001):
        bus.restore(_message(n))
    assert time.perf_counter() - started < 5.0  # was about a minute: quadratic
    assert len(bus.all()) == 20_000
    assert bus.send("a", "b", "next").id == "msg-20001"


def test_a_restored_id_twice_is_refused_and_numbering_follows_the_highest():
    bus = MessageBus()
    bus.send("a", "b", "one")  # msg-1
    bus.restore(_message(7))
    with pytest.raises(ValueError, match="already on the bus"):
        bus.restore(_message(7))
    with pytest.raises(ValueError, match="already on the bus"):
        bus.restore(_message(1))
    assert bus.send("a", "b", "next").id == "msg-8"
    assert [m.id for m in bus.for_agent("b")] == ["msg-1", "msg-7", "msg-8"]
