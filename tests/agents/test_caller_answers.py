"""`ModelCaller` refuses an answer no later step can hold: wrong types, too much, too many calls.

Any `ChatModel` (a user's own included) is checked here, whatever its provider checked: each
refusal is a one-line error, recorded as the call's outcome, with nothing of the answer kept.
"""

from typing import Any

import pytest

from clearance import Agent, AgentLimits, LimitExceeded, ModelError, RunLedger
from clearance._agents.caller import ModelCaller
from clearance._context.builder import ContextBuilder
from clearance._context.isolated import IsolatedContext
from clearance._core.vocabulary import EventKind
from clearance.models._base import (
    MAX_ARGUMENT_DEPTH,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    max_response_chars,
)

USAGE = Usage(requests=1, prompt_tokens=3, completion_tokens=2)


def agent(**limits: Any) -> Agent:
    return Agent(name="a", instructions="You are A.", limits=AgentLimits(**limits))


def prompt():
    context = IsolatedContext(task_id="t", task_description="Do it.")
    return ContextBuilder(count_tokens=len).build_isolated_prompt(context, agent=agent())


@pytest.fixture
def ledger(tmp_path):
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    yield ledger
    ledger.close()


class Answers:
    """A model answering each request with the next of ``answers``, as given (any type)."""

    model_id = "raw:model"
    context_window = None

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.requests: list[ModelRequest] = []

    def count_tokens(self, text: str) -> int:
        return len(text)

    async def request(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        return self.answers.pop(0)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("just text", "the model returned a str, not a ModelResponse"),
        (ModelResponse(text=12345, usage=USAGE, model_id="raw:model"),  # type: ignore[arg-type]
         "the completion is an int, not text"),
        (ModelResponse(text={"a": 1}, usage=USAGE, model_id="raw:model"),  # type: ignore[arg-type]
         "the completion is a dict, not text"),
        (ModelResponse(text="", usage=USAGE, model_id="raw:model",
                       tool_calls=(ToolCall(id="c", name=None, arguments={}),)),  # type: ignore[arg-type]
         "tool call 0's name is null, not a tool name"),
        (ModelResponse(text="", usage=USAGE, model_id="raw:model", tool_calls=(5,)),  # type: ignore[arg-type]
         "tool call 0 is an int, not a ToolCall"),
        (ModelResponse(text="ok", usage="lots", model_id="raw:model"),  # type: ignore[arg-type]
         "the usage is a str, not a Usage"),
    ],
)  # fmt: skip
async def test_an_answer_of_the_wrong_type_is_a_one_line_recorded_model_error(
    ledger, answer, message
):
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    with pytest.raises(ModelError) as info:
        await caller.call(subject="task:t", agent=agent(), model=Answers(answer), prompt=prompt())
    assert str(info.value) == f"raw:model: {message}"
    assert not info.value.transient
    (call,) = ledger.calls("run-1")
    assert call.response is None
    assert message in (call.error or "")


async def test_an_answer_over_max_response_chars_is_refused_and_not_kept(ledger):
    cap = max_response_chars(16)
    huge = ModelResponse(text="x" * (cap + 1), usage=USAGE, model_id="raw:model")
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    with pytest.raises(ModelError) as info:
        await caller.call(
            subject="task:t", agent=agent(max_output_tokens=16), model=Answers(huge),
            prompt=prompt(),
        )  # fmt: skip
    assert f"over the cap of {cap:,} for max_tokens=16" in str(info.value)
    (call,) = ledger.calls("run-1")
    assert call.response is None  # nothing of the answer is stored


async def test_an_answer_at_max_response_chars_is_taken(ledger):
    text = "x" * max_response_chars(16)
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    response = await caller.call(
        subject="task:t", agent=agent(max_output_tokens=16),
        model=Answers(ModelResponse(text=text, usage=USAGE, model_id="raw:model")),
        prompt=prompt(),
    )  # fmt: skip
    assert response.text == text


def _calls(n: int) -> ModelResponse:
    calls = tuple(ToolCall(id=f"c{i}", name="ping", arguments={"i": i}) for i in range(n))
    return ModelResponse(text="", usage=USAGE, model_id="raw:model", tool_calls=calls)


async def test_more_tool_calls_than_max_tool_calls_per_step_fail_before_any_is_recorded(ledger):
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    with pytest.raises(LimitExceeded) as info:
        await caller.call(
            subject="task:t", agent=agent(max_tool_calls_per_step=3), model=Answers(_calls(4)),
            prompt=prompt(),
        )  # fmt: skip
    assert (info.value.limit, info.value.value, info.value.maximum) == (
        "max_tool_calls_per_step", 4, 3,
    )  # fmt: skip
    assert "none of them was run" in str(info.value)
    assert ledger.events("run-1", EventKind.MODEL_TOOL_CALLS) == []
    (call,) = ledger.calls("run-1")
    assert "max_tool_calls_per_step exceeded: 4 > 3" in (call.error or "")


async def test_tool_calls_up_to_the_cap_are_taken_and_the_default_is_32(ledger):
    assert AgentLimits().max_tool_calls_per_step == 32
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    response = await caller.call(
        subject="task:t", agent=agent(), model=Answers(_calls(32)), prompt=prompt()
    )
    assert [c.arguments for c in response.tool_calls] == [{"i": i} for i in range(32)]
    with pytest.raises(LimitExceeded):
        await caller.call(
            subject="task:t", agent=agent(), model=Answers(_calls(33)), prompt=prompt()
        )


