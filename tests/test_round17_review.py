"""Regressions of this round's changes, through the CLI, a real model server and SQLite.

The model is a real OpenAI-compatible server on 127.0.0.1 answering by script
(`openai_server`), the ledger a real SQLite file, every command the real CLI.

- A run recorded before ``prompt_format`` 3 kept a delegate's and a child's cut-off answer
  marked, as today, but recorded no ``answer_marked`` event for them (only a task's had
  one). ``clearance verify`` of such a run must not call its honest records a problem: the
  rule that a marked answer has its event holds for the runs recorded since it was made.
- A model answer may delegate the same task twice (two opinions): both delegations run, as
  they always have (a repeated delegate call is not refused). ``clearance verify`` must not
  report the second as "ran a second time for one model answer"; a third run, more than the
  answer asked for, still is one.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.answers import TRUNCATED_MARK
from clearance._context.verify_chain import chained_records
from clearance._state.chain import chain_sha256, payload_sha256
from clearance.cli._app import app

pytestmark = pytest.mark.network


class Cut(str):
    """An answer the server finishes with ``finish_reason: length`` (cut off)."""

    finish_reason = "length"


HALF = "half of the helper's answer, and then"


def joined(messages: list[dict[str, Any]]) -> str:
    return "\n".join(m.get("content") or "" for m in messages)


def cli(db: str, *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", db])


def run_id_of(output: str) -> str:
    return re.search(r"run id: (\S+)", output).group(1)  # type: ignore[union-attr]


def drop_records(db: Path, run_id: str, event_ids: set[str]) -> None:
    """Delete events and rebuild the run's chain (unkeyed) in its recorded order without
    them: the records the run would hold had the code that made it not recorded them."""
    conn = sqlite3.connect(db)
    conn.executemany("DELETE FROM events WHERE event_id = ?", [(e,) for e in event_ids])
    conn.commit()
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        records, problems = chained_records(ledger.chain_entries(run_id))
    assert not problems
    kept = [(r.kind, r.subject, r.payload_sha256) for r in records if r.subject not in event_ids]
    entries, previous = [], ""
    for seq, (kind, subject, payload) in enumerate(kept, 1):
        previous = chain_sha256(previous, run_id, seq, kind, subject, payload, None)
        entries.append((run_id, seq, kind, subject, payload, previous))
    conn.execute("UPDATE runs SET chain_key_id = NULL WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM ledger_entries WHERE run_id = ?", (run_id,))
    conn.executemany(
        "INSERT INTO ledger_entries (run_id, seq, kind, subject, payload_sha256, chain_sha256) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        entries,
    )
    conn.commit()
    conn.close()


def insert_record(db: Path, run_id: str, added: tuple[str, str], *, after: str) -> None:
    """Chain a row already written (``(kind, id)``) right after record ``after``, unkeyed."""
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        records, problems = chained_records(ledger.chain_entries(run_id))
        rows = ledger.record_rows(run_id)
    assert not problems
    fields = {"event": "event_id", "tool_call": "tool_call_id"}
    kept = [(r.kind, r.subject, r.payload_sha256) for r in records]
    kind, subject = added
    (row,) = [r for r in rows[kind] if r[fields[kind]] == subject]
    (place,) = [i for i, (_, s, _) in enumerate(kept) if s == after]
    kept.insert(place + 1, (kind, subject, payload_sha256(kind, row)))
    entries, previous = [], ""
    for seq, (kind, subject, payload) in enumerate(kept, 1):
        previous = chain_sha256(previous, run_id, seq, kind, subject, payload, None)
        entries.append((run_id, seq, kind, subject, payload, previous))
    conn = sqlite3.connect(db)
    conn.execute("UPDATE runs SET chain_key_id = NULL WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM ledger_entries WHERE run_id = ?", (run_id,))
    conn.executemany(
        "INSERT INTO ledger_entries (run_id, seq, kind, subject, payload_sha256, chain_sha256) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        entries,
    )
    conn.commit()
    conn.close()


# -- 1. a pre-format-3 run's cut-off delegate and child answers --------------------------

CUT_TEAM = """\
name: before17
agents:
  - {name: helper, instructions: "You help."}
  - {name: lead, instructions: "You lead.", can_spawn: [helper], can_delegate_to: [helper]}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: a, title: A, description: "Do A.", assignee: lead,
     fan_out: {agent: helper, goals: ["Look at it."]}}
  - {id: b, title: B, description: "Do B by delegating.", assignee: lead, depends_on: [a]}
