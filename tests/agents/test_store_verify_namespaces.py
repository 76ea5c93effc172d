"""``clearance verify --store`` checks an entry whose namespace holds ``/`` against that entry.

A store item's origin is ``store:<namespace>/<key>``, and both may hold ``/`` (grants such as
``team/*`` invite it). Verify took the namespace to end at the first ``/``, so for
``team/notes`` it looked up ``team`` / ``notes/a``, found nothing, and checked nothing: a
forged value passed. It now looks up the entry the recorded tool call read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clearance import Agent, ContextStore, Orchestrator, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel


@pytest.fixture
def store(tmp_path: Path):
    with ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as s:
        yield s


async def read_once(ledger, store: ContextStore, namespace: str, key: str) -> str:
    steps = iter(
        [ToolCall(id="1", name="store_get", arguments={"namespace": namespace, "key": key}), "OK"]
    )

    def answer(request: ModelRequest) -> Any:
        return "SYNTH" if request.prompt.manifest.subject == "synthesis" else next(steps)

    agent = Agent(
        name="reader", instructions="You read.", tools=("store_get",),
        store_grants={"team/*": "read", "a": "read"},
    )  # fmt: skip
    orch = Orchestrator(
        Team(agents=(agent,), coordinator=Agent(name="lead", instructions="You lead.")),
        model=FunctionModel(answer), ledger=ledger, store=store,
    )  # fmt: skip
    task = Task(id="t1", title="Read", description="Read it.", assignee="reader")
    result = await orch.run_tasks([task])
    assert result.status == "completed", result.error
    return result.run_id


@pytest.mark.parametrize(
    ("namespace", "key"), [("team/notes", "a"), ("team/x/y", "b/c"), ("a", "b/c")]
)
async def test_a_forged_value_in_a_namespace_with_a_slash_is_found(
    ledger, store: ContextStore, namespace: str, key: str
) -> None:
    store.set(namespace, key, "REAL VALUE", "admin")
    if namespace == "a":  # another entry whose origin reads the same: a/b/c
        store.set("a/b", "c", "OTHER VALUE", "admin")
    run_id = await read_once(ledger, store, namespace, key)
    assert verify_run(ledger, run_id, store=store.get_entry).ok

    asked: list[tuple[str, str]] = []

    class Forged:
        def __init__(self, entry: Any) -> None:
            self.updated_at, self.value = entry.updated_at, "FORGED"

    def forged(ns: str, k: str) -> Forged | None:
        asked.append((ns, k))
        entry = store.get_entry(ns, k)
        return Forged(entry) if entry is not None else None

    report = verify_run(ledger, run_id, store=forged)
    assert asked == [(namespace, key)]
    assert [f.reason for f in report.findings] == ["the content is not the value in the store"]
