"""Cached prompt tokens: read from each kind of server, validated, recorded, never invented.

``None`` means the server reported nothing; 0 means it reported no reuse. A count outside
``0..prompt_tokens`` is a broken or hostile server's and is refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance._core.errors import ModelError
from clearance.models import ModelRequest, ModelResponse, Usage
from clearance.models._base import validated_usage
from clearance.models._cache import anthropic_prompt_tokens, reused_prefix
from clearance.models._openai import OpenAIModel
from clearance.testing import FunctionModel


class _UsageModel(FunctionModel):
    """A user's own model: answers "ok" with the usage ``usage(request)`` gives, unchecked."""

    def __init__(self, usage: Any) -> None:
        super().__init__(lambda request: "ok", model_id="fake:cache")
        self._usage = usage

    async def request(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(text="ok", usage=self._usage(request), model_id=self.model_id)


def _usage(prompt: int, cached: Any = None, **extra: Any) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": 5,
                             "total_tokens": prompt + 5, **extra}  # fmt: skip
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


async def _ask(url: str, make_prompt: Any) -> ModelResponse:
    async with OpenAIModel("scripted", base_url=url, api_key="k", timeout_s=10) as model:
        return await model.request(ModelRequest(prompt=make_prompt(len)))


async def test_openai_cached_tokens_are_recorded(openai_server, make_prompt) -> None:
    url = openai_server(lambda messages: "ok", usage=_usage(120, cached=96))
    response = await _ask(url, make_prompt)
    assert response.usage.prompt_tokens == 120
    assert response.usage.cached_prompt_tokens == 96


async def test_no_report_is_none_not_zero(openai_server, make_prompt) -> None:
    url = openai_server(lambda messages: "ok", usage=_usage(120))
    response = await _ask(url, make_prompt)
    assert response.usage.cached_prompt_tokens is None
    assert response.usage.to_dict()["cached_prompt_tokens"] is None


async def test_a_reported_zero_stays_zero(openai_server, make_prompt) -> None:
    url = openai_server(lambda messages: "ok", usage=_usage(120, cached=0))
    assert (await _ask(url, make_prompt)).usage.cached_prompt_tokens == 0


# (The SDK itself turns "96" into 96 and true into 1; `validated_usage` is tested
# with what reaches it below.)
@pytest.mark.parametrize("cached", [121, 10**12, -1, 3.5, [96]])
async def test_impossible_cached_tokens_from_a_server_are_refused(
    openai_server, make_prompt, cached
) -> None:
    url = openai_server(lambda messages: "ok", usage=_usage(120, cached=cached))
    with pytest.raises(ModelError, match="cached_prompt_tokens") as info:
        await _ask(url, make_prompt)
    assert not info.value.transient  # the same server would say the same again


@pytest.mark.parametrize("cached", [121, -1, "96", 2.0, True, None])
def test_validated_usage_checks_cached_tokens_against_the_prompt(cached) -> None:
    if cached is None:
        assert validated_usage(120, 1, model_id="x:y").cached_prompt_tokens is None
        return
    with pytest.raises(ModelError, match="cached_prompt_tokens"):
        validated_usage(120, 1, model_id="x:y", cached_prompt_tokens=cached)
    assert validated_usage(120, 1, model_id="x:y", cached_prompt_tokens=120).cached_prompt_tokens


def test_llama_server_timings_are_read_when_no_usage_detail() -> None:
    from clearance.models._cache import reported_cached_tokens

    body = {"usage": {"prompt_tokens": 50}, "timings": {"cache_n": 40, "prompt_n": 10}}
    assert reported_cached_tokens(body) == 40
    detailed = {"usage": {"prompt_tokens_details": {"cached_tokens": 7}}, "timings": {"cache_n": 9}}
    assert reported_cached_tokens(detailed) == 7
    assert reported_cached_tokens({"usage": {"prompt_tokens": 50}}) is None


def test_anthropic_prompt_counts_every_input_token() -> None:
    usage = {"input_tokens": 10, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 70}
    prompt, cached = anthropic_prompt_tokens(usage)
    assert (prompt, cached) == (100, 70)
    checked = validated_usage(prompt, 3, model_id="anthropic:x", cached_prompt_tokens=cached)
    assert (checked.prompt_tokens, checked.cached_prompt_tokens) == (100, 70)
    assert anthropic_prompt_tokens({"input_tokens": 10}) == (10, None)