"""


def cut_reply(messages: list[dict[str, Any]]) -> Any:
    system = messages[0]["content"] or ""
    last = messages[-1].get("content") or ""
    if system.startswith("You help."):
        return Cut(HALF)
    if system.startswith("You lead."):
        if "Do B by delegating." in last and HALF not in last:
            return [("delegate", {"agent": "helper", "task": "Look."})]
        return "lead done"
    return "the summary"


def test_a_run_recorded_before_format_3_with_cut_off_delegate_and_child_answers_verifies(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded as the code before this round recorded it: ``prompt_format`` 1, the child's
    and the delegate's answers kept marked, no ``answer_marked`` event of theirs."""
    url = openai_server(cut_reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setattr("clearance._orchestration.resume.PROMPT_FORMAT", 1)
    monkeypatch.setattr("clearance._orchestration.children.PROMPT_FORMAT", 1)
    (tmp_path / "team.yaml").write_text(CUT_TEAM + f"workspace: {tmp_path / 'ws'}\n")
    file = tmp_path / "runs.db"
    db = f"sqlite:///{file}"
    run = cli(db, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 0, run.output
    run_id = run_id_of(run.output)
    monkeypatch.undo()  # verify is today's code

    # The lead received both answers marked (as before this round).
    leads = [joined(b["messages"]) for b in url.bodies  # type: ignore[attr-defined]
             if (b["messages"][0]["content"] or "").startswith("You lead.")]  # fmt: skip
    assert sum(f"{HALF}\n\n{TRUNCATED_MARK}" in text for text in leads) >= 2, leads
    with RunLedger(db, create=False) as ledger:
        assert ledger.get_run(run_id).config["prompt_format"] == 1
        marked = {e.event_id: e.subject for e in ledger.events(run_id)
                  if e.kind == "answer_marked"}  # fmt: skip
    assert sorted(s.partition(":")[0] for s in marked.values()) == ["child", "delegation"]
    drop_records(file, run_id, set(marked))

    verified = cli(db, "verify", run_id)
    assert verified.exit_code == 0, verified.output
    assert "every item was in its task's clearance" in verified.output


# -- 2. one answer delegating the same task twice -------------------------------------------

TWICE_TEAM = """\
name: opinions
agents:
  - {name: helper, instructions: "You help."}
  - {name: lead, instructions: "You lead.", can_delegate_to: [helper]}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: b, title: B, description: "Ask two opinions.", assignee: lead}
"""

ASK = {"agent": "helper", "task": "Give an opinion."}


def twice_reply(messages: list[dict[str, Any]]) -> Any:
    system = messages[0]["content"] or ""
    if system.startswith("You help."):
        return "an opinion"
    if system.startswith("You lead."):
        if "an opinion" not in joined(messages):
            return [("delegate", ASK), ("delegate", ASK)]
        return "lead done"
    return "the summary"


def test_one_answer_delegating_one_task_twice_verifies_and_a_third_run_is_a_finding(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = openai_server(twice_reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tmp_path / "team.yaml").write_text(TWICE_TEAM)
    file = tmp_path / "runs.db"
    db = f"sqlite:///{file}"
    run = cli(db, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 0, run.output
    run_id = run_id_of(run.output)
    helpers = [b for b in url.bodies  # type: ignore[attr-defined]
               if (b["messages"][0]["content"] or "").startswith("You help.")]  # fmt: skip
    assert len(helpers) == 2  # both delegations ran, as the model asked
    verified = cli(db, "verify", run_id)
    assert verified.exit_code == 0, verified.output

    # A third start of that delegation after the same answer (chained right after the
    # second), under another id: more than the answer asked for, so a call run again.
    conn = sqlite3.connect(file)
    rows = conn.execute(
        "SELECT event_id, subject, data, created_at FROM events "
        "WHERE run_id = ? AND kind = 'tool_started' ORDER BY ordinal",
        (run_id,),
    ).fetchall()
    assert len(rows) == 2
    event_id, subject, raw, created = rows[-1]
    data = json.loads(raw)
    first, third = json.loads(rows[0][2])["tool_call_id"], data["tool_call_id"] + "c"
    conn.execute(
        "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
        "VALUES (?, ?, 'tool_started', ?, ?, ?)",
        ("evt_third", run_id, subject, json.dumps({**data, "tool_call_id": third}), created),
    )
    conn.commit()
    conn.close()
    insert_record(file, run_id, ("event", "evt_third"), after=event_id)
    verified = cli(db, "verify", run_id)
    assert verified.exit_code == 1, verified.output
    lines = verified.output.strip().splitlines()
    assert lines[:-1] == [
        f"tool call {third}: delegate ran a second time for one model answer (first as tool "
        f"call {first}), without a recorded approval to rerun it"
    ], lines
