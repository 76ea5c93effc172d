"""`AgentChat` at the edges of its window: long answers, a large output reservation."""

from __future__ import annotations

import pytest

from clearance import Agent, AgentChat, AgentLimits, ConfigError, RunLedger
from clearance._context.verify import verify_run
from clearance.memory import PersistentMemory, memory_lookup
from clearance.testing import FunctionModel


def agent(max_output_tokens: int) -> Agent:
    return Agent(
        name="alice",
        instructions="You are Alice.",
        limits=AgentLimits(max_output_tokens=max_output_tokens),
    )


async def test_an_answer_longer_than_the_target_does_not_end_the_conversation(tmp_path):
    # The answer was the newest turn, which compression never dropped: an answer over 40%
    # of the window ended the session (the answer itself never shown). Now it goes to
    # long-term memory when nothing else is left to drop, and the conversation goes on.
    db = f"sqlite:///{tmp_path / 'memory.db'}"
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    memory = PersistentMemory(db, agent="alice")
    long_answer = "the long answer " + "lore " * 600
    model = FunctionModel(lambda request: long_answer, model_id="test:function")
    chat = AgentChat(
        agent=agent(800), model=model, memory=memory, ledger=ledger, context_window=1000
    )
    assert await chat.say("tell me everything") == long_answer
    assert await chat.say("and again") == long_answer
    assert all(p.manifest.total_tokens <= 1000 - 800 for p in chat.prompts)
    answers = [r for r in memory.recent(10) if r.content.startswith("alice: the long answer")]
    assert answers, "the dropped answer was recorded before it left"
    assert "and again" in chat.prompts[-1].text
    report = verify_run(ledger, chat.run_id, memories=memory_lookup(db))
    assert report.ok, [str(f) for f in report.findings]
    ledger.close()


async def test_a_summarized_conversation_survives_an_answer_larger_than_the_window(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")

    def reply(request):
        if request.prompt.manifest.subject == "summary:alice":
            assert request.prompt.manifest.total_tokens <= 1000
            return "Summary: the user asked twice."
        return "huge " * 1500

    model = FunctionModel(reply, model_id="test:function")
    chat = AgentChat(
        agent=agent(200), model=model, strategy="summarize", ledger=ledger, context_window=1000
    )
    for question in ("first", "second", "third"):
        assert (await chat.say(question)).startswith("huge huge")
    assert chat.compressions
    assert all(p.manifest.total_tokens <= 800 for p in chat.prompts)
    report = verify_run(ledger, chat.run_id)
    assert report.ok, [str(f) for f in report.findings]
    ledger.close()


async def test_the_trigger_leaves_room_for_the_agents_answer():
    # With max_output_tokens over a quarter of the window, the trigger (75%) was above the
    # prompt budget: the second message of a conversation failed with max_prompt_tokens.
    model = FunctionModel(lambda request: "ok", model_id="test:function")
    chat = AgentChat(agent=agent(500), model=model, context_window=1000)
    assert chat.monitor.trigger_tokens <= 500
    assert chat.monitor.target_tokens < chat.monitor.trigger_tokens
    for i in range(6):
        assert await chat.say(f"question {i} " + "word " * 150) == "ok"
    assert chat.compressions
    assert all(p.manifest.total_tokens <= 500 for p in chat.prompts)


def test_a_window_without_room_for_a_prompt_is_refused():
    model = FunctionModel(lambda request: "ok", model_id="test:function")
    with pytest.raises(ConfigError, match="max_output_tokens"):
        AgentChat(agent=agent(1000), model=model, context_window=1000)


async def test_fitting_recalled_records_builds_few_prompts(tmp_path, monkeypatch):
    # Records that did not fit were left out one at a time, a prompt built for each: with a
    # shared window of hundreds of turns, hundreds of prompts per message.
    from clearance.memory import MemoryGroup, SharedConversation, TeamConversation

    db = f"sqlite:///{tmp_path / 'memory.db'}"
    group = MemoryGroup(
        name="lab", agents=("alice", "bob"), shared_conversation=SharedConversation(window=600)
    )
    groups = {"lab": ["alice", "bob"]}
    bob = TeamConversation(PersistentMemory(db, agent="bob", groups=groups), group)
    for i in range(600):
        bob.post(f"bob's shared note {i} about the harbour crane")
    model = FunctionModel(lambda request: "ok", model_id="test:function")
    chat = AgentChat(
        agent=agent(100),
        model=model,
        memory=PersistentMemory(db, agent="alice", groups=groups),
        memory_groups=(group,),
        shared_group="lab",
        context_window=2000,
    )
    built = []
    original = chat.builder.build_conversation_prompt

    def counted(**kwargs):
        built.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(chat.builder, "build_conversation_prompt", counted)
    assert await chat.say("what about the crane?") == "ok"
    shown = [o for o in chat.prompts[-1].manifest.origins if o.startswith("memory:")]
    assert 10 < len(shown) < 600  # as many as fit, no more
    assert chat.prompts[-1].manifest.total_tokens <= 2000 - 100
    assert len(built) <= 30, len(built)
