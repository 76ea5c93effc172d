"""Retrying transient model errors: exponential backoff with jitter, honouring ``Retry-After``.

Built on tenacity. An error is transient when a retry of the same call may succeed: a
`ModelError` whose ``transient`` field is set by its provider (connection errors, provider
timeouts, HTTP 429 and 5xx) and an attempt abandoned at ``attempt_timeout_s`` (`LimitExceeded`
on ``attempt_timeout_s``). Every other error, HTTP 4xx client errors included, fails at once;
so does the call's own deadline (``timeout_s``), which covers every attempt and every wait: a
wait (``Retry-After`` or backoff) that would end past it is not waited, the last error is
raised at once. Without a deadline, the waits of one call add up to at most
`RetryPolicy.max_total_wait_s` (`MAX_TOTAL_WAIT_S` by default): past it, the last error is
raised, saying so.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from clearance._core.errors import ConfigError, LimitExceeded, ModelError
from clearance._core.names import check_number

__all__ = [
    "MAX_TOTAL_WAIT_S",
    "RetryPolicy",
    "is_transient",
    "retry_after",
    "retry_after_s",
    "with_retries",
]

T = TypeVar("T")

MAX_TOTAL_WAIT_S = 900.0
"""Most seconds one model call waits between its attempts in all, by default (15 minutes):
without it, an agent with no ``timeout_s`` could wait ``retries`` (up to 100) times
``max_retry_after_s`` (300 s) on 429s, about 8 hours."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How long to wait between attempts of a model call.

    The wait before retry ``n`` (1-based) is ``min(initial_s * 2 ** (n - 1), max_s)`` plus a
    uniform random jitter in ``[0, jitter_s]`` (tenacity's ``wait_exponential_jitter``). When
    the provider sent ``Retry-After``, that many seconds are waited instead, capped at
    ``max_retry_after_s``. How many retries an agent gets is its ``limits.retries``.

    Attributes:
        initial_s: Seconds before the first retry (0 or more).
        max_s: Most seconds of backoff before any retry (0 or more).
        jitter_s: Most seconds of random jitter added to each backoff (0 or more).
        max_retry_after_s: Most seconds a provider's ``Retry-After`` may make us wait.
        max_total_wait_s: Most seconds one call waits between its attempts in all; a wait
            that would bring the sum past it is not waited, the last error is raised,
            naming this bound.

    Raises:
        ConfigError: A value is negative.
    """

    initial_s: float = 1.0
    max_s: float = 60.0
    jitter_s: float = 1.0
    max_retry_after_s: float = 300.0
    max_total_wait_s: float = MAX_TOTAL_WAIT_S

    def __post_init__(self) -> None:
        for name in ("initial_s", "max_s", "jitter_s", "max_retry_after_s", "max_total_wait_s"):
            check_number(f"retry_policy.{name}", getattr(self, name))
            if getattr(self, name) < 0:
                raise ConfigError("must be 0 or more", field=f"retry_policy.{name}")

    def wait_s(self, retry_state: RetryCallState) -> float:
        """Seconds to wait before the next attempt (a tenacity ``wait`` callable)."""
        outcome = retry_state.outcome
        exc = outcome.exception() if outcome is not None else None
        after = retry_after_s(exc) if exc is not None else None
        if after is not None:
            return min(after, self.max_retry_after_s)
        backoff = wait_exponential_jitter(
            multiplier=self.initial_s, max=self.max_s, jitter=self.jitter_s
        )
        return float(backoff(retry_state))


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the call that raised ``exc`` may succeed.

    True for a `ModelError` with ``transient`` set and for a `LimitExceeded` on
    ``attempt_timeout_s`` (one attempt abandoned); false for anything else, the call's
    deadline (``timeout_s``) included.
    """
    if isinstance(exc, ModelError):
        return exc.transient
    return isinstance(exc, LimitExceeded) and exc.limit == "attempt_timeout_s"


def retry_after_s(exc: BaseException) -> float | None:
    """The seconds a provider asked to wait before a retry (0 or more, maybe ``inf``), or ``None``.

    A `ModelError` may come from any `ChatModel`, a user's own included, so its
    ``retry_after_s`` is checked: anything but a number that is not NaN (a string, a
    boolean, NaN) is ``None``, and the policy's backoff is waited instead. A NaN wait would
    never end, nor be stopped by the call's deadline.
    """
    value = exc.retry_after_s if isinstance(exc, ModelError) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return max(float(value), 0.0)


async def with_retries(
    call: Callable[[int], Awaitable[T]], *, retries: int, policy: RetryPolicy
) -> T:
    """Await ``call(attempt)`` until it succeeds, retrying transient errors.

    Args:
        call: One attempt; receives the attempt number (1-based).
        retries: Most retries after the first attempt (0: no retry).
        policy: Waits between attempts.

    Returns:
        What the first successful attempt returned.

    Raises:
        Exception: The error of the last attempt, unchanged, once ``retries`` retries are
            used up; a non-transient error at once.
    """
    # The common case costs one call: tenacity's machinery is entered only once a first
    # attempt has failed with an error worth retrying.
    try:
        return await call(1)
    except Exception as exc:
        if retries < 1 or not is_transient(exc):
            raise
        first = exc
    return await retry_after(first, call, retries=retries, policy=policy)


async def retry_after(
    first: Exception,
    call: Callable[[int], Awaitable[T]],
    *,
    retries: int,
    policy: RetryPolicy,
    time_left: Callable[[], float] | None = None,
) -> T:
    """`with_retries` once its first attempt failed with ``first``: attempts 2 and on.

    For a caller that makes the first attempt itself (one coroutine less per call).

    Args:
        first: The first attempt's error.
        call: One attempt; receives the attempt number (1-based).
        retries: Most retries after the first attempt (0: no retry).
        policy: Waits between attempts.
        time_left: Seconds left before the call's deadline; a wait that would not end
            before it is not waited (no retry could finish in time). ``None``: no deadline.

    Raises:
        Exception: ``first`` when it is not transient or ``retries`` is 0; else the error of
            the last attempt, once the retries are used up, or the next wait would pass the
            deadline; a non-transient one at once. When the next wait would bring the waits
            past ``policy.max_total_wait_s``, the last error (a `ModelError`) is raised again
            with that bound named in its message.
    """
    if retries < 1 or not is_transient(first):
        raise first

    attempts = stop_after_attempt(retries + 1)
    over: list[float] = []  # the waits' sum, had the next one been waited

    def stop(state: RetryCallState) -> bool:
        left = time_left() if time_left is not None else math.inf
        # tenacity sets the wait before asking whether to stop
        if attempts(state) or state.upcoming_sleep >= left:
            return True
        total = state.idle_for + state.upcoming_sleep
        if total > policy.max_total_wait_s:
            over.append(total)
            return True
        return False

    retrying = AsyncRetrying(
        stop=stop,
        wait=policy.wait_s,
        retry=retry_if_exception(is_transient),
        reraise=True,
    )
    try:
        async for attempt in retrying:
            with attempt:
                number = attempt.retry_state.attempt_number
                if number == 1:
                    # Replay the first attempt's failure, so tenacity decides on it (and
                    # waits after it) exactly as if it had made that call itself.
                    raise first
                return await call(number)
    except ModelError as exc:
        if not over:
            raise
        text = str(exc).removeprefix(f"{exc.model_id}: ") if exc.model_id else str(exc)
        raise ModelError(
            f"{text} (not retried: the waits between attempts would reach {over[0]:g} s, "
            f"past retry_policy.max_total_wait_s={policy.max_total_wait_s:g})",
            model_id=exc.model_id, transient=exc.transient, retry_after_s=exc.retry_after_s,
            status_code=exc.status_code, paid=exc.paid,
        ) from exc  # fmt: skip
    raise AssertionError("unreachable: tenacity either returns or re-raises")  # pragma: no cover
