import pytest

from clearance import ChatMessage, ConfigError
from clearance._state.conversation import ConversationMemory, Turn


def turns(n):
    return [
        Turn(id=f"t{i}", role="user" if i % 2 else "assistant", content=f"m{i}") for i in range(n)
    ]


def test_add_dedups_by_id_and_assigns_ids():
    mem = ConversationMemory(agent="a")
    assert len(mem.add(turns(3))) == 3
    assert mem.add(turns(4)) == [turns(4)[3]]
    added = mem.add(
        [ChatMessage(role="user", content="hi"), {"role": "assistant", "content": "yo"}]
    )
    assert len(added) == 2 and all(t.id.startswith("turn_") for t in added)
    assert len(mem) == 6
    assert mem.get_last_message().content == "yo"
    with pytest.raises(ConfigError):
        mem.add({"role": "tool", "content": "x"})


def test_get_messages_limit_and_truncate():
    mem = ConversationMemory(agent="a")
    assert mem.get_last_message() is None
    mem.add(turns(5))
    assert [t.id for t in mem.get_messages(2)] == ["t3", "t4"]
    assert mem.get_messages(0) == []
    assert len(mem.get_messages()) == 5
    removed = mem.truncate_to_size(2)
    assert [t.id for t in removed] == ["t0", "t1", "t2"]
    assert [t.id for t in mem.get_messages()] == ["t3", "t4"]
    assert mem.add(turns(1))  # a truncated id may come back
    with pytest.raises(ConfigError):
        mem.truncate_to_size(-1)


def test_returns_copies_never_internal_state():
    mem = ConversationMemory(agent="a")
    mem.add(turns(2))
    got = mem.get_messages()
    got.clear()
    state = mem.state_dict()
    state["turns"][0]["content"] = "tampered"
    state["turns"].append({"id": "x", "role": "user", "content": "x"})
    assert [t.content for t in mem.get_messages()] == ["m0", "m1"]
    with pytest.raises(AttributeError):
        mem.get_messages()[0].content = "x"  # turns are frozen


def test_state_dict_round_trip_and_owner_check():
    mem = ConversationMemory(agent="a")
    mem.add(turns(3))
    other = ConversationMemory(agent="a")
    other.load_state_dict(mem.state_dict())
    assert other.get_messages() == mem.get_messages()
    with pytest.raises(ConfigError, match="agent 'a'"):
        ConversationMemory(agent="b").load_state_dict(mem.state_dict())
