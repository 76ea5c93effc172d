"""``verify`` on approved calls carried out twice, and on cut-off answers, through the CLI.

The model is a real OpenAI-compatible server on 127.0.0.1 answering by script; the gated
tool is a real function named in the team file that appends to ``ran.log`` each time it runs
(its side effect); the ledger is a real SQLite file. A forger rebuilds the hash chain
(unkeyed) in its recorded order, with the records they add at its end and those they remove
left out, so only ``verify``'s own checks can tell.

- One approved tool call carried out twice without a person's ``rerun`` decision (a second
  ``tool_started`` of the call, or a second tool call run for one model answer) is a finding
  naming the call; an honest "may have run, approve to rerun" flow verifies.
- A delegate's, a child's and an isolated clarification's cut-off answer records an
  ``answer_marked`` event, as a task's does; ``verify`` flags a marked answer without it, and
  an ``answer_marked`` event that no cut-off answer of its subject matches.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._context.answers import TRUNCATED_MARK
from clearance._context.verify_chain import chained_records
from clearance._state.chain import chain_sha256, payload_sha256
from clearance.cli._app import app
from test_round18_review import TOOL_MODULE

pytestmark = pytest.mark.network

TEAM = """\
name: approvals
agents:
  - {name: janitor, instructions: "You tidy up.", tools: [remove]}
tools:
  remove: {function: "round17_rerun_tools:remove", approval: required}
tasks:
  - {id: tidy, title: Tidy, description: Delete the file old.txt., assignee: janitor}
