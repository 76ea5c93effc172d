"""`within` behaves as ``asyncio.timeout``: expiry, outside cancellation, nesting, races.

Each case is run under both, and their outcomes (result or exception, the task's cancel
count after) must be the same.
"""

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from clearance._agents.deadline import within


async def under_timeout(awaitable: Awaitable[object], delay_s: float) -> object:
    async with asyncio.timeout(delay_s):
        return await awaitable


Wrap = Callable[[Awaitable[object], float], Awaitable[object]]
BOTH = pytest.mark.parametrize("wrap", [within, under_timeout], ids=["within", "timeout"])


async def outcome(coro: Awaitable[object]) -> tuple[str, int]:
    """``(result or exception name, the task's cancel count after)``, in a fresh task."""

    async def body() -> tuple[str, int]:
        task = asyncio.current_task()
        assert task is not None
        try:
            found = repr(await coro)
        except (TimeoutError, asyncio.CancelledError) as exc:
            found = type(exc).__name__
        return found, task.cancelling()

    return await asyncio.create_task(body())


@BOTH
def test_returns_in_time_and_leaves_no_cancel_request(wrap: Wrap) -> None:
    async def main() -> tuple[str, int]:
        result = await outcome(wrap(asyncio.sleep(0, "done"), 5))
        await asyncio.sleep(0.02)  # no stray cancellation lands later either
        return result

    assert asyncio.run(main()) == ("'done'", 0)


@BOTH
def test_the_deadline_fires(wrap: Wrap) -> None:
    async def main() -> tuple[str, int]:
        return await outcome(wrap(asyncio.sleep(5), 0.01))

    assert asyncio.run(main()) == ("TimeoutError", 0)


@BOTH
def test_an_expired_deadline_fires_at_once(wrap: Wrap) -> None:
    async def main() -> tuple[str, int]:
        return await outcome(wrap(asyncio.sleep(5), -1))

    assert asyncio.run(main()) == ("TimeoutError", 0)


@BOTH
def test_a_cancel_from_outside_is_not_a_timeout(wrap: Wrap) -> None:
    async def main() -> str:
        task = asyncio.create_task(wrap(asyncio.sleep(5), 5))
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        return "finished"

    assert asyncio.run(main()) == "cancelled"


@BOTH
def test_a_cancel_from_outside_as_the_deadline_fires_stays_a_cancel(wrap: Wrap) -> None:
    async def main() -> str:
        async def body() -> object:
            asyncio.get_running_loop().call_later(0.01, task.cancel)  # the same moment
            return await wrap(asyncio.sleep(5), 0.01)

        task = asyncio.create_task(body())
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled"
        except TimeoutError:
            return "timeout"
        return "finished"

    assert asyncio.run(main()) == "cancelled"


@BOTH
def test_nested_the_inner_deadline_fires_first(wrap: Wrap) -> None:
    async def inner_times_out() -> str:
        try:
            await wrap(asyncio.sleep(5), 0.01)
        except TimeoutError:
            return "inner timed out"
        return "inner finished"

    async def main() -> tuple[str, int]:
        return await outcome(wrap(inner_times_out(), 5))

    assert asyncio.run(main()) == ("'inner timed out'", 0)


@BOTH
def test_nested_the_outer_deadline_fires_first(wrap: Wrap) -> None:
    async def inner() -> str:
        try:
            await wrap(asyncio.sleep(5), 5)
        except TimeoutError:
            return "the inner one saw a timeout"
        return "inner finished"

    async def main() -> tuple[str, int]:
        return await outcome(wrap(inner(), 0.01))

    assert asyncio.run(main()) == ("TimeoutError", 0)


@BOTH
def test_expired_as_the_awaited_code_finished(wrap: Wrap) -> None:
    """The timer fires, but the awaited code swallows the cancellation and returns."""

    async def stubborn() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "swallowed"
        return "slept"

    async def main() -> tuple[str, int]:
        return await outcome(wrap(stubborn(), 0.01))

    assert asyncio.run(main()) == ("'swallowed'", 0)


@BOTH
def test_another_error_goes_through(wrap: Wrap) -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def main() -> None:
        await wrap(fails(), 5)

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(main())
