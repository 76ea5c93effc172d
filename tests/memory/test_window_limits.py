"""The context-window monitor at its limits: long conversations, huge turns, folded summaries."""

from __future__ import annotations

import itertools

import pytest

from clearance import Agent, ContextBuilder, LimitExceeded
from clearance._agents.caller import ModelCaller
from clearance.memory import ContextWindowMonitor, ConversationMemory, PersistentMemory, Turn
from clearance.testing import FunctionModel
from clearance.tokens import counter_for

AGENT = Agent(name="alice", instructions="You are Alice.")


def builder() -> ContextBuilder:
    return ContextBuilder(count_tokens=counter_for("openai:gpt-4o"))


def short_turns(n: int) -> list[Turn]:
    return [
        Turn(id=f"t{i:05d}", role="user" if i % 2 == 0 else "assistant", content=f"note {i}")
        for i in range(n)
    ]


class CountingMonitor(ContextWindowMonitor):
    """Counts how many prompts the monitor builds to measure."""

    measured = 0

    def measure(self, agent, turns, memories=()):  # type: ignore[no-untyped-def]
        self.measured += 1
        return super().measure(agent, turns, memories)


async def test_choosing_what_to_drop_takes_a_logarithmic_number_of_measurements():
    # It measured the whole prompt once per dropped turn: minutes for a 128k-token window
    # of short turns. Now a binary search: the same turns dropped, a handful of prompts built.
    monitor = CountingMonitor(builder=builder(), context_window=16_000)
    conv = ConversationMemory(agent="alice")
    conv.add(short_turns(3000))
    assert monitor.measure(AGENT, conv.get_messages()) >= monitor.trigger_tokens
    before = conv.get_messages()
    monitor.measured = 0
    record = await monitor.after_turn(agent=AGENT, conversation=conv)
    assert record is not None and len(record.dropped) > 1000
    assert monitor.measured <= 30
    # The fewest oldest turns: keeping one more of them would be over the target.
    assert record.tokens_after <= monitor.target_tokens
    assert record.dropped == tuple(t.id for t in before[: len(record.dropped)])
    one_more = before[len(record.dropped) - 1 :]
    assert monitor.measure(AGENT, one_more) > monitor.target_tokens


async def test_an_answer_too_long_to_keep_may_go_when_the_newest_need_not_stay(tmp_path):
    memory = PersistentMemory(f"sqlite:///{tmp_path / 'm.db'}", agent="alice")
    monitor = ContextWindowMonitor(builder=builder(), context_window=1000, long_term=memory)
    conv = ConversationMemory(agent="alice")
    conv.add(Turn(id="sys", role="system", content="Keep this rule.", author="rules"))
    conv.add(Turn(id="q", role="user", content="tell me everything", author="user"))
    conv.add(Turn(id="a", role="assistant", content="lore " * 900, author="alice"))
    with pytest.raises(LimitExceeded):  # the newest turn stays by default
        await monitor.after_turn(agent=AGENT, conversation=conv)
    assert [t.id for t in conv.get_messages()] == ["sys", "q", "a"]  # nothing changed
    record = await monitor.after_turn(agent=AGENT, conversation=conv, keep_newest=False)
    assert record is not None and record.dropped == ("q", "a")
    assert [t.id for t in conv.get_messages()] == ["sys"]  # system turns always stay
    assert record.recorded_to_memory == ("q", "a") and memory.get("a") is not None


async def test_summaries_fold_turns_too_large_for_one_summarizing_prompt():
    # The dropped turns went into one summarizing prompt, over the model's window: the
    # compression failed. Now they are summarized in turns, each summary folded into the
    # next prompt, and every summarizing prompt fits the window.
    window = 1000
    sent = []

    def summarize(request):
        sent.append(request.prompt)
        return f"summary {len(sent)} of the dropped turns"

    model = FunctionModel(summarize, model_id="test:function")
    monitor = ContextWindowMonitor(builder=builder(), context_window=window, strategy="summarize")
    conv = ConversationMemory(agent="alice")
    conv.add(
        [
            Turn(id=f"t{i}", role="user" if i % 2 == 0 else "assistant", content="fact " * 250)
            for i in range(6)
        ]
    )
    conv.add(Turn(id="newest", role="user", content="and now?", author="user"))
    record = await monitor.after_turn(
        agent=AGENT, conversation=conv, summarize_with=ModelCaller().summarizer(AGENT, model)
    )
    assert record is not None and len(sent) >= 2
    limit = window - monitor.summary_max_tokens
    assert all(p.manifest.total_tokens <= limit for p in sent)
    # Each later prompt opens with the summary so far; every dropped turn was summarized.
    for earlier, later in itertools.pairwise(sent):
        assert later.manifest.origins[1].startswith("summary:")
        assert f"summary {sent.index(earlier) + 1} of" in later.text
    summarized = {o for p in sent for o in p.manifest.origins if o.startswith("turn:")}
    assert summarized == {f"turn:{t}" for t in record.dropped} and len(summarized) >= 4
    kept = conv.get_messages()
    assert [t.id for t in kept][:2] == [record.summary_id, "t5"] and kept[-1].id == "newest"
    assert kept[0].content == f"summary {len(sent)} of the dropped turns"


