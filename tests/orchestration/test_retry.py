"""Retry policy: what is transient, how long to wait, Retry-After, and the OpenAI mapping."""

import asyncio
import time
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from clearance import ConfigError, LimitExceeded, ModelError, RetryPolicy
from clearance._agents.retry import is_transient, with_retries
from clearance.models._transient import is_transient_status, parse_retry_after

NO_WAIT = RetryPolicy(initial_s=0, max_s=0, jitter_s=0)


def flaky(errors):
    """An attempt function raising ``errors`` in turn, then returning the attempt number."""
    seen = []

    async def call(attempt):
        seen.append(attempt)
        if errors:
            raise errors.pop(0)
        return attempt

    return call, seen


async def test_transient_errors_are_retried_until_success():
    call, seen = flaky([ModelError("503", transient=True), LimitExceeded(
        "attempt_timeout_s", value=2, maximum=1, subject="task:a")])  # fmt: skip
    assert await with_retries(call, retries=2, policy=NO_WAIT) == 3
    assert seen == [1, 2, 3]


async def test_the_last_error_is_raised_when_retries_run_out():
    errors = [ModelError(f"boom {i}", transient=True) for i in range(3)]
    call, seen = flaky(errors[:])
    with pytest.raises(ModelError, match="boom 2"):
        await with_retries(call, retries=2, policy=NO_WAIT)
    assert seen == [1, 2, 3]


@pytest.mark.parametrize(
    "error",
    [
        ModelError("HTTP 400", status_code=400),
        ModelError("empty completion"),
        LimitExceeded("max_prompt_tokens", value=9, maximum=1, subject=None),
        ValueError("not ours"),
    ],
)
async def test_other_errors_fail_at_once(error):
    call, seen = flaky([error])
    with pytest.raises(type(error)):
        await with_retries(call, retries=5, policy=NO_WAIT)
    assert seen == [1]


async def test_retry_after_is_honoured_and_capped():
    call, _ = flaky([ModelError("429", transient=True, retry_after_s=0.3)])
    t0 = time.perf_counter()
    await with_retries(call, retries=1, policy=NO_WAIT)
    assert 0.3 <= time.perf_counter() - t0 < 2

    capped = RetryPolicy(initial_s=0, max_s=0, jitter_s=0, max_retry_after_s=0.01)
    call, seen = flaky([ModelError("429", transient=True, retry_after_s=3600)])
    # The cap (0.01 s), not the hour asked for: a wait past 10 s fails with TimeoutError.
    assert await asyncio.wait_for(with_retries(call, retries=1, policy=capped), 10) == 2
    assert seen == [1, 2]


def test_backoff_doubles_up_to_the_maximum_with_bounded_jitter():
    from tenacity import RetryCallState

    policy = RetryPolicy(initial_s=1, max_s=5, jitter_s=0.5)
    waits = []
    for attempt in range(1, 7):
        state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})
        state.attempt_number = attempt
        waits.append(policy.wait_s(state))
    for attempt, wait in enumerate(waits, start=1):
        base = min(2 ** (attempt - 1), 5)
        assert base <= wait <= base + 0.5


def test_policy_rejects_negative_values():
    with pytest.raises(ConfigError, match=r"retry_policy\.jitter_s"):
        RetryPolicy(jitter_s=-1)


def test_transient_statuses():
    assert [s for s in (400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 504)
            if is_transient_status(s)] == [408, 409, 429, 500, 502, 503, 504]  # fmt: skip
    assert not is_transient(ModelError("x"))
    assert is_transient(ModelError("x", transient=True))


def test_parse_retry_after():
    now = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert parse_retry_after({"Retry-After": "7"}) == 7
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    in_a_minute = format_datetime(datetime.fromtimestamp(now + 60, UTC), usegmt=True)
    assert parse_retry_after({"Retry-After": in_a_minute}, now=now) == 60
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-3"}) is None
    assert parse_retry_after({"Retry-After": "nan"}) is None
    assert parse_retry_after({}) is None


async def test_the_calls_deadline_is_not_retried():
    call, seen = flaky([LimitExceeded("timeout_s", value=2, maximum=1, subject="task:a")])
    with pytest.raises(LimitExceeded, match="timeout_s"):
        await with_retries(call, retries=3, policy=NO_WAIT)
    assert seen == [1]