@pytest.mark.parametrize(
    ("arguments", "raw"),
    [
        (nested(100_000), f"(arguments nested deeper than {MAX_ARGUMENT_DEPTH} levels)"),
        ([1, 2], "(arguments that are a list, not an object)"),
        ("text", "text"),
    ],
)
async def test_arguments_no_tool_can_take_become_raw_for_a_tool_error(ledger, arguments, raw):
    answer = ModelResponse(
        text="", usage=USAGE, model_id="raw:model",
        tool_calls=(ToolCall(id="c", name="store_get", arguments=arguments),),
    )  # fmt: skip
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    response = await caller.call(
        subject="task:t", agent=agent(), model=Answers(answer), prompt=prompt()
    )
    assert response.tool_calls[0].arguments == {"_raw": raw}
    (event,) = ledger.events("run-1", EventKind.MODEL_TOOL_CALLS)
    assert event.data["tool_calls"][0]["arguments"] == {"_raw": raw}


async def test_arguments_at_max_argument_depth_are_kept(ledger):
    arguments = nested(MAX_ARGUMENT_DEPTH)
    answer = ModelResponse(
        text="", usage=USAGE, model_id="raw:model",
        tool_calls=(ToolCall(id="c", name="t", arguments=arguments),),
    )  # fmt: skip
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    response = await caller.call(
        subject="task:t", agent=agent(), model=Answers(answer), prompt=prompt()
    )
    assert response.tool_calls[0].arguments is arguments


def test_max_tool_calls_per_step_must_be_at_least_one():
    with pytest.raises(Exception, match="max_tool_calls_per_step"):
        AgentLimits(max_tool_calls_per_step=0)


# -- a refused answer was paid for: its usage is recorded and charged ----------------------

PAID = Usage(requests=1, prompt_tokens=40, completion_tokens=500)


async def test_a_refused_answer_is_charged_and_its_usage_recorded(ledger):
    from clearance._agents.budget_meter import BudgetMeter
    from clearance._core.budget import RunBudget

    meter = BudgetMeter(RunBudget(tokens=10_000), run_id="run-1")
    caller = ModelCaller(ledger=ledger, run_id="run-1", meter=meter)
    over = ModelResponse(text="x" * 40, usage=PAID, model_id="raw:model")
    with pytest.raises(LimitExceeded):
        await caller.call(
            subject="task:t", agent=agent(max_tokens_per_step=100), model=Answers(over),
            prompt=prompt(),
        )  # fmt: skip
    assert caller.usage == PAID  # what the caller reports as spent
    assert meter.tokens == 540  # and what the run's budget counts
    (call,) = ledger.calls("run-1")
    assert call.error and "max_tokens_per_step" in call.error
    assert call.response is None  # the refused text is not kept
    assert call.usage.completion_tokens == 500 and call.usage.prompt_tokens == 40


async def test_refused_answers_exhaust_the_run_budget(ledger):
    """A server whose every answer is refused cannot spend past the budget through retries."""
    from clearance import BudgetExceeded
    from clearance._agents.budget_meter import BudgetMeter
    from clearance._core.budget import RunBudget

    meter = BudgetMeter(RunBudget(tokens=1_000), run_id="run-1")
    caller = ModelCaller(ledger=ledger, run_id="run-1", meter=meter)
    over = [ModelResponse(text="x", usage=PAID, model_id="raw:model") for _ in range(5)]
    model = Answers(*over)
    for _ in range(2):
        with pytest.raises(LimitExceeded):
            await caller.call(subject="task:t", agent=agent(max_tokens_per_step=100),
                              model=model, prompt=prompt())  # fmt: skip
    with pytest.raises(BudgetExceeded):  # 1,080 tokens spent on refused answers
        await caller.call(subject="task:t", agent=agent(max_tokens_per_step=100),
                          model=model, prompt=prompt())  # fmt: skip
    assert len(model.requests) == 2


async def test_an_impossible_usage_is_not_charged(ledger):
    caller = ModelCaller(ledger=ledger, run_id="run-1")
    impossible = Usage(requests=1, prompt_tokens=-5, completion_tokens=3)
    bad = ModelResponse(text="ok", usage=impossible, model_id="raw:model")
    with pytest.raises(ModelError):
        await caller.call(subject="task:t", agent=agent(), model=Answers(bad), prompt=prompt())
    assert caller.usage == Usage()
    (call,) = ledger.calls("run-1")
    assert call.usage.prompt_tokens == 0 and call.usage.completion_tokens == 0


async def test_an_answer_that_arrived_before_its_attempt_stopped_is_charged_as_recorded(ledger):
    """An attempt stopped after its answer came (here a listener that cannot write: a closed
    pipe) records the answer's usage; the caller and the run's budget are charged the same, so
    the run's totals, a resumed run's budget (the sum of its calls) and this session agree."""
    from clearance._agents.budget_meter import BudgetMeter
    from clearance._core.budget import RunBudget
    from clearance._core.vocabulary import RunEventKind

    def listener(kind, subject, detail):
        if kind == RunEventKind.TEXT:
            raise BrokenPipeError("stdout is closed")

    meter = BudgetMeter(RunBudget(tokens=10_000), run_id="run-1")
    caller = ModelCaller(ledger=ledger, run_id="run-1", meter=meter, listener=listener)
    answer = ModelResponse(text="fine", usage=PAID, model_id="raw:model")
    with pytest.raises(BrokenPipeError):
        await caller.call(subject="task:t", agent=agent(), model=Answers(answer), prompt=prompt())
    (call,) = ledger.calls("run-1")
    assert call.error and call.usage.completion_tokens == 500  # recorded as paid for
    assert caller.usage == PAID  # and charged as recorded
    assert meter.tokens == 540
