"""Runs recorded before this round's changes, resumed and verified by today's code.

The model is a real OpenAI-compatible server on 127.0.0.1 answering by script
(`openai_server`); the gated tool (``approval: required``, ``replay: false``, not idempotent)
is a real function named in the team file that appends to ``ran.log`` each time it runs;
``clearance resume`` is a real process, SIGKILLed inside the tool or while the model's next
answer is awaited; the ledger is a real SQLite file; every other command is the real CLI.

Rerun requests now name the ``tool_started`` event they would run again (``reruns``), and a
request is found again by that name. A run paused on a rerun request recorded before (no
``reruns``: the records are made by today's code, then that field removed and the chain
rebuilt, as the earlier code left them) must resume on the decision a person made on it,
before or after the upgrade: an approval runs the call once more and the run finishes, a
denial tells the model; neither is asked about again under a new id. The decision still
covers that one rerun: a rerun stopped inside the tool too is asked about again.
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
from clearance._context.verify_chain import chained_records
from clearance._state.chain import chain_sha256, payload_sha256
from clearance.cli._app import app

pytestmark = pytest.mark.network

TOOL_MODULE = '''\
import time
from pathlib import Path

HERE = Path(__file__).parent


def remove(path: str) -> str:
    """Remove a file."""
    with open(HERE / "ran.log", "a") as log:
        log.write(path + "\\n")
    while (HERE / "hang").exists():  # the test kills the process here
        time.sleep(0.05)
    return f"REMOVED {path}"
'''

TEAM = """\
name: reruns
agents:
  - {name: janitor, instructions: "You tidy up.", tools: [remove]}
tools:
  remove: {function: "round18_review_tools:remove", approval: required, replay: false,
           idempotent: false}
tasks:
  - {id: tidy, title: Tidy, description: Delete the file old.txt., assignee: janitor}