"""


class Cut(str):
    """An answer the server finishes with ``finish_reason: length`` (cut off)."""

    finish_reason = "length"


def reply(messages: list[dict[str, Any]]) -> Any:
    text = "\n".join(m["content"] or "" for m in messages)
    if "Delete the file old.txt." in text:
        if "REMOVED old.txt" in text:
            return "removed it"
        if "denied this call" in text or "may have run" in text:
            return "left it in place"
        return [("remove", {"path": "old.txt"})]
    return "the summary"


@pytest.fixture
def env(tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    (tmp_path / "round17_rerun_tools.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "round17_rerun_tools", raising=False)
    (tmp_path / "team.yaml").write_text(TEAM)
    return {
        "tmp": tmp_path,
        "file": tmp_path / "runs.db",
        "db": f"sqlite:///{tmp_path / 'runs.db'}",
        "log": tmp_path / "ran.log",
        "proc_env": {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    }


def cli(env: dict[str, Any], *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", env["db"]])


def ran(env: dict[str, Any]) -> list[str]:
    return env["log"].read_text().splitlines() if env["log"].exists() else []


def requests(output: str) -> list[str]:
    return re.findall(r"apr_[0-9a-z_]+", output.split("awaiting approval:")[1])


def paused(env: dict[str, Any]) -> tuple[str, str]:
    """A run paused on its one approval request: its id and the request's."""
    run = cli(env, "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    (call_id,) = requests(run.output)
    return run_id, call_id


def approved_run(env: dict[str, Any]) -> str:
    """A run whose approved call ran once (run, approve, resume), which verifies."""
    run_id, call_id = paused(env)
    assert cli(env, "approve", run_id, call_id, "--by", "alice").exit_code == 0
    resumed = cli(env, "resume", run_id)
    assert resumed.exit_code == 0, resumed.output
    assert ran(env) == ["old.txt"]
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output
    return run_id


def findings(env: dict[str, Any], run_id: str) -> list[str]:
    """``verify``'s finding lines (it must exit 1 with them)."""
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 1, verified.output
    lines = verified.output.strip().splitlines()
    assert re.fullmatch(rf"run {run_id}: \d+ problem\(s\) in \d+ calls", lines[-1]), lines
    return lines[:-1]


def relink(
    db: Path, run_id: str, *, add: tuple[tuple[str, str], ...] = (), drop: tuple[str, ...] = ()
) -> None:
    """Rebuild the run's chain (unkeyed, one entry per record) in its recorded order, the
    records ``add`` names ((kind, id), rows already written) appended, ``drop``'s left out."""
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        records, problems = chained_records(ledger.chain_entries(run_id))
        rows = ledger.record_rows(run_id)
    assert not problems
    fields = {"event": "event_id", "tool_call": "tool_call_id"}
    kept = [(r.kind, r.subject, r.payload_sha256) for r in records if r.subject not in drop]
    for kind, subject in add:
        (row,) = [r for r in rows[kind] if r[fields[kind]] == subject]
        kept.append((kind, subject, payload_sha256(kind, row)))
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


def copy_event(conn: sqlite3.Connection, event_id: str, new_id: str, **changes: Any) -> None:
    """Insert a copy of an event under ``new_id``, its data changed by ``changes``."""
    run_id, kind, subject, raw, created = conn.execute(
        "SELECT run_id, kind, subject, data, created_at FROM events WHERE event_id = ?",
        (event_id,),
    ).fetchone()
    data = {**json.loads(raw), **changes}
    conn.execute(
        "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (new_id, run_id, kind, subject, json.dumps(data), created),
    )


def started_event(conn: sqlite3.Connection, run_id: str) -> tuple[str, str]:
    """The run's one ``tool_started`` event: its id and its tool call's id."""
    ((event_id, raw),) = conn.execute(
        "SELECT event_id, data FROM events WHERE run_id = ? AND kind = 'tool_started'",
        (run_id,),
    ).fetchall()
    return str(event_id), str(json.loads(raw)["tool_call_id"])


# -- 1. an approved call carried out twice ---------------------------------------------------


def test_a_second_start_of_an_approved_call_without_a_rerun_decision_is_a_finding(
    env: dict[str, Any],
) -> None:
    run_id = approved_run(env)
    conn = sqlite3.connect(env["file"])
    event_id, tool_call_id = started_event(conn, run_id)
    copy_event(conn, event_id, event_id + "again")
    conn.commit()
    conn.close()
    relink(env["file"], run_id, add=(("event", event_id + "again"),))
    assert findings(env, run_id) == [
        f"tool call {tool_call_id}: remove ran again without a recorded approval to rerun it"
    ]


def test_a_second_run_of_one_model_answers_approved_call_is_a_finding(
    env: dict[str, Any],
) -> None:
    """As two resumes of one paused run would record it: each replays the model's recorded
    answer and runs its approved call, under a new id."""
    run_id = approved_run(env)
    conn = sqlite3.connect(env["file"])
    event_id, first = started_event(conn, run_id)
    ((replayed_id,),) = conn.execute(
        "SELECT event_id FROM events WHERE run_id = ? AND kind = 'replayed' "
        "AND subject = 'task:tidy'",
        (run_id,),
    ).fetchall()
    second = first + "b"
    copy_event(conn, replayed_id, "evt_replayed_again")
    copy_event(conn, event_id, "evt_started_again", tool_call_id=second)
    columns = ("tool_call_id, run_id, subject, agent, step, name, arguments, result, is_error, "
               "store_reads, chain, created_at")  # fmt: skip
    conn.execute(
        f"INSERT INTO tool_calls ({columns}) SELECT ?, {columns.partition(', ')[2]} "
        "FROM tool_calls WHERE tool_call_id = ?",
        (second, first),
    )
    conn.commit()
    conn.close()
    added = (("event", "evt_replayed_again"), ("event", "evt_started_again"),
             ("tool_call", second))  # fmt: skip
    relink(env["file"], run_id, add=added)
    assert findings(env, run_id) == [
        f"tool call {second}: remove ran a second time for one model answer (first as tool "
        f"call {first}), without a recorded approval to rerun it"
    ]


def test_a_call_that_may_have_run_approved_to_rerun_verifies_and_without_the_decision_not(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume killed inside the approved call; the next asks whether it runs again (a
    ``rerun`` request), a person approves, it runs again: the run verifies. With the rerun
    decision removed from the ledger, the second run of the call is a finding."""
    run_id, call_id = paused(env)
    assert cli(env, "approve", run_id, call_id, "--by", "alice").exit_code == 0
    (env["tmp"] / "hang").touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clearance", "resume", run_id, "--db", env["db"]],
        env=env["proc_env"], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not ran(env) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    (env["tmp"] / "hang").unlink()
    assert ran(env) == ["old.txt"]

    asked = cli(env, "resume", run_id)
    assert asked.exit_code == 3, asked.output
    (rerun,) = requests(asked.output)
    approved = cli(env, "approve", run_id, rerun, "--by", "bob")
    assert approved.exit_code == 0 and "may have run" in approved.output, approved.output
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt", "old.txt"]  # run again, as bob approved
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output

    conn = sqlite3.connect(env["file"])
    tool_call_id, *_ = [
        json.loads(d)["tool_call_id"]
        for (d,) in conn.execute(
            "SELECT data FROM events WHERE run_id = ? AND kind = 'tool_started'", (run_id,)
        )
    ]
    ((decided,),) = conn.execute(
        "SELECT event_id FROM events WHERE run_id = ? AND kind = 'approval_decided' "
        "AND data LIKE '%\"rerun\"%'",
        (run_id,),
    ).fetchall()
    conn.execute("DELETE FROM events WHERE event_id = ?", (decided,))
    conn.commit()
    conn.close()
    relink(env["file"], run_id, drop=(decided,))
    assert findings(env, run_id) == [
        f"tool call {tool_call_id}: remove ran again without a recorded approval to rerun it"
    ]


# -- 2. cut-off answers of delegates, children and clarifications ----------------------------

CUT = "The first half of the answer, and then"

DELEGATE = """\
name: cut
agents:
  - {name: lead, instructions: "You lead.", can_delegate_to: [helper]}
  - {name: helper, instructions: "You help."}
tasks:
  - {id: sum, title: Sum, description: Sum it up., assignee: lead}
"""


def delegate_reply(messages: list[dict[str, Any]]) -> Any:
    system, text = messages[0]["content"] or "", "\n".join(m["content"] or "" for m in messages)
    if system.startswith("You help."):
        return Cut(CUT)
    if system.startswith("You lead."):
        if TRUNCATED_MARK in text:
            return "summed"
        return [("delegate", {"agent": "helper", "task": "Explain it."})]
    return "the summary"


CHILD = """\
name: cut
agents:
  - {name: lead, instructions: "You lead.", can_spawn: [helper]}
  - {name: helper, instructions: "You help."}
tasks:
  - {id: sum, title: Sum, description: Sum it up., assignee: lead,
     fan_out: {agent: helper, goals: [Look.]}}
"""


def child_reply(messages: list[dict[str, Any]]) -> Any:
    system = messages[0]["content"] or ""
    if system.startswith("You help."):
        return Cut(CUT)
    return "summed" if system.startswith("You lead.") else "the summary"


ISOLATED = """\
name: cut
agents:
  - {name: scribe, instructions: "You review."}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: sum, mode: isolated, title: Sum, description: Sum it up., assignee: scribe}
"""


def isolated_reply(messages: list[dict[str, Any]]) -> Any:
    system, user = messages[0]["content"] or "", messages[-1]["content"] or ""
    if system.startswith("You review."):
        if "### Clarification 1" not in user:
            return "STATUS: needs_context\nQUESTION: Which version?"
        return "summed\nSTATUS: done"
    if "## Question from the subagent" in user:
        return Cut(CUT)
    return "the summary"


PATHS = {
    "delegate": (DELEGATE, delegate_reply, "delegation:"),
    "child": (CHILD, child_reply, "child:"),
    "clarification": (ISOLATED, isolated_reply, "clarification:"),
}


def cut_run(tmp_path: Path, openai_server: Any, monkeypatch: Any, path: str) -> tuple[Any, str]:
    team, answer, _ = PATHS[path]
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(answer))
    ws = f"workspace: {tmp_path / 'ws'}\n" if path != "clarification" else ""
    (tmp_path / "team.yaml").write_text(team + ws)
    env = {"db": f"sqlite:///{tmp_path / 'runs.db'}"}
    run = cli(env, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 0, run.output
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    return env, run_id


@pytest.mark.parametrize("path", list(PATHS))
def test_a_cut_off_answer_of_every_path_records_answer_marked_and_verify_checks_it(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    env, run_id = cut_run(tmp_path, openai_server, monkeypatch, path)
    prefix = PATHS[path][2]
    with RunLedger(env["db"], create=False) as ledger:
        (call,) = [c for c in ledger.calls(run_id) if c.subject.startswith(prefix)]
        assert call.finish_reason == "length"
        marked = [e for e in ledger.events(run_id) if e.kind == "answer_marked"]
        assert [(e.subject, e.data) for e in marked] == [
            (call.subject, {"truncated": True, "repetitive": False})
        ]
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output

    (event,) = marked
    conn = sqlite3.connect(tmp_path / "runs.db")
    conn.execute("DELETE FROM events WHERE event_id = ?", (event.event_id,))
    conn.commit()
    conn.close()
    relink(tmp_path / "runs.db", run_id, drop=(event.event_id,))
    assert findings(env, run_id) == [
        f"{call.subject}: the answer is marked, but no answer_marked event is (call {call.call_id})"
    ]


def test_an_answer_marked_event_no_cut_off_answer_matches_is_a_finding(
    env: dict[str, Any],
) -> None:
    run_id = approved_run(env)
    conn = sqlite3.connect(env["file"])
    ((created,),) = conn.execute(
        "SELECT created_at FROM events WHERE run_id = ? LIMIT 1", (run_id,)
    ).fetchall()
    conn.execute(
        "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
        "VALUES ('evt_marked', ?, 'answer_marked', 'task:tidy', ?, ?)",
        (run_id, json.dumps({"truncated": True, "repetitive": False}), created),
    )
    conn.commit()
    conn.close()
    relink(env["file"], run_id, add=(("event", "evt_marked"),))
    assert findings(env, run_id) == [
        "event evt_marked: the answer_marked event matches no cut-off answer of task:tidy"
    ]


def test_one_answer_asking_the_same_call_twice_verifies(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model may ask for one tool call twice in one answer: it runs once (the second is
    answered "you already called it"), and verify finds nothing to report."""

    def twice(messages: list[dict[str, Any]]) -> Any:
        text = "\n".join(m["content"] or "" for m in messages)
        if "Delete the file old.txt." in text:
            if "REMOVED old.txt" in text:
                return "removed it"
            return [("remove", {"path": "old.txt"}), ("remove", {"path": "old.txt"})]
        return "the summary"

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(twice))
    (tmp_path / "round17_rerun_tools.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "round17_rerun_tools", raising=False)
    (tmp_path / "team.yaml").write_text(TEAM.replace(", approval: required", ""))
    env = {"db": f"sqlite:///{tmp_path / 'runs.db'}", "log": tmp_path / "ran.log"}
    run = cli(env, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 0, run.output
    assert ran(env) == ["old.txt"]
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output
