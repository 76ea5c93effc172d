"""A ``replay_declined`` event's ``replacement``: shown by ``inspect``, held to by ``verify``.

A finished call of a ``replay: false`` tool runs again on resume under a new id, which its
``replay_declined`` event records as ``replacement``. ``clearance inspect`` showed the event
without it, so a person could not tell which run took the declined call's place. And
``verify`` accepted a second run for the call's model answer under *any* id once the call
was declined: a ledger whose decline names one id while the call ran again under another
verified. Now a second run under an id that is not the recorded replacement is a finding
(runs recorded before the field existed: as before).

Driven through the command line (``clearance run`` killed after the tool's second call,
``resume``, ``inspect``, ``verify``) against a scripted server on 127.0.0.1 and a real
SQLite ledger, which a forger edits and relinks (unkeyed) so only ``verify`` can tell.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_durable_resume_cli import TEAM, TOOL_MODULE, Server, clearance, lines, run_id

from clearance import RunLedger
from clearance._context.verify_chain import chained_records
from clearance._state.chain import chain_sha256, payload_sha256

pytestmark = pytest.mark.network


@pytest.fixture
def declined(tmp_path: Path, openai_server: Any) -> dict[str, Any]:
    """A run whose step-1 call (``replay: false``) was declined on resume and ran again."""
    server = Server()
    (tmp_path / "replay_tools_mod.py").write_text(TOOL_MODULE)
    env = {"tmp": tmp_path, "url": openai_server(server.reply), "server": server,
           "db": f"sqlite:///{tmp_path / 'r.db'}", "file": tmp_path / "r.db"}  # fmt: skip
    team = tmp_path / "team.yaml"
    team.write_text(TEAM.replace("idempotent: %s", "replay: false"))
    code, out = clearance(env, "run", str(team), "--model", "openai:m", kill_at="after:2")
    assert code == -signal.SIGKILL, out
    rid = run_id(env)
    code, out = clearance(env, "resume", rid)
    assert code == 0, out
    assert lines(tmp_path / "calls.log") == ["0", "1", "0", "1", "2", "3"]
    with RunLedger(env["db"]) as ledger:
        (event,) = ledger.events(rid, "replay_declined")
        first, *rest = ledger.tool_calls(rid)
    again = next(row for row in rest if row.arguments == first.arguments)
    assert event.data["replacement"] == again.tool_call_id
    env.update(rid=rid, first=first.tool_call_id, again=again.tool_call_id)
    return env


def _edit_decline(env: dict[str, Any], edit: Any) -> None:
    """Rewrite the run's ``replay_declined`` event data with ``edit``, as a forger could.

    The chain is rebuilt unkeyed in its recorded order, the event's entry given its new
    digest (the ``rechain`` fixture's order, every event after every call, would hide
    which answer each tool call ran for).
    """
    db, rid = env["file"], env["rid"]
    conn = sqlite3.connect(db)
    ((event_id, raw),) = conn.execute(
        "SELECT event_id, data FROM events WHERE run_id = ? AND kind = 'replay_declined'",
        (rid,),
    ).fetchall()
    data = json.loads(raw)
    edit(data)
    conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        records, problems = chained_records(ledger.chain_entries(rid))
        (row,) = [r for r in ledger.record_rows(rid)["event"] if r["event_id"] == event_id]
    assert not problems
    entries, previous = [], ""
    for seq, record in enumerate(records, 1):
        payload = record.payload_sha256
        if (record.kind, record.subject) == ("event", event_id):
            payload = payload_sha256("event", row)
        previous = chain_sha256(previous, rid, seq, record.kind, record.subject, payload, None)
        entries.append((rid, seq, record.kind, record.subject, payload, previous))
    conn.execute("UPDATE runs SET chain_key_id = NULL WHERE run_id = ?", (rid,))
    conn.execute("DELETE FROM ledger_entries WHERE run_id = ?", (rid,))
    conn.executemany(
        "INSERT INTO ledger_entries (run_id, seq, kind, subject, payload_sha256, chain_sha256) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        entries,
    )
    conn.commit()
    conn.close()


def test_inspect_shows_the_id_the_declined_call_ran_again_under(declined) -> None:
    code, out = clearance(declined, "inspect", declined["rid"], "--no-prompt")
    assert code == 0, out
    line = (f"tool call {declined['first']} run again as {declined['again']}, not replayed: "
            "replay: false")  # fmt: skip
    assert line in out, out


def test_verify_flags_a_second_run_under_another_id_than_the_recorded_replacement(
    declined,
) -> None:
    code, out = clearance(declined, "verify", declined["rid"])
    assert code == 0, out  # the honest run verifies

    def elsewhere(data: dict[str, Any]) -> None:
        data["replacement"] = "tool_0123456789abcdef"  # a run that never happened

    _edit_decline(declined, elsewhere)
    code, out = clearance(declined, "verify", declined["rid"])
    assert code == 1, out
    *found, summary = out.strip().splitlines()
    assert found == [
        f"tool call {declined['again']}: append ran a second time for one model answer "
        f"(first as tool call {declined['first']}), without a recorded approval to rerun it"
    ], out
    assert summary.startswith(f"run {declined['rid']}: 1 problem(s)"), out


def test_a_decline_recorded_without_a_replacement_verifies_as_before(declined) -> None:
    """Runs recorded before the field existed name no replacement: any id is taken."""
    _edit_decline(declined, lambda data: data.pop("replacement"))
    code, out = clearance(declined, "verify", declined["rid"])
    assert code == 0, out
