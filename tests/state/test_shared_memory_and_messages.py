import pytest

from clearance import MessageBus
from clearance._state.shared_memory import SharedMemory


def test_get_summary_filters_by_task_ids_and_groups_by_agent():
    mem = SharedMemory(summary_chars=20)
    mem.write(task_id="a", agent="alice", content="result of a")
    mem.write(task_id="b", agent="bob", content="result of b " * 10)
    mem.write(task_id="c", agent="alice", content="boom", kind="failure")
    full = mem.get_summary()
    assert "- alice:" in full and "- bob:" in full
    assert "result of a" in full and "boom" in full
    assert "more characters]" in full  # long entries are cut visibly
    only_a = mem.get_summary(task_ids=["a"])
    assert "result of a" in only_a
    assert "bob" not in only_a and "boom" not in only_a
    assert mem.get_summary(task_ids=[]) == ""


def test_messages_reach_only_their_addressees():
    bus = MessageBus()
    m1 = bus.send("alice", "bob", "for bob")
    m2 = bus.broadcast("carol", "for everyone")
    bus.send("bob", "alice", "for alice")
    assert [m.id for m in bus.for_agent("bob")] == [m1.id, m2.id]
    assert [m.content for m in bus.for_agent("carol")] == []  # not its own broadcast
    assert [m.content for m in bus.for_agent("alice")] == ["for everyone", "for alice"]
    assert [m.content for m in bus.for_agent("dave")] == ["for everyone"]
    assert len({m.id for m in bus.all()}) == 3


def test_summary_follows_the_given_task_order_not_the_write_order():
    from clearance._state.shared_memory import SharedMemory

    one, two = SharedMemory(), SharedMemory()
    for task_id in ("a", "b", "c"):
        one.write(task_id=task_id, agent="x", content=f"result {task_id}")
    for task_id in ("c", "a", "b"):
        two.write(task_id=task_id, agent="x", content=f"result {task_id}")
    order = iter(["a", "b", "c"])  # any iterable, a one-shot one included
    assert one.get_summary(["a", "b", "c"]) == two.get_summary(order)
    assert two.get_summary().index("result c") < two.get_summary().index("result a")


def test_restored_messages_keep_their_ids_and_numbering_continues():
    from datetime import UTC, datetime

    from clearance import Message, MessageBus

    bus = MessageBus()
    when = datetime(2026, 1, 1, tzinfo=UTC)
    bus.restore(Message(id="msg-7", sender="a", recipient="b", content="old", created_at=when))
    assert bus.all()[0].created_at == when
    assert bus.send("b", "a", "new").id == "msg-8"
    with pytest.raises(ValueError, match="msg-7"):
        bus.restore(Message(id="msg-7", sender="a", recipient="b", content="x", created_at=when))
