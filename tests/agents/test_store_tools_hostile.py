"""The store tools given a hand-edited store: the model gets an error, the run goes on.

A ``BLOB`` value (SQLite keeps one in a text column) came back as bytes: ``store_get``
returned it as an entry read, and the tool loop, digesting it for the ledger, failed the
run with an ``AttributeError``. A value of JSON nested past the interpreter's stack gave
``store_get_structured``'s model ``RecursionError``'s own message. Now the first is an error
output naming the malformed entry, with no entry read, and the second says the JSON is
nested too deeply.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from clearance import Agent, ContextStore, Orchestrator, Task, Team
from clearance._agents.store_tools import store_tools
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel


async def test_a_blob_value_is_an_error_output_and_the_run_goes_on(
    ledger: Any, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    with ContextStore(f"sqlite:///{path}") as store:
        store.set("facts", "k", "text", "admin")
        conn = sqlite3.connect(path)
        conn.execute("UPDATE store_entries SET value = X'00ff'")
        conn.commit()
        conn.close()
        steps = iter(
            [ToolCall(id="1", name="store_get", arguments={"namespace": "facts", "key": "k"}), "OK"]
        )

        def answer(request: ModelRequest) -> Any:
            return "SYNTH" if request.prompt.manifest.subject == "synthesis" else next(steps)

        agent = Agent(
            name="reader", instructions="You read.", tools=("store_get",),
            store_grants={"facts": "read"},
        )  # fmt: skip
        orch = Orchestrator(
            Team(agents=(agent,), coordinator=Agent(name="lead", instructions="You lead.")),
            model=FunctionModel(answer), ledger=ledger, store=store,
        )  # fmt: skip
        task = Task(id="t1", title="Read", description="Read it.", assignee="reader")
        result = await orch.run_tasks([task])
    assert result.status == "completed", result.error
    (call,) = ledger.tool_calls(result.run_id)
    assert call.is_error and "malformed" in call.result and "facts/k" in call.result
    assert call.store_reads == []


async def test_json_nested_too_deeply_is_said_so(tmp_path: Path) -> None:
    with ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.set("facts", "deep", "[" * 100_000 + "]" * 100_000, "admin")
        tool = store_tools(store.view("reader", {"facts": "read"}))["store_get_structured"]
        output = await tool.call({"namespace": "facts", "key": "deep"})
    assert output.is_error and output.store_reads == ()
    assert output.content == (
        "error: the value of facts/deep is not valid JSON: nested too deeply to read"
    )
