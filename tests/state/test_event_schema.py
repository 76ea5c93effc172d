"""Recorded events are written and read through one schema per kind; verify reports a bad one."""

from __future__ import annotations

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from clearance import ConfigError, RunLedger
from clearance._context.verify import verify_run
from clearance._core.vocabulary import ClarificationKind, EventKind, RecordKind
from clearance.cli import app
from clearance.events import (
    SCHEMAS,
    BudgetEvent,
    FileClarificationEvent,
    HookContextEvent,
    McpCallEvent,
    ModelToolCallsEvent,
    PlanEvent,
    PlanLinkEvent,
    QuestionClarificationEvent,
    ReplayedEvent,
    ReviewRoundEvent,
    SpawnEvent,
    parse_event,
)

SPAWN = {"child_id": "a.1", "agent": "helper", "goal": "Find it.", "parent_agent": "lead"}


def test_every_event_kind_has_a_schema() -> None:
    assert set(SCHEMAS) == set(EventKind)


def test_a_kind_with_two_shapes_is_read_as_the_one_that_fits() -> None:
    asked = {"round": 1, "kind": "question", "question": "Which?", "answer": "This.",
             "answered_by": "coordinator"}  # fmt: skip
    served = {"round": 1, "kind": "file", "path": "a.py", "served": True, "sha256": "0" * 64,
              "answer": None}  # fmt: skip
    question = parse_event(EventKind.CLARIFICATION, asked)
    file = parse_event(EventKind.CLARIFICATION, served)
    assert isinstance(question, QuestionClarificationEvent)
    assert question.kind is ClarificationKind.QUESTION
    assert isinstance(file, FileClarificationEvent) and file.served
    with pytest.raises(ConfigError, match="'clarification' event"):
        parse_event(EventKind.CLARIFICATION, {**asked, "kind": "guess"})


def record_spawn(tmp_path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(url) as ledger:
        ledger.start_run(run_id="run_e", team="t", goal=None, graph=[])
        event_id = ledger.record_event("run_e", EventKind.SPAWN, "task:a", dict(SPAWN))
        (stored,) = ledger.events("run_e")
        assert stored.data == SPAWN
        assert parse_event(stored.kind, stored.data) == SpawnEvent(**SPAWN)
        assert verify_run(ledger, "run_e").ok
    return url, event_id


def test_a_malformed_recorded_event_is_a_finding_of_verify_not_a_crash(tmp_path) -> None:
    url, event_id = record_spawn(tmp_path)
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        bad = json.dumps({"child_id": 7, "agent": "helper"})
        conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (bad, event_id))
    with RunLedger(url) as ledger:
        report = verify_run(ledger, "run_e")
    reasons = [str(f) for f in report.findings if f.subject == f"event {event_id}"]
    assert any("a 'spawn' event's child_id" in r for r in reasons), report.findings
    checked = CliRunner().invoke(app, ["verify", "run_e", "--db", url])
    assert checked.exit_code != 0
    assert "'spawn' event's" in checked.output and "Traceback" not in checked.output
    shown = CliRunner().invoke(app, ["inspect", "run_e", "--db", url, "--no-prompt"])
    assert shown.exit_code == 0, shown.output
    assert "malformed event" in shown.output


def test_replay_events_name_the_record_they_replay_and_the_share_of_an_mcp_server() -> None:
    replayed = {"record": "tool_call", "original": "tool_1", "sha256": "0" * 64}
    event = parse_event(EventKind.REPLAYED, replayed)
    assert isinstance(event, ReplayedEvent) and event.record is RecordKind.TOOL_CALL
    with pytest.raises(ConfigError, match="'replayed' event's record"):
        parse_event(EventKind.REPLAYED, {**replayed, "record": "run"})
    with pytest.raises(ConfigError, match="'replay_declined' event's why"):
        parse_event(EventKind.REPLAY_DECLINED, {"record": "tool_call", "original": "tool_1"})
    asked = {"call_id": "call_1", "tool_calls": [{"id": "t1", "name": "add", "arguments": {}}]}
    tool_calls = parse_event(EventKind.MODEL_TOOL_CALLS, asked)
    assert isinstance(tool_calls, ModelToolCallsEvent) and tool_calls.tool_calls[0].name == "add"
    mcp = {"tool_call_id": "t1", "server": "notes", "tool": "read", "transport": "stdio",
           "where": "uvx notes", "shared": True}  # fmt: skip
    shared = parse_event(EventKind.MCP_CALL, mcp)
    assert isinstance(shared, McpCallEvent) and shared.shared is True


REVIEW = {"task_id": "a", "round": 1, "stage": 1, "reviewer": "critic", "accepted": False,
          "findings": "Cite the source.", "candidate_sha256": "1" * 64}  # fmt: skip
BUDGET = {"tokens": 500, "cost_usd": None,
          "prices": {"m": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}  # fmt: skip
PLANNED = {"tasks_sha256": "2" * 64, "tasks": 3}
PLAN_LINK = {"plan_run_id": "run_p", "planned_tasks_sha256": "2" * 64,
             "tasks_sha256": "3" * 64, "edited": True}  # fmt: skip
HOOKS = {"items": [{"ref": "notes/1", "title": "Style guide", "sha256": "4" * 64}]}


def test_run_control_events_are_recorded_through_their_schemas_and_shown(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    recorded = [
        (EventKind.REVIEW_ROUND, "review:a/1/1", REVIEW, ReviewRoundEvent),
        (EventKind.BUDGET, "run", BUDGET, BudgetEvent),
        (EventKind.PLAN, "plan", PLANNED, PlanEvent),
        (EventKind.PLAN, "run", PLAN_LINK, PlanLinkEvent),
        (EventKind.HOOK_CONTEXT, "task:a", HOOKS, HookContextEvent),
    ]
    with RunLedger(url) as ledger:
        ledger.start_run(run_id="run_c", team="t", goal=None, graph=[])
        for kind, subject, data, _ in recorded:
            ledger.record_event("run_c", kind, subject, dict(data))
        with pytest.raises(ConfigError, match="'review_round' event's accepted"):
            ledger.record_event("run_c", EventKind.REVIEW_ROUND, "review:a/1/1",
                                {**REVIEW, "accepted": "maybe"})  # fmt: skip
        with pytest.raises(ConfigError, match="'budget' event's"):
            ledger.record_event("run_c", EventKind.BUDGET, "run", {"tokens": 500})
        stored = ledger.events("run_c")
    assert [type(parse_event(e.kind, e.data)) for e in stored] == [r[3] for r in recorded]
    assert [e.data for e in stored] == [r[2] for r in recorded]
    shown = CliRunner().invoke(app, ["inspect", "run_c", "--db", url, "--no-prompt"])
    assert shown.exit_code == 0, shown.output
    for text in ("critic", "sends it back", "tokens 500", "plan run run_p", "Style guide"):
        assert text in shown.output, shown.output
    assert "malformed event" not in shown.output
