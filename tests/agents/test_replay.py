"""`ReplaySource`: recorded steps handed out in order, only for identical prompts.

The end-to-end behaviour (SIGKILL at every step boundary, then `clearance resume`) is in
``tests/cli/test_durable_resume_cli.py``; these tests pin the matching rules on a ledger
written through its public recorder methods.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from clearance import Tool
from clearance._agents.replay import ReplaySource
from clearance._agents.tools import mark_tool, record_started
from clearance._context.builder import ContextBuilder
from clearance._core.errors import ConfigError
from clearance._core.spec import Agent, Task
from clearance._core.teamfile_models import ToolEntrySpec
from clearance._orchestration.resume_checks import check_run_record
from clearance._state.graph import TaskGraph
from clearance._state.ledger import RunLedger
from clearance._state.queue import TaskQueue
from clearance.models import ModelResponse, Usage, estimate_tokens
from clearance.models._base import ToolCall

T0 = datetime(2026, 1, 1, tzinfo=UTC)
AGENT = Agent(name="scribe", instructions="You append lines.")


def prompt(description: str):  # type: ignore[no-untyped-def]
    graph = TaskGraph([Task(id="a", title="A", description=description, assignee="scribe")])
    builder = ContextBuilder(count_tokens=estimate_tokens)
    return builder.build_task_prompt(graph.get("a"), agent=AGENT, queue=TaskQueue(graph))


def answered(ledger: RunLedger, text: str, calls: tuple[ToolCall, ...] = ()) -> str:
    call_id = ledger.record_request(
        run_id="run_1", subject="task:a", agent="scribe", model_id="m",
        prompt=prompt("first"), started_at=T0,
    )  # fmt: skip
    if calls:
        ledger.record_event("run_1", "model_tool_calls", "task:a", {
            "call_id": call_id, "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
            ],
        })  # fmt: skip
    response = ModelResponse(text=text, usage=Usage(requests=1, prompt_tokens=7),
                             model_id="m", tool_calls=calls)  # fmt: skip
    ledger.finish_call(call_id, run_id="run_1", response=response, error=None, latency_s=0.1)
    return call_id


@pytest.fixture
def run(ledger: RunLedger) -> RunLedger:
    ledger.start_run(run_id="run_1", team="t", goal=None, graph=None, config={})
    return ledger


def test_a_recorded_answer_is_given_back_only_for_the_identical_prompt(run: RunLedger) -> None:
    asked = (ToolCall(id="c0", name="append", arguments={"line": "0"}),)
    original = answered(run, "", asked)
    replay = ReplaySource.load(run, "run_1")
    got = replay.answer("task:a", prompt("first"))
    assert isinstance(got, ModelResponse) and got.tool_calls == asked
    assert replay.answer("task:a", prompt("first")) is None  # no second record: sent
    assert replay.summary() == "replayed 1 model calls and 0 tool calls, sent 1"
    (event,) = run.events("run_1", "replayed")
    assert event.data["original"] == original and event.data["record"] == "call"

    other = ReplaySource.load(run, "run_1")
    assert other.answer("task:a", prompt("changed")) is None  # another prompt: live
    assert other.answer("task:a", prompt("first")) is None  # and stays live


def test_a_recorded_answer_is_not_given_back_when_the_request_parameters_differ(
    run: RunLedger,
) -> None:
    asked = {"max_tokens": 100, "temperature": 0.7, "top_p": 0.9, "seed": None,
             "stop": ["END"], "repeat_penalty": None, "tools": [], "json_schema": None}  # fmt: skip
    call_id = run.record_request(
        run_id="run_1", subject="task:a", agent="scribe", model_id="m", prompt=prompt("first"),
        started_at=T0, parameters=asked,
    )  # fmt: skip
    response = ModelResponse(text="warm", usage=Usage(requests=1), model_id="m")
    run.finish_call(call_id, run_id="run_1", response=response, error=None, latency_s=0.1)
    colder = {**asked, "temperature": 0.0}
    assert ReplaySource.load(run, "run_1").answer("task:a", prompt("first"), colder) is None
    same = ReplaySource.load(run, "run_1").answer("task:a", prompt("first"), dict(asked))
    assert isinstance(same, ModelResponse) and same.text == "warm"


def test_a_pending_request_is_sent_again_under_its_own_row(run: RunLedger) -> None:
    answered(run, "done")
    pending = run.record_request(
        run_id="run_1", subject="task:a", agent="scribe", model_id="m", prompt=prompt("next"),
        started_at=T0,
    )  # fmt: skip
    replay = ReplaySource.load(run, "run_1")
    assert isinstance(replay.answer("task:a", prompt("first")), ModelResponse)
    assert replay.answer("task:a", prompt("next")) == pending
    assert replay.sent == 1


def test_tool_calls_keep_their_ids_and_a_started_one_asks_unless_idempotent(
    run: RunLedger,
) -> None:
    calls = (
        ToolCall(id="c0", name="append", arguments={"line": "0"}),
        ToolCall(id="c1", name="append", arguments={"line": "1"}),
    )
    answered(run, "", calls)
    run.record_tool_call(
        run_id="run_1", tool_call_id="tool_0", subject="task:a", agent="scribe", step=1,
        name="append", arguments={"line": "0"}, result="appended 0", is_error=False,
    )  # fmt: skip

    def append(line: str) -> str:
        """Append."""
        return line

    tool = Tool.from_function(append)
    asyncio.run(
        record_started(run, "run_1", "task:a", step=1, call_id="tool_1", call=calls[1], tool=tool)
    )
    replay = ReplaySource.load(run, "run_1")
    replay.answer("task:a", prompt("first"))
    assert replay.tool_ids("task:a", 1, calls) == ["tool_0", "tool_1"]
    assert replay.recorded_output("task:a", "tool_0") == "appended 0"
    assert replay.recorded_output("task:a", "tool_1") is None
    denial = asyncio.run(replay.may_rerun("tool_1", "scribe", "append", {"line": "1"}))
    assert denial is not None and "may have run" in denial  # no person to ask: not run


def test_an_edited_record_stops_the_resume_naming_it(run: RunLedger, tmp_path: Path) -> None:
    import sqlite3

    call_id = answered(run, "the answer")
    run.close()
    db_path = tmp_path / "runs.db"
    db = sqlite3.connect(db_path)
    db.execute("UPDATE calls SET response = 'edited' WHERE call_id = ?", (call_id,))
    db.commit()
    db.close()
    # Resume's one check of the records, made before anything is replayed or run.
    with RunLedger(f"sqlite:///{db_path}") as ledger, pytest.raises(ConfigError) as raised:
        check_run_record(ledger, "run_1")
    assert call_id in str(raised.value) and "nothing was replayed" in str(raised.value)


def test_tool_flags_come_from_the_tool_or_its_team_file_entry() -> None:
    def append(line: str) -> str:
        """Append."""
        return line

    assert (Tool.from_function(append).idempotent, Tool.from_function(append).replay) == (
        False,
        True,
    )
    mark_tool(append, idempotent=True, replay=False)
    tool = Tool.from_function(append)
    assert (tool.idempotent, tool.replay) == (True, False)
    entry = ToolEntrySpec.model_validate({"function": "m:f", "idempotent": True})
    assert (entry.idempotent, entry.replay) == (True, True)
    with pytest.raises(ValueError):
        ToolEntrySpec.model_validate({"function": "m:f", "idempotent": "sometimes"})
