"""The context store attacked through its search, alike on SQLite and PostgreSQL.

``search`` (an agent's ``store_search``) promises the live entries whose key or value holds
the text, whatever its case. It lowered the text with Python's ``str.lower`` and the column
with the database's: on PostgreSQL ``İ`` lowers to one letter there and to two in Python, so
an entry holding ``İstanbul`` was not found by a search for ``İstanbul`` itself; and on SQLite
``str.lower`` lowers a ``Σ`` by the letters around it (final sigma or not), so ``ΟΔΟΣΑ``
was not found by ``ΟΔΟΣ``. The text and the column are now folded by one function on each
database (PostgreSQL's ``lower`` on both; Python's ``casefold``, letter by letter, on SQLite),
so an entry that holds the text is always found.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from clearance import ContextStore
from clearance._agents.store_tools import store_tools


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store(store_url: str) -> Iterator[ContextStore]:
    with ContextStore(store_url, clock=Clock()) as s:
        yield s


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("in İstanbul today", "İstanbul"),
        ("in İstanbul today", "İSTANBUL"),
        ("ΟΔΟΣΑ", "ΟΔΟΣ"),
        ("ΟΔΟΣ ΓΔ", "ΟΔΟΣ"),
        ("Straße", "Straße"),
        ("ǅemal", "ǅ"),
        ("K for Kelvin", "K for"),
        ("plain", "PLAIN"),
    ],
)
def test_an_entry_holding_the_text_is_found_on_both(
    store: ContextStore, value: str, needle: str
) -> None:
    store.set("ns", "by-value", value, "w")
    store.set("ns", value, "x", "w")  # the text in the key
    store.set("ns", "other", "nothing here", "w")
    found = sorted(e.key for e in store.search(["ns"], needle, 10))
    assert found == sorted(["by-value", value])


def test_an_agents_store_search_finds_the_entry_holding_its_text(store: ContextStore) -> None:
    store.set("facts", "city", "born in İstanbul", "w")
    store.set("secret", "city", "born in İstanbul", "w")
    tools = store_tools(store.view("agent", {"facts": "read"}))
    out = tools["store_search"].run({"text": "İstanbul"})
    assert not out.is_error
    assert out.content == "1 entries: facts/city"
    assert [(e.namespace, e.value) for e in out.store_reads] == [("facts", "born in İstanbul")]


# -- grants no namespace can match ---------------------------------------------------------
# A grant holding a NUL or a lone surrogate (YAML's "\0", "\ud800") was accepted, and made
# every ``store_search`` of its agent fail ("pattern: holds a NUL character"), its other
# grants' entries too; one longer than a namespace can be granted nothing. Each is refused
# where grants are checked (the team file, `Agent`, `StoreGrants`), naming the grant.


@pytest.mark.parametrize(
    "pattern",
    ["fa\x00cts", "facts\x00*", "\ud800", "\ud800*", "n" * 256, "n" * 256 + "*"],
)
def test_a_grant_no_namespace_can_match_is_refused(pattern: str) -> None:
    from clearance import Agent, ConfigError
    from clearance._state.grants import StoreGrants

    grants = {"facts": "read", pattern: "read"}
    with pytest.raises(ConfigError) as agent_error:
        Agent(name="a", instructions="x", tools=("store_search",), store_grants=grants)
    assert "agents.a.store_grants." in str(agent_error.value)
    with pytest.raises(ConfigError) as parse_error:
        StoreGrants.parse(grants)
    assert "store_grants." in str(parse_error.value)


@pytest.mark.parametrize("pattern", ["n" * 255, "n" * 255 + "*", "facts\n", "facts *"])
def test_a_grant_a_namespace_can_match_is_kept(store: ContextStore, pattern: str) -> None:
    namespace = pattern.removesuffix("*")
    store.set(namespace, "k", "needle", "w")
    view = store.view("a", {"facts": "read", pattern: "read"})
    assert [e.namespace for e in view.search("needle", 10)] == [namespace]


async def test_a_runs_store_search_shows_the_model_the_entry_holding_its_text(
    store: ContextStore, ledger: Any
) -> None:
    from clearance import Agent, Orchestrator, Task, Team
    from clearance._context.verify import verify_run
    from clearance.models import ModelRequest, ToolCall
    from clearance.testing import FunctionModel

    store.set("facts", "city", "born in İstanbul", "w")
    seen: list[str] = []
    steps = iter([ToolCall(id="1", name="store_search", arguments={"text": "İstanbul"}), "OK"])

    def answer(request: ModelRequest) -> Any:
        if request.prompt.manifest.subject == "synthesis":
            return "SYNTH"
        seen.append("\n".join(m.content for m in request.prompt.messages))
        return next(steps)

    reader = Agent(
        name="reader", instructions="You read.", tools=("store_search",),
        store_grants={"facts": "read"},
    )  # fmt: skip
    orch = Orchestrator(
        Team(agents=(reader,), coordinator=Agent(name="lead", instructions="You lead.")),
        model=FunctionModel(answer), ledger=ledger, store=store,
    )  # fmt: skip
    task = Task(id="t1", title="Find", description="Find the city.", assignee="reader")
    result = await orch.run_tasks([task])
    assert result.status == "completed", result.error
    assert "1 entries: facts/city" in seen[1]
    assert "born in İstanbul" in seen[1]
    (call,) = ledger.tool_calls(result.run_id)
    assert [(r["namespace"], r["key"]) for r in call.store_reads] == [("facts", "city")]
    assert verify_run(ledger, result.run_id, store=store.get_entry).ok