@pytest.mark.parametrize("bad", [-5, "70", 1.5, True])
def test_anthropic_bad_cache_counts_are_refused(bad) -> None:
    prompt, cached = anthropic_prompt_tokens({"input_tokens": 10, "cache_read_input_tokens": bad})
    with pytest.raises(ModelError):
        validated_usage(prompt, 3, model_id="anthropic:x", cached_prompt_tokens=cached)


def test_reused_prefix_counts_the_shared_prefix_and_never_the_whole_prompt() -> None:
    assert reused_prefix([], [1, 2, 3, 9], 3) == 0
    assert reused_prefix([1, 2, 7, 8], [1, 2, 3, 9], 3) == 2
    # The whole prompt shared: its last token is evaluated again for fresh logits.
    assert reused_prefix([1, 2, 3, 4], [1, 2, 3, 9], 3) == 2
    assert reused_prefix([1, 2], [1], 3) is None  # the prompt is not all there: unknown


def test_usage_sums_cached_tokens_over_the_calls_that_report_them() -> None:
    a = Usage(requests=1, prompt_tokens=100, cached_prompt_tokens=40)
    b = Usage(requests=1, prompt_tokens=50)
    assert (a + b).cached_prompt_tokens == 40
    assert (b + b).cached_prompt_tokens is None


async def test_the_caller_refuses_a_model_reporting_more_cached_than_prompt(tmp_path) -> None:
    """A user's own `ChatModel` bypasses `validated_usage`: the caller checks again."""

    model = _UsageModel(
        lambda request: Usage(
            requests=1, prompt_tokens=10, completion_tokens=1, cached_prompt_tokens=11
        )
    )
    team = Team(agents=(Agent(name="w", instructions="x"),), name="t")
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        result = await Orchestrator(team, model=model, ledger=ledger).run_tasks(
            [Task(id="a", title="A", description="d", assignee="w")]
        )
        calls = ledger.calls(result.run_id, subject="task:a")
    assert result.tasks["a"].status == "failed"
    assert calls and all("cached_prompt_tokens=11" in (c.error or "") for c in calls)
    assert all(c.usage.cached_prompt_tokens is None for c in calls)


async def test_recorded_cached_tokens_are_chained_and_read_back(tmp_path) -> None:
    usages = iter([None, 30, None])  # task a, task b, the synthesis

    model = _UsageModel(
        lambda request: Usage(
            requests=1, prompt_tokens=40, completion_tokens=1, cached_prompt_tokens=next(usages)
        )
    )

    team = Team(agents=(Agent(name="w", instructions="x"),), name="t")
    db = tmp_path / "runs.db"
    with RunLedger(f"sqlite:///{db}") as ledger:
        result = await Orchestrator(
            team, model=model, ledger=ledger, options=RunOptions(max_concurrency=1)
        ).run_tasks(
            [
                Task(id="a", title="A", description="d", assignee="w"),
                Task(id="b", title="B", description="d", assignee="w", depends_on=["a"]),
            ]
        )
        calls = {c.subject: c for c in ledger.calls(result.run_id)}
        assert calls["task:a"].usage.cached_prompt_tokens is None
        assert calls["task:b"].usage.cached_prompt_tokens == 30
        assert verify_run(ledger, result.run_id).ok
    # ATTACK: a recorded count changed (or added where none was reported) breaks the chain.
    import sqlite3

    for value, subject in ((31, "task:b"), (5, "task:a")):
        with sqlite3.connect(db) as conn:
            before = conn.execute(
                "SELECT cached_prompt_tokens FROM calls WHERE subject = ?", (subject,)
            ).fetchone()[0]
            conn.execute(
                "UPDATE calls SET cached_prompt_tokens = ? WHERE subject = ?", (value, subject)
            )
        with RunLedger(f"sqlite:///{db}") as ledger:
            assert not verify_run(ledger, result.run_id).ok
        with sqlite3.connect(db) as conn:
            conn.execute(
                "UPDATE calls SET cached_prompt_tokens = ? WHERE subject = ?", (before, subject)
            )
    with RunLedger(f"sqlite:///{db}") as ledger:
        assert verify_run(ledger, result.run_id).ok
