"""Two replay leftovers: a declined call's rerun request, and older runs' declines.

1. A finished call of a ``replay: false`` tool that needs approval runs again under a new
   id (its replay declined), once a person approves the rerun. The request named an empty
   task ("janitor in task , ..."): the new id had no owner. Requests recorded so (by the
   code before) must still be decided: an approval of one resumes the run.
2. A run recorded before ``replay_declined`` named its ``replacement``: session 1 killed
   inside the ordinary call after the declined one, session 2 killed at the model after
   both. The step's rows are [stamp, stamp again, append]; the next session took the second
   stamp's row for the append (another name) and ran the append a third time, which
   ``verify`` flags. The replacement is worked out from the records (the first new start of
   the same call after each older decline), so the append is replayed.

Real parts: a scripted OpenAI-compatible server on 127.0.0.1, ``clearance`` subprocesses
SIGKILLed at chosen points, a real SQLite ledger, and the real CLI.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_replay_declined_round18 import TEAM as DECLINED_TEAM
from test_replay_declined_round18 import Declined, at_lead_after_the_tools, lead, replay_events
from test_replay_sessions_round17 import Script

from clearance import RunLedger
from clearance._core.vocabulary import EventKind
from test_round18_review import TEAM as REVIEW_TEAM
from test_round18_review import (
    TOOL_MODULE,
    asked,
    cli,
    killed_resume,
    ran,
    rebuild_chain,
    replier,
    requests,
)

pytestmark = pytest.mark.network


@pytest.fixture
def env(tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The review test's: a gated ``remove`` (approval, ``replay: false``) logging each run."""
    url = openai_server(replier(tmp_path))
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tmp_path / "round18_review_tools.py").write_text(TOOL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "round18_review_tools", raising=False)
    (tmp_path / "team.yaml").write_text(REVIEW_TEAM)
    return {
        "tmp": tmp_path, "url": url, "file": tmp_path / "runs.db",
        "db": f"sqlite:///{tmp_path / 'runs.db'}", "log": tmp_path / "ran.log",
        "proc_env": {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    }  # fmt: skip


def paused_on_a_declined_rerun(env: dict[str, Any]) -> tuple[str, str, str]:
    """Run, approve, killed after the call finished; the resume declines its replay and
    pauses on a rerun request. Returns the run, the request and the resume's output."""
    run = cli(env, "run", str(env["tmp"] / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 3, run.output
    run_id = run.output.split("run id: ")[1].split()[0]
    (first,) = requests(run.output)
    assert cli(env, "approve", run_id, first, "--by", "alice").exit_code == 0
    killed_resume(env, run_id, inside=False)
    paused = cli(env, "resume", run_id)
    assert paused.exit_code == 3, paused.output
    (rerun,) = requests(paused.output)
    with RunLedger(env["db"], create=False) as ledger:
        assert [e.data["original"] for e in ledger.events(run_id, EventKind.REPLAY_DECLINED)]
    return run_id, rerun, paused.output


def test_a_declined_calls_rerun_request_names_its_task(env: dict[str, Any]) -> None:
    run_id, rerun, _ = paused_on_a_declined_rerun(env)
    with RunLedger(env["db"], create=False) as ledger:
        (request,) = [
            e for e in ledger.events(run_id, "awaiting_approval") if e.data["call_id"] == rerun
        ]
    assert request.data["task_id"] == "tidy"
    assert request.subject == "task:tidy"
    approved = cli(env, "approve", run_id, rerun, "--by", "bob")
    assert approved.exit_code == 0, approved.output
    assert f"approved {rerun} by bob: tool remove may have run (janitor in task tidy, " in (
        " ".join(approved.output.split())
    )
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output
    assert ran(env) == ["old.txt", "old.txt"]
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output


def as_recorded_without_a_task(db: Path, run_id: str, call_id: str) -> None:
    """The request (and any decision on it) as the earlier code recorded it: task ``""``."""
    conn = sqlite3.connect(db)
    for event_id, raw in conn.execute(
        "SELECT event_id, data FROM events WHERE run_id = ? AND kind IN "
        "('awaiting_approval', 'approval_decided')",
        (run_id,),
    ).fetchall():
        data = json.loads(raw)
        if data["call_id"] == call_id:
            data["task_id"] = ""
            conn.execute(
                "UPDATE events SET data = ?, subject = 'task:' WHERE event_id = ?",
                (json.dumps(data), event_id),
            )
    conn.commit()
    conn.close()
    rebuild_chain(db, run_id)


def test_an_older_rerun_request_naming_no_task_still_resumes_once_approved(
    env: dict[str, Any],
) -> None:
    run_id, rerun, _ = paused_on_a_declined_rerun(env)
    as_recorded_without_a_task(env["file"], run_id, rerun)
    assert cli(env, "verify", run_id).exit_code == 0
    assert cli(env, "approve", run_id, rerun, "--by", "bob").exit_code == 0
    finished = cli(env, "resume", run_id)
    assert finished.exit_code == 0, finished.output  # not paused on a new request for it
    assert "status: completed" in finished.output
    assert ran(env) == ["old.txt", "old.txt"]
    assert len(asked(env, run_id)) == 2  # the tool call's and the rerun's: nothing asked again
    verified = cli(env, "verify", run_id)
    assert verified.exit_code == 0, verified.output


# -- an older run's decline, with a later call of the same answer --------------------------


@pytest.fixture
def harness(tmp_path: Path, openai_server: Any) -> Callable[[], Declined]:
    def make() -> Declined:
        script = Script(lead)
        return Declined(tmp_path, openai_server(script.reply), script, DECLINED_TEAM)

    return make


def strip_replacements(h: Declined) -> None:
    """The run's ``replay_declined`` events as the earlier code recorded them (each naming
    the answer's first run, no ``replacement``), the chain rebuilt."""
    rid = h.run_id()
    db = Path(h.db.removeprefix("sqlite:///"))
    conn = sqlite3.connect(db)
    first = json.loads(
        conn.execute(
            "SELECT data FROM events WHERE run_id = ? AND kind = 'tool_started' ORDER BY rowid",
            (rid,),
        ).fetchone()[0]
    )["tool_call_id"]
    declines = conn.execute(
        "SELECT event_id, data FROM events WHERE run_id = ? AND kind = 'replay_declined'",
        (rid,),
    ).fetchall()
    assert declines
    for event_id, raw in declines:
        data = {**json.loads(raw), "original": first}
        assert data.pop("replacement")
        conn.execute("UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(data), event_id))
    conn.commit()
    conn.close()
    rebuild_chain(db, rid)


def test_an_older_runs_decline_keeps_the_later_call_in_its_place(harness: Any) -> None:
    h = harness()
    (h.tmp / "kill-in-append").touch()
    h.session(None, code=-9)  # killed inside append, after its side effect
    h.session(at_lead_after_the_tools)  # stamp declined, run again; append run again
    assert h.calls_log() == ["stamp:x", "L0", "stamp:x", "L0"], h.report()
    strip_replacements(h)
    h.verify()
    h.session(None)
    # The append is replayed (the second session's result), never run a third time.
    assert h.calls_log() == ["stamp:x", "L0", "stamp:x", "L0", "stamp:x"], h.report()
    assert replay_events(h) == (["append"], ["stamp", "stamp"])
    with RunLedger(h.db) as ledger:
        (task,) = ledger.tasks(h.run_id())
    assert (task.status, task.result) == ("completed", "lead done"), h.report()
    h.verify()


def test_an_older_run_declined_twice_replays_the_later_call(harness: Any) -> None:
    h = harness()
    (h.tmp / "kill-in-append").touch()
    h.session(None, code=-9)
    h.session(at_lead_after_the_tools)
    h.session(at_lead_after_the_tools)
    assert h.calls_log() == ["stamp:x", "L0", "stamp:x", "L0", "stamp:x"], h.report()
    strip_replacements(h)
    h.verify()
    h.session(None)
    assert h.calls_log() == ["stamp:x", "L0", "stamp:x", "L0", "stamp:x", "stamp:x"], h.report()
    assert replay_events(h) == (["append", "append"], ["stamp", "stamp", "stamp"])
    h.verify()
