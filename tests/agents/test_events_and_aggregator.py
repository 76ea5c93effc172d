import asyncio

import pytest

from clearance import LimitExceeded
from clearance._agents.spawn import SPAWN_REQUEST, SPAWN_RESULT
from clearance.subagents import Aggregator, EventBus, SpawnRequest, SpawnResult, SpawnWorker


async def test_publish_subscribe_by_topic() -> None:
    bus = EventBus()
    seen: list[tuple[str, str]] = []
    unsubscribe = bus.subscribe("a", lambda e: seen.append((e.topic, e.payload["x"])))
    bus.publish("a", {"x": "1"})
    bus.publish("b", {"x": "2"})
    unsubscribe()
    bus.publish("a", {"x": "3"})
    assert seen == [("a", "1")]


async def test_wait_for_matches_correlation_id_before_or_after_publishing() -> None:
    bus = EventBus()
    bus.publish("reply", {"n": 1}, correlation_id="early")
    assert (await bus.wait_for("reply", "early", timeout_s=0.1)).payload["n"] == 1

    async def later() -> None:
        await asyncio.sleep(0.01)
        bus.publish("reply", {"n": 2}, correlation_id="other")
        bus.publish("reply", {"n": 3}, correlation_id="late")

    task = asyncio.create_task(later())
    event = await bus.wait_for("reply", "late", timeout_s=1)
    await task
    assert event.payload["n"] == 3 and event.correlation_id == "late"


async def test_wait_for_times_out_with_limit_exceeded() -> None:
    bus = EventBus()
    with pytest.raises(LimitExceeded) as info:
        await bus.wait_for("reply", "nobody", timeout_s=0.02)
    assert info.value.limit == "timeout_s" and info.value.subject == "reply:nobody"


async def test_spawn_goes_over_the_bus_as_request_and_result() -> None:
    bus = EventBus()
    received: list[SpawnRequest] = []

    async def run_child(request: SpawnRequest) -> str:
        received.append(request)
        return f"{request.child_id} did: {request.goal}"

    async with SpawnWorker(bus, run_child):
        request = SpawnRequest(parent_id="p", child_id="c", goal="count files", tools=("ls",),
                               timeout_s=1)  # fmt: skip
        bus.publish(SPAWN_REQUEST, request.to_payload(), correlation_id="corr-1")
        event = await bus.wait_for(SPAWN_RESULT, "corr-1", timeout_s=1)
    assert received == [request]
    result = SpawnResult.from_payload(event.payload)
    assert result == SpawnResult(parent_id="p", child_id="c", success=True,
                                 result="c did: count files")  # fmt: skip
    assert set(event.payload) == {"parent_id", "child_id", "success", "result", "error"}


async def test_aggregator_merges_duplicates_and_keeps_attribution() -> None:
    bus = EventBus()
    answers = {
        "a": "- The API uses JSON.\n- Errors are logged.",
        "b": "* the api uses json\n* Retries are capped at 3.",
        "c": "1. Errors are logged.",
    }

    async def run_child(request: SpawnRequest) -> str:
        return answers[request.child_id]

    async with SpawnWorker(bus, run_child):
        result = await Aggregator(bus, "parent").fan_out(
            {"a": "api", "b": "retries", "c": "logging"}, timeout_s=1
        )
    assert result.complete and result.missing == ()
    assert [(f.text, f.child_ids) for f in result.findings] == [
        ("The API uses JSON.", ("a", "b")),
        ("Errors are logged.", ("a", "c")),
        ("Retries are capped at 3.", ("b",)),
    ]
    text = result.combined_text()
    assert text.splitlines()[0] == "COMPLETE: all 3 subagents answered."
    assert "- The API uses JSON. [a, b]" in text


async def test_aggregator_times_out_cleanly_and_flags_partial_results() -> None:
    bus = EventBus()

    async def run_child(request: SpawnRequest) -> str:
        if request.child_id == "slow":
            await asyncio.sleep(30)
        if request.child_id == "broken":
            raise RuntimeError("disk full")
        return f"finding from {request.child_id}"

    async with SpawnWorker(bus, run_child):
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        result = await Aggregator(bus, "parent").fan_out(
            {"fast": "g1", "slow": "g2", "broken": "g3"}, timeout_s=0.2
        )
        assert loop.time() - t0 < 2
    assert not result.complete
    assert set(result.missing) == {"slow", "broken"}
    statuses = {o.child_id: o.status for o in result.outcomes}
    assert statuses == {"fast": "ok", "slow": "timed_out", "broken": "failed"}
    assert [f.text for f in result.findings] == ["finding from fast"]
    text = result.combined_text()
    assert text.startswith("PARTIAL: 1 of 3 subagents answered; missing: slow, broken.")
    assert "Missing slow (timed_out)" in text and "disk full" in text
