"""`deadline` behaves as `asyncio.timeout`: each case runs with both and must agree."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from clearance._core import deadline as deadline_module
from clearance._core.deadline import deadline

BOTH: list[Callable[[float], Any]] = [asyncio.timeout, deadline]


@pytest.fixture(params=BOTH, ids=["asyncio.timeout", "deadline"])
def limit(request: pytest.FixtureRequest) -> Callable[[float], Any]:
    return request.param  # type: ignore[no-any-return]


async def test_a_call_past_its_deadline_raises_timeout_error(limit):
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(TimeoutError):
        async with limit(0.05):
            await asyncio.sleep(10)
    assert 0.04 <= loop.time() - t0 < 5


async def test_a_call_within_its_deadline_returns_and_leaves_nothing_to_cancel(limit):
    async with limit(0.05):
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)  # past the deadline: nothing is cancelled any more
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_cancellation_from_elsewhere_stays_a_cancellation(limit):
    started = asyncio.Event()

    async def call() -> None:
        async with limit(10):
            started.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(call())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancellation_from_elsewhere_after_the_deadline_passed_stays_one(limit):
    # The deadline expires, then someone else cancels too: not a timeout any more.
    async def call() -> None:
        async with limit(0.01):
            try:
                await asyncio.sleep(10)
            finally:
                asyncio.current_task().cancel()  # type: ignore[union-attr]
                await asyncio.sleep(0)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(call())


async def test_many_calls_each_meet_their_own_deadline_in_any_order(limit):
    # Longer deadlines first, then shorter ones: the shared timer must be moved earlier.
    delays = [0.30, 0.25, 0.05, 0.20, 0.10, 0.15]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    ended: dict[float, float] = {}

    async def call(delay: float) -> None:
        try:
            async with limit(delay):
                await asyncio.sleep(10)
        except TimeoutError:
            ended[delay] = loop.time() - t0

    await asyncio.gather(*(call(d) for d in delays))
    assert sorted(ended) == sorted(delays)
    for delay, at in ended.items():
        assert delay - 0.01 <= at < delay + 1.0, (delay, at)
    assert [d for d, _ in sorted(ended.items(), key=lambda item: item[1])] == sorted(delays)


async def test_calls_that_return_do_not_delay_the_deadline_of_one_still_running(limit):
    loop = asyncio.get_running_loop()

    async def quick() -> None:
        async with limit(0.05):
            await asyncio.sleep(0)

    await asyncio.gather(*(quick() for _ in range(100)))
    t0 = loop.time()
    with pytest.raises(TimeoutError):
        async with limit(0.1):
            await asyncio.sleep(10)
    assert loop.time() - t0 < 1.0


async def test_nested_deadlines_the_inner_one_expiring(limit):
    async with limit(10):
        with pytest.raises(TimeoutError):
            async with limit(0.02):
                await asyncio.sleep(10)
        await asyncio.sleep(0)  # the outer scope still runs, not cancelled
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_nested_deadlines_the_outer_one_expiring(limit):
    with pytest.raises(TimeoutError):
        async with limit(0.02), limit(10):
            await asyncio.sleep(10)


async def test_a_deadline_already_past_on_entry_expires_at_the_first_await(limit):
    with pytest.raises(TimeoutError):
        async with limit(0):
            await asyncio.sleep(1)


def test_outside_a_running_loop_is_a_runtime_error():
    async def enter() -> None:
        await deadline(1).__aenter__()

    coroutine = enter()
    with pytest.raises(RuntimeError):
        coroutine.send(None)
    coroutine.close()


def test_the_shared_timer_does_not_keep_its_event_loop_alive():
    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def call() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        async with deadline(60):
            await asyncio.sleep(0)
        assert asyncio.get_running_loop() in deadline_module._TIMERS

    asyncio.run(call())
    gc.collect()
    assert loops[0]() is None  # the loop is gone, and its timer with it


async def test_a_timer_whose_handle_is_gone_is_set_again():
    async with deadline(60):  # the loop's shared timer, with its handle
        await asyncio.sleep(0)
    timer = deadline_module._TIMERS[asyncio.get_running_loop()]

    class Gone:
        pass

    gone = Gone()
    timer._handle = weakref.ref(gone)  # as if the loop had dropped the handle unfired
    timer._when = 0.0  # ...for a time before any new deadline
    del gone
    with pytest.raises(TimeoutError):
        async with deadline(0.02):
            await asyncio.sleep(5)
