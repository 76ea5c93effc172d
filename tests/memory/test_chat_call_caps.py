"""`AgentChat` under the agent's limits, like every call path: ``max_model_calls`` per message
and ``max_prompt_tokens`` on every prompt, the summarizing ones included."""

from __future__ import annotations

import sqlite3

import pytest

from clearance import Agent, AgentChat, AgentLimits, LimitExceeded, RunLedger
from clearance._context.verify import verify_run
from clearance._orchestration.chat import KEPT_PROMPTS
from clearance._state.conversation import Turn
from clearance.testing import FunctionModel


def fill(chat: AgentChat, count: int, words: int) -> None:
    """Put ``count`` long turns in the chat's conversation, as a long session would leave it.

    The turns are not recorded (no ``user_message`` event, no answer): a run filled so does
    not verify, so the tests that verify send their turns as messages instead.
    """
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        author = "user" if role == "user" else chat.agent.name
        chat.conversation.add(
            Turn(id=f"turn_old{i}", role=role, content=f"fact{i} " * words, author=author)
        )


async def test_a_message_makes_at_most_the_agents_max_model_calls(tmp_path):
    # Chat took no call budget: one message could make any number of summarizing calls (one
    # per dropped turn that fits no prompt with another), past the agent's max_model_calls.
    db = tmp_path / "runs.db"
    ledger = RunLedger(f"sqlite:///{db}")
    sent = []

    def reply(request):
        sent.append(request.prompt.manifest.subject)
        return "a summary" if request.prompt.manifest.subject == "summary:alice" else "ok"

    agent = Agent(
        name="alice",
        instructions="You are Alice.",
        limits=AgentLimits(max_output_tokens=50, max_model_calls=2),
    )
    model = FunctionModel(reply, model_id="test:function")
    chat = AgentChat(
        agent=agent, model=model, strategy="summarize", ledger=ledger, context_window=1000
    )
    fill(chat, 6, 250)  # each turn ~310 tokens: at most two per summarizing prompt
    with pytest.raises(LimitExceeded) as caught:
        await chat.say("and now?")
    assert caught.value.limit == "max_model_calls"
    assert caught.value.maximum == 2 and caught.value.subject == "conversation:alice"
    assert sent == ["summary:alice", "summary:alice"]  # the third call was never sent
    ledger.close()
    conn = sqlite3.connect(db)
    subjects = [r[0] for r in conn.execute("SELECT subject FROM calls ORDER BY rowid")]
    conn.close()
    assert subjects == ["summary:alice", "summary:alice"]  # nor recorded


async def test_the_call_budget_is_per_message_answer_and_summaries_together(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    sent = []

    def reply(request):
        sent.append(request.prompt.manifest.subject)
        return "a summary" if request.prompt.manifest.subject == "summary:alice" else "ok"

    agent = Agent(
        name="alice",
        instructions="You are Alice.",
        limits=AgentLimits(max_output_tokens=50, max_model_calls=1),
    )
    model = FunctionModel(reply, model_id="test:function")
    chat = AgentChat(
        agent=agent, model=model, strategy="summarize", ledger=ledger, context_window=1000
    )
    for i in range(3):  # one call per message: each message has its own budget
        assert await chat.say(f"question {i} " + "fact " * 150) == "ok"
    assert sent == ["conversation:alice"] * 3
    assert not chat.compressions  # ~670 tokens: under the trigger (750)
    with pytest.raises(LimitExceeded, match="max_model_calls"):
        # over the trigger: this message needs a summary before its answer
        await chat.say("and now? " + "word " * 150)
    assert sent[3:] == ["summary:alice"]  # the answer, one call too many, was not sent
    report = verify_run(ledger, chat.run_id)
    assert report.ok, [str(f) for f in report.findings]
    ledger.close()


async def test_summarizing_prompts_stay_within_max_prompt_tokens(tmp_path):
    # The window is narrowed to max_prompt_tokens + max_output_tokens, but a summary asks
    # for fewer tokens than max_output_tokens: summarizing prompts took the difference and
    # went over max_prompt_tokens.
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    received = []
    # ~230 tokens an answer: two fit 700 tokens, not 600 (a message that long is refused)
    answers = iter([*(f"fact{i} " * 180 for i in range(3)), "ok"])

    def reply(request):
        received.append(request.prompt)
        return "a summary" if request.prompt.manifest.subject == "summary:alice" else next(answers)

    agent = Agent(
        name="alice",
        instructions="You are Alice.",
        limits=AgentLimits(max_output_tokens=400, max_prompt_tokens=600),
    )
    model = FunctionModel(reply, model_id="test:function")
    chat = AgentChat(
        agent=agent, model=model, strategy="summarize", ledger=ledger, context_window=4000
    )
    assert chat.monitor.summary_max_tokens < agent.limits.max_output_tokens
    for i in range(3):  # the second answer takes the conversation over the trigger
        await chat.say(f"question {i}")
    assert await chat.say("and now?") == "ok"
    summaries = [p for p in received if p.manifest.subject == "summary:alice"]
    assert summaries, "the conversation was summarized"
    assert all(p.manifest.total_tokens <= 600 for p in received), [
        (p.manifest.subject, p.manifest.total_tokens) for p in received
    ]
    summarized = {o for p in summaries for o in p.manifest.origins if o.startswith("turn:")}
    assert len(summarized) >= 2  # the turns were summarized, in more than one prompt
    report = verify_run(ledger, chat.run_id)
    assert report.ok, [str(f) for f in report.findings]
    ledger.close()


async def test_a_conversation_of_thousands_of_turns_holds_a_bounded_state():
    # Every prompt of the session was kept in `AgentChat.prompts`: a long session held them
    # all (each up to the window), growing without bound.
    agent = Agent(name="alice", instructions="Talk.", limits=AgentLimits(max_output_tokens=16))
    model = FunctionModel(lambda request: "noted " * 10, model_id="test:function")
    chat = AgentChat(agent=agent, model=model, strategy="summarize", context_window=400)
    for i in range(2000):
        await chat.say(f"message {i} " + "word " * 20)
    assert len(chat.prompts) == KEPT_PROMPTS
    assert "message 1999 " in chat.prompts[-1].text  # the latest are kept, oldest first
    assert "message 1900 " in chat.prompts[0].text and "message 1901 " not in chat.prompts[0].text
    assert all(p.manifest.total_tokens <= 400 - 16 for p in chat.prompts)
    assert len(chat.conversation) < 40  # compression keeps the conversation itself bounded
