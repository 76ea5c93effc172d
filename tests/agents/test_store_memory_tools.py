"""Agent memory in the store: extension, touch, structured reads, search, reads that extend TTL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from clearance import Agent, ContextStore, Orchestrator, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

COORD = Agent(name="lead", instructions="You lead.")
YEAR = timedelta(days=365)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock):
    with ContextStore(f"sqlite:///{tmp_path / 'store.db'}", clock=clock) as s:
        yield s


def scripted(*steps):
    """Task prompts get ``steps`` in order (tool calls, then the answer); synthesis gets SYNTH."""
    queue = iter(steps)

    def answer(request: ModelRequest):
        if request.prompt.manifest.subject == "synthesis":
            return "SYNTH"
        return next(queue)

    return FunctionModel(answer)


async def run_agent(ledger, store, agent: Agent, *steps):
    model = scripted(*steps)
    orch = Orchestrator(
        Team(agents=(agent,), coordinator=COORD), model=model, ledger=ledger, store=store
    )
    task = Task(id="t1", title="Work", description="Do the work.", assignee=agent.name)
    result = await orch.run_tasks([task])
    assert result.status == "completed", result.error
    return result, [r for r in model.requests if r.prompt.manifest.subject != "synthesis"]


def reader(**options) -> Agent:
    return Agent(
        name="reader",
        instructions="You read.",
        tools=("store_get", "store_query", "store_search", "store_get_structured"),
        store_grants={"facts": "read"},
        **options,
    )


async def test_reads_extend_ttl_through_the_tools_in_a_run(ledger, store, clock):
    for key in ("a", "b", "c", "d"):
        store.set("facts", key, f"value {key}", "admin", ttl_s=10)
    store.set("facts", "forever", "never expires", "admin")
    steps = (
        ToolCall(id="1", name="store_get", arguments={"namespace": "facts", "key": "a"}),
        ToolCall(id="2", name="store_query", arguments={"namespace": "facts", "prefix": "b"}),
        ToolCall(id="3", name="store_search", arguments={"text": "value c"}),
        ToolCall(id="4", name="store_get", arguments={"namespace": "facts", "key": "forever"}),
        "DONE",
    )
    await run_agent(ledger, store, reader(store_read_extends_ttl_s=1000), *steps)
    for key in ("a", "b", "c"):
        assert store.get_entry("facts", key).expires_at == clock.now + timedelta(seconds=1000)  # type: ignore[union-attr]
    assert store.get_entry("facts", "d").expires_at == clock.now + timedelta(seconds=10)  # type: ignore[union-attr]
    assert store.get_entry("facts", "forever").expires_at is None  # type: ignore[union-attr]


async def test_without_the_option_reads_leave_expiry_alone(ledger, store, clock):
    store.set("facts", "a", "value a", "admin", ttl_s=10)
    steps = (ToolCall(id="1", name="store_get", arguments={"namespace": "facts", "key": "a"}), "OK")
    await run_agent(ledger, store, reader(), *steps)
    assert store.get_entry("facts", "a").expires_at == clock.now + timedelta(seconds=10)  # type: ignore[union-attr]


async def test_extension_and_touch_through_tools_keep_the_later_expiry(ledger, store, clock):
    store.set("facts", "long", "kept a year", "admin", ttl_s=YEAR.total_seconds())
    store.set("facts", "forever", "never expires", "admin")
    writer = Agent(
        name="writer",
        instructions="You write.",
        tools=("store_set_with_extension", "store_touch"),
        store_grants={"facts": "read_write"},
    )
    steps = (
        ToolCall(id="1", name="store_set_with_extension",
                 arguments={"namespace": "facts", "key": "long", "value": "v2", "ttl_s": 60}),
        ToolCall(id="2", name="store_touch",
                 arguments={"namespace": "facts", "key": "long", "ttl_s": 5}),
        ToolCall(id="3", name="store_set_with_extension",
                 arguments={"namespace": "facts", "key": "forever", "value": "v2"}),
        ToolCall(id="4", name="store_set_with_extension",
                 arguments={"namespace": "facts", "key": "new", "value": "fresh", "ttl_s": 60}),
        "DONE",
    )  # fmt: skip
    await run_agent(ledger, store, writer, *steps)
    long = store.get_entry("facts", "long")
    assert long is not None and long.value == "v2" and long.expires_at == clock.now + YEAR
    forever = store.get_entry("facts", "forever")
    assert forever is not None and forever.value == "v2" and forever.expires_at is None
    assert store.get_entry("facts", "new").expires_at == clock.now + timedelta(seconds=60)  # type: ignore[union-attr]


async def test_search_never_returns_an_ungranted_namespace(ledger, store):
    granted = {"team/*": "read", "a_b": "read", "own": "write"}
    for namespace in ("team/notes", "team/plans", "a_b", "aXb", "team_secret", "secret", "own"):
        store.set(namespace, "k", f"NEEDLE in {namespace}", "admin")
    searcher = Agent(
        name="searcher", instructions="You search.", tools=("store_search",),
        store_grants=granted,
    )  # fmt: skip
    steps = (ToolCall(id="1", name="store_search", arguments={"text": "needle", "limit": 50}), "OK")
    result, requests = await run_agent(ledger, store, searcher, *steps)
    last = requests[-1].prompt
    found = sorted(o for o in last.manifest.origins if o.startswith("store:"))
    assert found == ["store:a_b/k", "store:team/notes/k", "store:team/plans/k"]
    text = last.messages[1].content
    for hidden in ("aXb", "team_secret", "secret", "own"):
        assert f"NEEDLE in {hidden}" not in text.splitlines()
    assert "NEEDLE in team/notes" in text.splitlines()
    report = verify_run(ledger, result.run_id, store=store.get_entry)
    assert report.ok, [str(f) for f in report.findings]
    # The view itself: no grant to read, no result.
    assert store.view("nobody", {"own": "write"}).search("needle") == []


async def test_get_structured_reads_json_and_reports_invalid_json(ledger, store):
    store.set("facts", "cfg", '{"depth": 3}', "admin")
    store.set("facts", "bad", "{not json", "admin")
    steps = (
        ToolCall(id="1", name="store_get_structured",
                 arguments={"namespace": "facts", "key": "cfg"}),
        ToolCall(id="2", name="store_get_structured",
                 arguments={"namespace": "facts", "key": "bad"}),
        "DONE",
    )  # fmt: skip
    result, requests = await run_agent(ledger, store, reader(), *steps)
    records = ledger.tool_calls(result.run_id)
    assert [(r.name, r.is_error) for r in records] == [
        ("store_get_structured", False),
        ("store_get_structured", True),
    ]
    assert "not valid JSON" in records[1].result
    assert "store:facts/cfg" in requests[-1].prompt.manifest.origins


async def test_verify_with_the_store_catches_a_store_item_that_is_not_the_stored_value(
    ledger, store
):
    store.set("facts", "a", "REAL VALUE", "admin")
    steps = (ToolCall(id="1", name="store_get", arguments={"namespace": "facts", "key": "a"}), "OK")
    result, _ = await run_agent(ledger, store, reader(), *steps)
    assert verify_run(ledger, result.run_id, store=store.get_entry).ok

    class Forged:
        def __init__(self, entry):
            self.updated_at, self.value = entry.updated_at, "FORGED"

    report = verify_run(
        ledger, result.run_id, store=lambda ns, key: Forged(store.get_entry(ns, key))
    )
    assert [f.reason for f in report.findings] == ["the content is not the value in the store"]
