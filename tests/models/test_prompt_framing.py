"""A prompt budget leaves room for the chat template's own tokens (`prompt_framing_tokens`).

The builder counts the text of a prompt's messages; a chat template adds its turn markers
around them. Without counting those, a prompt at its budget left the model less than the
agent's ``max_output_tokens`` and llama.cpp silently lowered ``max_tokens`` to fit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from clearance import Agent
from clearance import AgentLimits as Limits
from clearance._core.errors import ConfigError
from clearance._orchestration.run import prompt_budget
from clearance.models import framing_tokens
from clearance.testing import FakeModel


def _agent(max_output: int = 100) -> Agent:
    return Agent(name="a", instructions="x", limits=Limits(max_output_tokens=max_output))


def test_the_budget_is_the_window_less_the_output_and_the_framing() -> None:
    model = FakeModel("m", context_window=1000)
    assert prompt_budget(_agent(), model) == 900  # no framing declared: none counted
    model.prompt_framing_tokens = 14  # type: ignore[attr-defined]
    assert framing_tokens(model) == 14
    assert prompt_budget(_agent(), model) == 1000 - 100 - 14


def test_an_explicit_max_prompt_tokens_is_kept() -> None:
    model = FakeModel("m", context_window=1000)
    model.prompt_framing_tokens = 14  # type: ignore[attr-defined]
    agent = Agent(name="a", instructions="x", limits=Limits(max_prompt_tokens=300))
    assert prompt_budget(agent, model) == 300


@pytest.mark.parametrize("bad", [-1, True, 1.5, "14", 10**12])
def test_a_framing_that_is_no_token_count_is_refused(bad: object) -> None:
    model = FakeModel("m", context_window=1000)
    model.prompt_framing_tokens = bad  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"fake:.*prompt_framing_tokens"):
        framing_tokens(model)


# -- the embedded model: its template's real framing ---------------------------------------


@pytest.fixture(scope="module")
def embedded() -> Iterator[object]:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from clearance.models._llama_cpp import LlamaCppModel

    m = LlamaCppModel(n_ctx=512, n_threads=2)
    yield m
    m.close()


def _user_text_of(model: object, tokens: int) -> str:
    """A user message of at most ``tokens`` tokens, as close to it as words allow."""
    count = model.count_tokens  # type: ignore[attr-defined]
    low, high = 0, tokens
    while low < high:  # the most words whose text is within ``tokens``
        middle = (low + high + 1) // 2
        if count("word " * middle) <= tokens:
            low = middle
        else:
            high = middle - 1
    return "word " * low


@pytest.mark.embedded
def test_the_embedded_models_framing_is_its_templates_own_tokens(embedded) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    sent, _, _ = embedded._prompt_tokens(messages)
    content = embedded.count_tokens("be brief") + embedded.count_tokens("hi")
    assert embedded.prompt_framing_tokens == len(sent) - content > 0


@pytest.mark.embedded
def test_a_prompt_at_its_budget_leaves_the_model_its_max_output(embedded) -> None:
    agent = _agent(max_output=64)
    budget = prompt_budget(agent, embedded)
    assert budget is not None
    system = "You answer."
    user = _user_text_of(embedded, budget - embedded.count_tokens(system))
    assert budget - 3 <= embedded.count_tokens(system) + embedded.count_tokens(user) <= budget
    sent, _, _ = embedded._prompt_tokens(
        [{"role": "system", "content": system}, {"role": "user", "content": user}]
    )
    # What the model receives, plus the agent's whole output, fits in the window.
    assert len(sent) + 64 <= embedded.context_window


# -- a chat keeps the same room ------------------------------------------------------------


async def _chat_sends(framing: int) -> list[object]:
    from clearance import AgentChat
    from clearance._core.errors import LimitExceeded

    model = FakeModel("m", context_window=1000)
    model.prompt_framing_tokens = framing  # type: ignore[attr-defined]
    chat = AgentChat(
        agent=_agent(max_output=100), model=model, trigger_threshold=1.0, target_ratio=0.89
    )
    # A prompt of 783 tokens: room for it next to the answer's 100 in a window of 1000, not
    # next to 100 more of framing.
    with contextlib.suppress(LimitExceeded):
        await chat.say("word " * 600)
    return list(model.requests)


async def test_a_chat_prompt_leaves_room_for_the_framing_too() -> None:
    assert len(await _chat_sends(0)) == 1  # no framing: the prompt fits next to the answer
    assert await _chat_sends(100) == []  # with it, it does not: refused before it is sent
