import pytest

from clearance import Agent, ConfigError, ContextBuilder, LimitExceeded
from clearance._agents.caller import ModelCaller
from clearance.memory import ContextWindowMonitor, ConversationMemory, PersistentMemory, Turn
from clearance.testing import FunctionModel, ScriptedModel
from clearance.tokens import counter_for

AGENT = Agent(name="alice", instructions="You are Alice.")


def summarizer(model):
    return ModelCaller().summarizer(AGENT, model)


WINDOW = 1000


def builder():
    return ContextBuilder(count_tokens=counter_for("openai:gpt-4o"))


def turn(i):
    role = "user" if i % 2 == 0 else "assistant"
    return Turn(id=f"t{i:03d}", role=role, content=f"Turn {i}: " + "word " * 30, author=role)


def fill_until_trigger(monitor, conv):
    """Add turns one by one; the monitor must stay quiet until the trigger is reached."""
    i = 0
    while True:
        conv.add(turn(i))
        i += 1
        usage = monitor.measure(AGENT, conv.get_messages())
        if usage >= monitor.trigger_tokens:
            return usage
        assert usage / WINDOW < 0.75


@pytest.mark.parametrize("strategy", ["drop_oldest", "summarize"])
async def test_compression_triggers_at_threshold_and_lands_under_target(strategy):
    monitor = ContextWindowMonitor(builder=builder(), context_window=WINDOW, strategy=strategy)
    model = ScriptedModel(["Alice and the user exchanged numbered turns 0 to 9."] * 5)
    conv = ConversationMemory(agent="alice")
    conv.add(Turn(id="sys", role="system", content="Keep this rule.", author="rules"))
    # Below the trigger nothing happens.
    conv.add(turn(0))
    assert (
        await monitor.after_turn(agent=AGENT, conversation=conv, summarize_with=summarizer(model))
        is None
    )
    usage = fill_until_trigger(monitor, conv)
    newest = conv.get_last_message()
    before = conv.get_messages()
    record = await monitor.after_turn(
        agent=AGENT, conversation=conv, summarize_with=summarizer(model)
    )
    assert record is not None and record.strategy == strategy
    assert record.tokens_before == usage >= 0.75 * WINDOW
    assert record.tokens_after <= 0.40 * WINDOW
    assert monitor.measure(AGENT, conv.get_messages()) == record.tokens_after
    kept = conv.get_messages()
    assert kept[0].id == "sys" and kept[-1] == newest  # system and newest turn kept
    assert [t.id for t in before if t.id not in {k.id for k in kept}] == list(record.dropped)
    assert record.dropped == tuple(t.id for t in before[1 : 1 + len(record.dropped)])
    if strategy == "summarize":
        assert record.summary_id is not None
        (summary,) = [t for t in kept if t.id == record.summary_id]
        assert kept[1] == summary and "numbered turns" in summary.content
        (request,) = model.requests
        sent = request.prompt.manifest
        assert sent.subject == "summary:alice"
        assert sent.origins[1:] == tuple(f"turn:{i}" for i in record.dropped)
    else:
        assert record.summary_id is None and model.requests == []


async def test_custom_ratios():
    monitor = ContextWindowMonitor(
        builder=builder(), context_window=WINDOW, trigger_threshold=0.5, target_ratio=0.2
    )
    conv = ConversationMemory(agent="alice")
    i = 0
    while monitor.measure(AGENT, conv.get_messages()) < 500:
        conv.add(turn(i))
        i += 1
    record = await monitor.after_turn(agent=AGENT, conversation=conv)
    assert record is not None and record.tokens_after <= 200


async def test_nothing_dropped_is_lost_with_long_term_memory(tmp_path):
    memory = PersistentMemory(f"sqlite:///{tmp_path / 'm.db'}", agent="alice")
    monitor = ContextWindowMonitor(builder=builder(), context_window=WINDOW, long_term=memory)
    conv = ConversationMemory(agent="alice")
    everything = []
    for _ in range(3):  # several compressions
        while monitor.measure(AGENT, conv.get_messages()) < monitor.trigger_tokens:
            t = turn(len(everything))
            everything.append(t)
            conv.add(t)
        record = await monitor.after_turn(agent=AGENT, conversation=conv)
        assert set(record.recorded_to_memory) == set(record.dropped)
    held = {t.id for t in conv.get_messages()}
    for t in everything:
        assert t.id in held or memory.get(t.id) is not None, t.id
    assert memory.get("t000").content == "user: " + turn(0).content
    assert memory.retrieve("Turn 0:", limit=50)


async def test_summarize_needs_a_model_and_sane_settings():
    monitor = ContextWindowMonitor(builder=builder(), context_window=200, strategy="summarize")
    conv = ConversationMemory(agent="alice")
    conv.add([turn(i) for i in range(8)])
    with pytest.raises(ConfigError, match="model"):
        await monitor.after_turn(agent=AGENT, conversation=conv)
    with pytest.raises(ConfigError):
        ContextWindowMonitor(builder=builder(), context_window=100, target_ratio=0.8)
    with pytest.raises(ConfigError):
        ContextWindowMonitor(builder=builder(), context_window=100, strategy="forget")


async def test_a_single_turn_too_large_is_an_explicit_error():
    monitor = ContextWindowMonitor(builder=builder(), context_window=100)
    conv = ConversationMemory(agent="alice")
    conv.add(Turn(id="big", role="user", content="word " * 200))
    with pytest.raises(LimitExceeded) as info:
        await monitor.after_turn(
            agent=AGENT, conversation=conv, summarize_with=summarizer(FunctionModel(str))
        )
    # The message says what is too large and what to do, not only the limit's name.
    assert info.value.limit == "target_ratio" and info.value.value > info.value.maximum
    assert f"is {info.value.value} tokens, over the {info.value.maximum}" in str(info.value)
    assert "in a context window of 100: send a shorter message" in str(info.value)


def test_a_turn_that_can_never_fit_is_refused_before_it_joins():
    monitor = ContextWindowMonitor(builder=builder(), context_window=100)
    conv = ConversationMemory(agent="alice")
    conv.add(Turn(id="early", role="user", content="hello"))
    before = conv.get_messages()
    with pytest.raises(LimitExceeded, match="what cannot be dropped"):
        monitor.check_turn(AGENT, before, Turn(id="big", role="user", content="word " * 200))
    assert conv.get_messages() == before
    # A turn that fits once earlier turns are compressed away is accepted.
    monitor.check_turn(AGENT, before, Turn(id="small", role="user", content="word " * 5))