"""


def replier(tmp: Path) -> Any:
    """The scripted model; while ``hang_model`` exists, the answer after the tool's result
    waits (``model_waiting`` marks it), so the test can kill the run there."""

    def reply(messages: list[dict[str, Any]]) -> Any:
        text = "\n".join(m["content"] or "" for m in messages)
        if "REMOVED old.txt" in text and (tmp / "hang_model").exists():
            (tmp / "model_waiting").touch()
            deadline = time.monotonic() + 60
            while (tmp / "hang_model").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        if "Delete the file old.txt." in text:
            if "REMOVED old.txt" in text:
                return "removed it"
            if "denied this call" in text or "may have run" in text:
                return "left it in place"
            return [("remove", {"path": "old.txt"})]
        return "the summary"

    return reply


@pytest.fixture
def env(tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return approval_env(tmp_path, openai_server, monkeypatch)


def approval_env(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The approval team in ``tmp_path``, its tool importable, against the scripted model."""
    url = openai_server(replier(tmp_path))
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tmp_path / "round18_review_tools.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "round18_review_tools", raising=False)
    (tmp_path / "team.yaml").write_text(TEAM)
    return {
        "tmp": tmp_path,
        "url": url,
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
    assert "awaiting approval:" in output, output
    return re.findall(r"apr_[0-9a-z_]+", output.split("awaiting approval:")[1])


def killed_resume(env: dict[str, Any], run_id: str, *, inside: bool) -> None:
    """A ``clearance resume`` process SIGKILLed inside the tool after its side effect
    (``inside``), or while it awaits the model's answer after the tool's result."""
    before = len(ran(env))
    flag = env["tmp"] / ("hang" if inside else "hang_model")
    waiting = env["tmp"] / "model_waiting"
    flag.touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", "clearance", "resume", run_id, "--db", env["db"]],
        env=env["proc_env"], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if (len(ran(env)) > before) if inside else waiting.exists():
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    flag.unlink()
    waiting.unlink(missing_ok=True)
    assert proc.returncode == -signal.SIGKILL, out
    assert len(ran(env)) == before + 1, out


def as_recorded_before(db: Path, run_id: str, call_id: str) -> None:
    """Remove ``reruns`` from the request's (and its decision's) events, as the code before
    this round recorded them, and rebuild the run's chain."""
    conn = sqlite3.connect(db)
    for event_id, raw in conn.execute(
        "SELECT event_id, data FROM events WHERE run_id = ? AND kind IN "
        "('awaiting_approval', 'approval_decided')",
        (run_id,),
    ).fetchall():
        data = json.loads(raw)
        if data["call_id"] == call_id:
            assert data.pop("reruns", None) is not None
            conn.execute(
                "UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id)
            )
    conn.commit()
    conn.close()
    rebuild_chain(db, run_id)


def rebuild_chain(db: Path, run_id: str, *, drop: str = "") -> None:
    """Rebuild the run's chain (unkeyed, one entry per record, record ``drop`` left out) in
    its recorded order over the rows as they now are."""
    with RunLedger(f"sqlite:///{db}", create=False) as ledger:
        records, problems = chained_records(ledger.chain_entries(run_id))
        rows = ledger.record_rows(run_id)
    assert not problems
    events = {row["event_id"]: row for row in rows["event"]}
    kept = [
        (r.kind, r.subject,
         payload_sha256(r.kind, events[r.subject]) if r.kind == "event" else r.payload_sha256)
        for r in records
        if r.subject != drop
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


def paused_on_a_rerun(env: dict[str, Any], *, inside: bool) -> tuple[str, str]:
    """Run, approve, killed (inside the tool, or after it); the resume after that pauses on
    a rerun request, then left as the earlier code recorded it. Returns the run and it."""
    run = cli(env, "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = re.search(r"run id: (\S+)", run.output).group(1)  # type: ignore[union-attr]
    (first,) = requests(run.output)
    assert cli(env, "approve", run_id, first, "--by", "alice").exit_code == 0
    killed_resume(env, run_id, inside=inside)
    asked = cli(env, "resume", run_id)
    assert asked.exit_code == 3, asked.output
    (rerun,) = requests(asked.output)
    assert "may have run" in cli(env, "inspect", run_id).output
    as_recorded_before(env["file"], run_id, rerun)
    assert cli(env, "verify", run_id).exit_code == 0
    return run_id, rerun


def asked(env: dict[str, Any], run_id: str) -> list[str]:
    with RunLedger(env["db"], create=False) as ledger:
        return [e.data["call_id"] for e in ledger.events(run_id, "awaiting_approval")]


@pytest.mark.parametrize("inside", [True, False], ids=["killed-inside", "finished-call"])
def test_an_approved_rerun_request_recorded_before_reruns_were_named_runs_the_call_once(
    env: dict[str, Any], inside: bool
) -> None:
    run_id, rerun = paused_on_a_rerun(env, inside=inside)
    approved = cli(env, "approve", run_id, rerun, "--by", "bob")
    assert approved.exit_code == 0, approved.output
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output  # not paused on a new request for it
    assert "status: completed" in finished.output
    assert ran(env) == ["old.txt", "old.txt"]
    assert len(asked(env, run_id)) == 2  # the tool call's, and the rerun's: nothing asked again
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output
    with RunLedger(env["db"], create=False) as ledger:
        assert ledger.tasks(run_id)[0].result == "removed it"


def test_a_denied_rerun_request_recorded_before_reruns_were_named_is_not_asked_again(
    env: dict[str, Any],
) -> None:
    run_id, rerun = paused_on_a_rerun(env, inside=True)
    denied = cli(env, "deny", run_id, rerun, "--by", "bob", "--reason", "once is enough")
    assert denied.exit_code == 0, denied.output
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt"]
    assert len(asked(env, run_id)) == 2
    last = env["url"].bodies[-2]["messages"]  # the janitor's last prompt, before the summary
    assert "once is enough" in "\n".join(m["content"] or "" for m in last)
    with RunLedger(env["db"], create=False) as ledger:
        assert ledger.tasks(run_id)[0].result == "left it in place"
    assert cli(env, "verify", run_id).exit_code == 0


def test_a_rerun_approved_before_reruns_were_named_covers_that_rerun_only(
    env: dict[str, Any],
) -> None:
    """The earlier request's approval, its rerun killed inside the tool again: the next
    resume asks again (naming the rerun's start), never running the tool a third time."""
    run_id, rerun = paused_on_a_rerun(env, inside=True)
    assert cli(env, "approve", run_id, rerun, "--by", "bob").exit_code == 0
    killed_resume(env, run_id, inside=True)
    assert ran(env) == ["old.txt", "old.txt"]
    again = cli(env, "resume", run_id)
    assert again.exit_code == 3, again.output
    assert ran(env) == ["old.txt", "old.txt"]
    (second,) = requests(again.output)
    with RunLedger(env["db"], create=False) as ledger:
        starts = [e.event_id for e in ledger.events(run_id, "tool_started")]
        (request,) = [
            e for e in ledger.events(run_id, "awaiting_approval") if e.data["call_id"] == second
        ]
    assert request.data["reruns"] == starts[-1]
    assert cli(env, "approve", run_id, second, "--by", "carol").exit_code == 0
    assert cli(env, "resume", run_id).exit_code == 0
    assert ran(env) == ["old.txt"] * 3
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output


# -- a replay: false call declined by two sessions of the earlier code ----------------------


def killed_at_the_model(env: dict[str, Any], *args: str) -> str:
    """``clearance <args>`` SIGKILLed while it awaits the model's answer after the tool's
    result; its output."""
    (env["tmp"] / "hang_model").touch()
    waiting = env["tmp"] / "model_waiting"
    proc = subprocess.Popen(
        [sys.executable, "-m", "clearance", *args, "--db", env["db"]], cwd=env["tmp"],
        env=env["proc_env"], text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not waiting.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    (env["tmp"] / "hang_model").unlink()
    waiting.unlink()
    assert proc.returncode == -signal.SIGKILL, out
    return out


def test_a_call_declined_by_two_earlier_sessions_verifies_and_a_run_beyond_them_does_not(
    env: dict[str, Any],
) -> None:
    """``replay: false``, no approval: each resume runs the finished call again. The code
    before this round recorded each session's ``replay_declined`` naming the answer's first
    run and no ``replacement``: two declines, two more runs, an honest run. A run beyond
    the declines (one of them removed) is still a finding."""
    (env["tmp"] / "team.yaml").write_text(TEAM.replace("approval: required, ", ""))
    out = killed_at_the_model(env, "run", "team.yaml", "--model", "openai:m")
    run_id = re.search(r"run (run_\S+) started", out).group(1)  # type: ignore[union-attr]
    killed_at_the_model(env, "resume", run_id)
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt"] * 3
    conn = sqlite3.connect(env["file"])
    declines = conn.execute(
        "SELECT event_id, data FROM events WHERE run_id = ? AND kind = 'replay_declined' "
        "ORDER BY rowid",
        (run_id,),
    ).fetchall()
    runs = [
        json.loads(raw)["tool_call_id"]
        for (raw,) in conn.execute(
            "SELECT data FROM events WHERE run_id = ? AND kind = 'tool_started' ORDER BY rowid",
            (run_id,),
        )
    ]
    assert [json.loads(raw)["original"] for _, raw in declines] == runs[:2]  # today's: in place
    for event_id, raw in declines:  # as the earlier code recorded them
        data = {**json.loads(raw), "original": runs[0]}
        assert data.pop("replacement") in runs[1:]
        conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    conn.close()
    rebuild_chain(env["file"], run_id)
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output

    conn = sqlite3.connect(env["file"])
    conn.execute("DELETE FROM events WHERE event_id = ?", (declines[1][0],))
    conn.commit()
    conn.close()
    rebuild_chain(env["file"], run_id, drop=declines[1][0])
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 1, verified.output
    assert verified.output.strip().splitlines()[:-1] == [
        f"tool call {runs[2]}: remove ran a second time for one model answer (first as tool "
        f"call {runs[1]}), without a recorded approval to rerun it"
    ]
