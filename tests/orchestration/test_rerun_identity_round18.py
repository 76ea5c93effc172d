"""Each approval to rerun a call that may have run covers one rerun, through the command line.

The model is a real OpenAI-compatible server on 127.0.0.1 answering by script; the gated tool
(``approval: required``, ``replay: false``, not idempotent) is a real function named in the
team file that appends to ``ran.log`` each time it runs (its side effect); ``clearance
resume`` is a real process, SIGKILLed inside the tool after its side effect; the ledger is a
real SQLite file.

- The call is approved and starts; the process is killed inside it; ``resume`` asks whether
  it runs again (a ``rerun`` request); a person approves; the rerun starts and the process is
  killed inside it again: the next ``resume`` asks again (a new request, naming the start it
  reruns), and never runs the tool a third time under the earlier decision.
- ``verify`` passes that honest flow, and flags a third start of the call under one rerun
  decision (the later decision removed from the ledger, as the defect recorded it).
- A run recorded before rerun requests named their start (no ``reruns`` field) still
  verifies as before.
"""

from __future__ import annotations

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger
from clearance._context.verify_chain import chained_records
from clearance._state.chain import chain_sha256, payload_sha256
from test_round18_review import approval_env, cli, ran, requests

pytestmark = pytest.mark.network


@pytest.fixture
def env(tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The approval team (the round's review test's), against its scripted model."""
    return approval_env(tmp_path, openai_server, monkeypatch)


def killed_inside_the_tool(env: dict[str, Any], run_id: str) -> None:
    """A ``clearance resume`` process SIGKILLed inside the tool, after its side effect."""
    before = len(ran(env))
    (env["tmp"] / "hang").touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clearance", "resume", run_id, "--db", env["db"]],
        env=env["proc_env"], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(ran(env)) == before and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    (env["tmp"] / "hang").unlink()
    assert proc.returncode == -signal.SIGKILL, out
    assert len(ran(env)) == before + 1, out


def killed_after_the_tool(env: dict[str, Any], run_id: str) -> None:
    """A ``clearance resume`` process SIGKILLed while it waits for the model's answer after
    the tool's result (the tool finished and its result is recorded)."""
    (env["tmp"] / "hang_model").touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clearance", "resume", run_id, "--db", env["db"]],
        env=env["proc_env"], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    waiting = env["tmp"] / "model_waiting"
    while not waiting.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    (env["tmp"] / "hang_model").unlink()
    waiting.unlink()
    assert proc.returncode == -signal.SIGKILL, out


def approved_rerun_killed_twice(env: dict[str, Any]) -> tuple[str, list[str]]:
    """Run, approve, killed inside the call; rerun approved, killed inside it again; the
    resume after that. Returns the run id and the approval requests, in order."""
    run = cli(env, "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    (first,) = requests(run.output)
    assert cli(env, "approve", run_id, first, "--by", "alice").exit_code == 0
    killed_inside_the_tool(env, run_id)

    asked = cli(env, "resume", run_id)
    assert asked.exit_code == 3, asked.output
    (rerun,) = requests(asked.output)
    approved = cli(env, "approve", run_id, rerun, "--by", "bob")
    assert approved.exit_code == 0 and "may have run" in approved.output, approved.output
    killed_inside_the_tool(env, run_id)
    assert ran(env) == ["old.txt", "old.txt"]

    again = cli(env, "resume", run_id)
    assert ran(env) == ["old.txt", "old.txt"], "ran a third time under the earlier decision"
    assert again.exit_code == 3, again.output
    (second_rerun,) = requests(again.output)
    assert second_rerun not in (first, rerun)
    return run_id, [first, rerun, second_rerun]


def findings(env: dict[str, Any], run_id: str) -> list[str]:
    """``verify``'s finding lines (it must exit 1 with them)."""
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 1, verified.output
    lines = verified.output.strip().splitlines()
    assert re.fullmatch(rf"run {run_id}: \d+ problem\(s\) in \d+ calls", lines[-1]), lines
    return lines[:-1]


def rechain(db: Path, run_id: str, *, drop: tuple[str, ...] = ()) -> None:
    """Rebuild the run's chain (unkeyed, one entry per record) in its recorded order from
    the rows as they now are, the records ``drop`` names left out (a forger's ledger)."""
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        records, problems = chained_records(ledger.chain_entries(run_id))
        rows = ledger.record_rows(run_id)
    assert not problems
    events = {row["event_id"]: row for row in rows["event"]}
    kept = [
        (r.kind, r.subject,
         payload_sha256(r.kind, events[r.subject]) if r.kind == "event" else r.payload_sha256)
        for r in records
        if r.subject not in drop
    ]  # fmt: skip
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


def approval_events(conn: sqlite3.Connection, run_id: str, call_id: str) -> list[str]:
    """The ids of the request's ``awaiting_approval`` and ``approval_decided`` events."""
    return [
        str(event_id)
        for event_id, raw in conn.execute(
            "SELECT event_id, data FROM events WHERE run_id = ? AND kind IN "
            "('awaiting_approval', 'approval_decided')",
            (run_id,),
        )
        if json.loads(raw)["call_id"] == call_id
    ]


def test_a_second_kill_inside_an_approved_rerun_asks_again_and_the_run_verifies(
    env: dict[str, Any],
) -> None:
    run_id, (first, rerun, second_rerun) = approved_rerun_killed_twice(env)
    assert cli(env, "approve", run_id, second_rerun, "--by", "carol").exit_code == 0
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt"] * 3  # each run of the call approved by its own decision
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output

    with RunLedger(env["db"], create=False) as ledger:
        starts = [e.event_id for e in ledger.events(run_id, "tool_started")]
        asked = ledger.events(run_id, "awaiting_approval")
        decided = ledger.events(run_id, "approval_decided")
    assert len(starts) == 3
    # Each rerun request names the start it reruns; its decision names it too.
    assert [(e.data["call_id"], e.data["kind"], e.data.get("reruns")) for e in asked] == [
        (first, "tool", None),
        (rerun, "rerun", starts[0]),
        (second_rerun, "rerun", starts[1]),
    ]
    assert [(e.data["call_id"], e.data.get("reruns"), e.data["by"]) for e in decided] == [
        (first, None, "alice"),
        (rerun, starts[0], "bob"),
        (second_rerun, starts[1], "carol"),
    ]
    shown = cli(env, "inspect", run_id)
    assert shown.exit_code == 0, shown.output
    assert f"{second_rerun}: tool remove may have run" in shown.output, shown.output


def test_a_denied_second_rerun_leaves_the_call_at_two_runs(env: dict[str, Any]) -> None:
    run_id, (_, _, second_rerun) = approved_rerun_killed_twice(env)
    denied = cli(env, "deny", run_id, second_rerun, "--by", "carol", "--reason", "twice is enough")
    assert denied.exit_code == 0, denied.output
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt", "old.txt"]
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_a_third_start_under_one_rerun_decision_is_a_finding(env: dict[str, Any]) -> None:
    """The ledger the defect recorded: the second rerun's request and decision absent, the
    call started a third time under the first rerun decision."""
    run_id, (_, _, second_rerun) = approved_rerun_killed_twice(env)
    assert cli(env, "approve", run_id, second_rerun, "--by", "carol").exit_code == 0
    assert cli(env, "resume", run_id).exit_code == 0
    assert cli(env, "verify", run_id).exit_code == 0
    conn = sqlite3.connect(env["file"])
    ((tool_call_id,),) = conn.execute(
        "SELECT DISTINCT json_extract(data, '$.tool_call_id') FROM events "
        "WHERE run_id = ? AND kind = 'tool_started'",
        (run_id,),
    ).fetchall()
    dropped = approval_events(conn, run_id, second_rerun)
    assert len(dropped) == 2
    conn.executemany("DELETE FROM events WHERE event_id = ?", [(e,) for e in dropped])
    conn.commit()
    conn.close()
    rechain(env["file"], run_id, drop=tuple(dropped))
    assert findings(env, run_id) == [
        f"tool call {tool_call_id}: remove ran again without a recorded approval to rerun it"
    ]


def test_a_rerun_decision_naming_another_start_covers_no_rerun(env: dict[str, Any]) -> None:
    """The second rerun's request and decision edited to name the first start (the one the
    first decision reran): they cover no rerun of the second start."""
    run_id, (_, _, second_rerun) = approved_rerun_killed_twice(env)
    assert cli(env, "approve", run_id, second_rerun, "--by", "carol").exit_code == 0
    assert cli(env, "resume", run_id).exit_code == 0
    conn = sqlite3.connect(env["file"])
    starts = [
        (str(event_id), json.loads(raw)["tool_call_id"])
        for event_id, raw in conn.execute(
            "SELECT event_id, data FROM events WHERE run_id = ? AND kind = 'tool_started' "
            "ORDER BY rowid",
            (run_id,),
        )
    ]
    for event_id in approval_events(conn, run_id, second_rerun):
        (raw,) = conn.execute("SELECT data FROM events WHERE event_id = ?", (event_id,)).fetchone()
        data = {**json.loads(raw), "reruns": starts[0][0]}
        conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    conn.close()
    rechain(env["file"], run_id)
    assert findings(env, run_id) == [
        f"tool call {starts[0][1]}: remove ran again without a recorded approval to rerun it"
    ]


def test_a_run_recorded_before_reruns_named_their_start_verifies_as_before(
    env: dict[str, Any],
) -> None:
    """One approved rerun, its request and decision recorded without ``reruns`` (as runs
    recorded before it was): it verifies."""
    run = cli(env, "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    (first,) = requests(run.output)
    assert cli(env, "approve", run_id, first, "--by", "alice").exit_code == 0
    killed_inside_the_tool(env, run_id)
    asked = cli(env, "resume", run_id)
    (rerun,) = requests(asked.output)
    assert cli(env, "approve", run_id, rerun, "--by", "bob").exit_code == 0
    assert cli(env, "resume", run_id).exit_code == 0
    assert ran(env) == ["old.txt", "old.txt"]
    conn = sqlite3.connect(env["file"])
    for event_id in approval_events(conn, run_id, rerun):
        (raw,) = conn.execute("SELECT data FROM events WHERE event_id = ?", (event_id,)).fetchone()
        data = json.loads(raw)
        assert data.pop("reruns", None) is not None
        conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    conn.close()
    rechain(env["file"], run_id)
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_a_finished_call_run_again_and_killed_inside_its_rerun_asks_again(
    env: dict[str, Any],
) -> None:
    """``replay: false``: the finished call runs again under a new id on resume, once a
    person approves; that rerun killed inside the tool, the next resume asks again (naming
    the rerun's start), never running the tool a third time under the first decision."""
    run = cli(env, "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    (first,) = requests(run.output)
    assert cli(env, "approve", run_id, first, "--by", "alice").exit_code == 0
    killed_after_the_tool(env, run_id)
    assert ran(env) == ["old.txt"]

    asked = cli(env, "resume", run_id)
    assert asked.exit_code == 3, asked.output
    (rerun,) = requests(asked.output)
    assert cli(env, "approve", run_id, rerun, "--by", "bob").exit_code == 0
    killed_inside_the_tool(env, run_id)
    assert ran(env) == ["old.txt", "old.txt"]

    again = cli(env, "resume", run_id)
    assert ran(env) == ["old.txt", "old.txt"], "ran a third time under the earlier decision"
    assert again.exit_code == 3, again.output
    (second_rerun,) = requests(again.output)
    assert second_rerun not in (first, rerun)
    assert cli(env, "approve", run_id, second_rerun, "--by", "carol").exit_code == 0
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt"] * 3
    with RunLedger(env["db"], create=False) as ledger:
        starts = [e.event_id for e in ledger.events(run_id, "tool_started")]
        asked_events = ledger.events(run_id, "awaiting_approval")
    assert len(starts) == 3
    assert [e.data.get("reruns") for e in asked_events] == [None, starts[0], starts[1]]
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output
