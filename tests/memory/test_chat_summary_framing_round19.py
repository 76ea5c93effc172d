"""A summarizing prompt of ``clearance chat`` leaves room for the chat template's tokens.

Every conversation prompt leaves the answer's ``max_output_tokens`` and the tokens the
model's chat template adds around a prompt (`framing_tokens`, the embedded model's own) free
in the window; a summarizing prompt left room for the summary only: filled to its limit, it
plus the template plus the summary's ``max_tokens`` was over the model's context window,
which the embedded model refuses (the message failed and the session ended).
"""

from __future__ import annotations

from clearance import Agent, AgentChat, AgentLimits
from clearance._state.conversation import Turn
from clearance.testing import FunctionModel

WINDOW = 1000
FRAMING = 60


class FramedModel(FunctionModel):
    """A model whose chat template adds `FRAMING` tokens around every prompt."""

    prompt_framing_tokens = FRAMING


async def test_every_prompt_and_its_answer_fit_the_window_with_the_template():
    sent = []

    def reply(request):
        sent.append(request)
        return "a summary" if request.prompt.manifest.subject == "summary:alice" else "ok"

    agent = Agent(name="alice", instructions="You are Alice.",
                  limits=AgentLimits(max_output_tokens=100))  # fmt: skip
    model = FramedModel(reply, model_id="test:function")
    chat = AgentChat(agent=agent, model=model, strategy="summarize", context_window=WINDOW)
    for i in range(12):  # turns of ~200 tokens: the summarizing prompts fill up
        role = "user" if i % 2 == 0 else "assistant"
        author = "user" if role == "user" else "alice"
        chat.conversation.add(
            Turn(id=f"turn_old{i}", role=role, content=f"fact{i} " * 160, author=author)
        )
    assert await chat.say("and now?") == "ok"
    summaries = [r for r in sent if r.prompt.manifest.subject == "summary:alice"]
    assert summaries, "the conversation was summarized"
    over = [
        (r.prompt.manifest.subject, r.prompt.manifest.total_tokens, r.max_tokens)
        for r in sent
        if r.prompt.manifest.total_tokens + FRAMING + r.max_tokens > WINDOW
    ]
    assert over == []
