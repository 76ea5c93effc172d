"""A ``retry_after_s`` no server could mean, from a `ChatModel` that is not one of ours.

Our providers parse ``Retry-After`` into a number of seconds >= 0 (`parse_retry_after`), but
a `ModelError` may come from any `ChatModel` (a provider package, a user's own model): its
``retry_after_s`` is checked before it is waited. A NaN wait never ended, past the call's
deadline, and a string failed the call with a ``TypeError``; both now fall back to the
policy's backoff, and the call keeps its deadline and its cap on attempts.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from clearance import Agent, AgentLimits, ModelError, RetryPolicy, RunLedger
from clearance._agents.caller import ModelCaller
from clearance._agents.retry import retry_after_s
from clearance.testing import FunctionModel


def _busy(seen: list[int], retry_after: Any) -> FunctionModel:
    def answer(request: Any) -> str:
        seen.append(1)
        raise ModelError("busy", model_id="fake:busy", transient=True, retry_after_s=retry_after)

    return FunctionModel(answer, model_id="fake:busy")


@pytest.mark.parametrize(
    "retry_after", [float("nan"), "5", True, [1]], ids=["nan", "str", "bool", "list"]
)
async def test_an_unusable_retry_after_is_the_backoff_and_the_deadline_holds(
    tmp_path, make_prompt, retry_after: Any
) -> None:
    ledger = RunLedger(f"sqlite:///{tmp_path / 'runs.db'}")
    ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
    seen: list[int] = []
    model = _busy(seen, retry_after)
    caller = ModelCaller(
        ledger=ledger, run_id="run-1",
        retry_policy=RetryPolicy(initial_s=0, max_s=0, jitter_s=0, max_retry_after_s=60),
    )  # fmt: skip
    agent = Agent(name="w", instructions="You write.", limits=AgentLimits(retries=2, timeout_s=5))
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"^fake:busy: busy$"):
        await asyncio.wait_for(
            caller.call(subject="task:t", agent=agent, model=model,
                        prompt=make_prompt(model.count_tokens)),
            timeout=20,
        )  # fmt: skip
    assert time.monotonic() - started < 3  # the backoff (0 s), not a wait that never ends
    assert len(seen) == 3  # every retry was made, and no more
    errors = [c.error for c in ledger.calls("run-1")]
    assert errors == [f"attempt {n} of 3: fake:busy: busy" for n in (1, 2, 3)]
    ledger.close()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(float("nan"), None), ("5", None), (True, None), (None, None), (-3, 0.0), (2, 2.0),
     (0.25, 0.25), (float("inf"), float("inf"))],
)  # fmt: skip
def test_retry_after_s_is_a_number_of_seconds_or_none(value: Any, seconds: float | None) -> None:
    exc = ModelError("busy", model_id="fake:busy", transient=True, retry_after_s=value)
    assert retry_after_s(exc) == seconds
    policy = RetryPolicy(max_retry_after_s=7)
    waited = min(seconds, 7) if seconds is not None else None
    if waited is not None:  # what the policy waits: the provider's seconds, capped
        state: Any = type("State", (), {"outcome": _Failed(exc), "attempt_number": 1})()
        assert policy.wait_s(state) == waited


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self._exc = exc

    def exception(self) -> BaseException:
        return self._exc


async def test_the_waits_of_one_call_without_a_deadline_are_bounded_in_all() -> None:
    from clearance._agents.retry import MAX_TOTAL_WAIT_S, RetryPolicy, with_retries

    assert RetryPolicy().max_total_wait_s == MAX_TOTAL_WAIT_S < 100 * 300
    calls: list[int] = []

    async def limited(attempt: int) -> str:
        calls.append(attempt)
        raise ModelError("HTTP 429: slow down", model_id="m:x", transient=True, retry_after_s=60)

    policy = RetryPolicy(max_retry_after_s=0.1, max_total_wait_s=0.25)
    with pytest.raises(ModelError) as info:
        await with_retries(limited, retries=100, policy=policy)
    assert calls == [1, 2, 3]  # waited 0.1 + 0.1; a third 0.1 would pass 0.25
    assert str(info.value) == (
        "m:x: HTTP 429: slow down (not retried: the waits between attempts would reach "
        "0.3 s, past retry_policy.max_total_wait_s=0.25)"
    )
    assert info.value.transient and info.value.status_code is None