async def test_a_turn_larger_than_any_summarizing_prompt_is_dropped_not_sent(tmp_path):
    memory = PersistentMemory(f"sqlite:///{tmp_path / 'm.db'}", agent="alice")
    sent = []

    def summarize(request):
        sent.append(request.prompt)
        return "the user greeted alice"

    model = FunctionModel(summarize, model_id="test:function")
    monitor = ContextWindowMonitor(
        builder=builder(), context_window=1000, strategy="summarize", long_term=memory
    )
    conv = ConversationMemory(agent="alice")
    conv.add(Turn(id="hi", role="user", content="hello alice", author="user"))
    conv.add(Turn(id="huge", role="assistant", content="lore " * 3000, author="alice"))
    record = await monitor.after_turn(
        agent=AGENT,
        conversation=conv,
        summarize_with=ModelCaller().summarizer(AGENT, model),
        keep_newest=False,
    )
    assert record is not None and set(record.dropped) == {"hi", "huge"}
    (prompt,) = sent  # only what fits is summarized
    assert prompt.manifest.origins[1:] == ("turn:hi",)
    assert memory.get("huge") is not None  # recorded before it left
    assert [t.content for t in conv.get_messages()] == ["the user greeted alice"]


async def test_turns_dropped_after_a_long_summary_are_recorded_too(tmp_path):
    memory = PersistentMemory(f"sqlite:///{tmp_path / 'm.db'}", agent="alice")
    model = FunctionModel(lambda request: "long summary " * 400, model_id="test:function")
    monitor = ContextWindowMonitor(
        builder=builder(), context_window=1000, strategy="summarize", long_term=memory
    )
    conv = ConversationMemory(agent="alice")
    conv.add(
        [
            Turn(id=f"t{i}", role="user" if i % 2 == 0 else "assistant", content="fact " * 100)
            for i in range(8)
        ]
    )
    record = await monitor.after_turn(
        agent=AGENT, conversation=conv, summarize_with=ModelCaller().summarizer(AGENT, model)
    )
    assert record is not None and record.tokens_after <= monitor.target_tokens
    real = [t for t in record.dropped if not t.startswith("summary_")]
    assert set(record.recorded_to_memory) == set(real)
    assert all(memory.get(t) is not None for t in real)


class CountingBuilder(ContextBuilder):
    """Counts the conversation prompts built."""

    built = 0

    def build_conversation_prompt(self, **kwargs):  # type: ignore[no-untyped-def]
        self.built += 1
        return super().build_conversation_prompt(**kwargs)


async def test_summarizing_many_turns_builds_a_logarithmic_number_of_prompts():
    counting = CountingBuilder(count_tokens=counter_for("openai:gpt-4o"))
    model = FunctionModel(lambda request: "the notes so far", model_id="test:function")
    monitor = ContextWindowMonitor(builder=counting, context_window=16_000, strategy="summarize")
    conv = ConversationMemory(agent="alice")
    conv.add(short_turns(3000))
    record = await monitor.after_turn(
        agent=AGENT, conversation=conv, summarize_with=ModelCaller().summarizer(AGENT, model)
    )
    assert record is not None and len(record.dropped) > 1000
    limit = monitor.context_window - monitor.summary_max_tokens
    assert 1 < len(model.requests) <= 4  # ~45,000 tokens of turns, in prompts of 14,400
    assert all(r.prompt.manifest.total_tokens <= limit for r in model.requests)
    assert counting.built <= 80, counting.built
