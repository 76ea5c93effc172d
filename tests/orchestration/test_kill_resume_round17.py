"""A seeded SIGKILL harness: `clearance run` and `resume` killed, on SQLite and PostgreSQL.

A team of three tasks (a tool loop of a side-effecting user tool, a task whose spawned child
runs the same tool, a task that writes the store) and the coordinator's synthesis runs as
``python -m clearance run team.yaml`` against a scripted OpenAI-compatible server on
127.0.0.1 that logs every request body it received, in order. Each seed kills the run, then
the first resume, at a chosen moment:

- ``server:N``: on receipt of the N-th request, before it is answered (the answer blocked);
- ``answered:N``: a moment after the N-th answer left the server (while it is recorded);
- ``synthesis``: on receipt of the synthesis request;
- ``commit:K``: inside the K-th ledger transaction, its rows written and not committed;
- ``tool:K``: inside the K-th call of the side-effecting tool, after its side effect.

After each kill: every request the server received is recorded in the ledger, exactly as
received (the guarantee "durably recorded before it is sent"); nothing recorded as finished
(a task's result, a model answer, a tool result) is lost or changed. After the last
command: no request whose answer was recorded was sent again, each side effect happened
once (a tool call that may have run pauses its task for a person, as `docs/resilience.md`
says, and the ledger shows it started without a result), the results are the scripted
model's, and `clearance verify` passes.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger
from killed_runs import CommandLog, scribe_turn

pytestmark = pytest.mark.network

SRC = Path(__file__).resolve().parents[2] / "src"

TOOL_MODULE = '''\
import os
import signal
from pathlib import Path

HERE = Path(__file__).parent
_calls = [0]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def append(line: str) -> str:
    """Append a line to effects.log (a line already there is not appended again)."""
    with open(HERE / "calls.log", "a") as calls:
        calls.write(line + "\\n")
    effects = HERE / "effects.log"
    have = effects.read_text().split() if effects.exists() else []
    if line not in have:
        with open(effects, "a") as out:
            out.write(line + "\\n")
    _calls[0] += 1
    if _calls[0] == int(os.environ.get("KILL_IN_TOOL") or 0):  # after the side effect
        _die()
    return f"appended {line}"


# KILL_IN_COMMIT=K: SIGKILL this process inside its K-th ledger transaction, once the
# transaction's rows are written and before it commits.
_IN_COMMIT = int(os.environ.get("KILL_IN_COMMIT") or 0)
if _IN_COMMIT:
    from clearance._state.ledger.chaining import ChainWriter

    _append = ChainWriter.append
    _appended = [0]

    def append_entries(self, conn, entries):
        _append(self, conn, entries)
        _appended[0] += 1
        if _appended[0] == _IN_COMMIT:
            _die()

    ChainWriter.append = append_entries
'''

TEAM = """\
name: kill17
store: STORE
agents:
  - {name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}
  - {name: lead, instructions: "You lead.", can_spawn: [scribe], tools: [append],
     limits: {max_children: 1}}
  - {name: keeper, instructions: "You keep notes.", tools: [store_set],
     store_grants: {notes: write}}
tools:
  append: {function: "kill17_tools:append", idempotent: false}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: a, title: A, description: "APPEND a: append the lines a0 to a2.", assignee: scribe}
  - {id: b, title: B, description: "Have the lines b0 to b1 appended.", assignee: lead,
     fan_out: {agent: scribe, goals: ["APPEND b: append the lines b0 to b1."]}}
  - {id: c, title: C, description: "Keep a note that A is done.", assignee: keeper,
     depends_on: [a]}
"""

LINES = {"a": 3, "b": 2}
RESULTS = {"a": "wrote lines a", "b": "lead: b is done", "c": "noted"}
SYNTHESIS = "summary"
REQUESTS = 11  # a: 4, b's child: 3, b: 1, c: 2, the synthesis: 1


def canonical(messages: list[dict[str, Any]]) -> str:
    """A request's messages as one comparable text (what the server got, what was recorded)."""
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


class Script:
    """The scripted model; logs each request body it received (numbered) and kills on cue."""

    def __init__(self) -> None:
        self.received: list[str] = []  # the n-th request's messages, canonical
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.kill: tuple[str, int] | None = None  # ("server" | "answered" | "synthesis", n)
        self.killed = threading.Event()

    def _die(self) -> None:
        if self.pid is not None and not self.killed.is_set():
            self.killed.set()
            os.kill(self.pid, signal.SIGKILL)

    def reply(self, messages: list[dict[str, Any]]) -> Any:
        system = messages[0]["content"]
        with self.lock:
            self.received.append(canonical(messages))
            number = len(self.received)
            kill = self.kill
        if kill is not None:
            where, n = kill
            if (where == "server" and n == number) or (
                where == "synthesis" and system == "You are the editor."
            ):
                self._die()  # the answer is never sent: the request was recorded first
            elif where == "answered" and n == number:
                threading.Timer(0.003 * (number % 4), self._die).start()
        text = "\n".join(m["content"] or "" for m in messages)
        if system == "You append lines.":
            prefix, line = scribe_turn(text, LINES)
            if line is not None:
                return [("append", {"line": line})]
            return f"wrote lines {prefix}"
        if system == "You lead.":
            return RESULTS["b"]
        if system == "You keep notes.":
            if "stored notes/a" in text:
                return RESULTS["c"]
            return [("store_set", {"namespace": "notes", "key": "a", "value": "A is done"})]
        return SYNTHESIS


class Harness(CommandLog):
    """One seed's run: the server, the folder, the ledger and store URLs, the kills."""

    def __init__(
        self, tmp: Path, url: str, script: Script, db: str, store: str, team: str = TEAM
    ) -> None:
        super().__init__(db)
        self.tmp, self.url, self.script, self.store = tmp, url, script, store
        (tmp / "kill17_tools.py").write_text(TOOL_MODULE)
        self.team = tmp / "team.yaml"
        self.team.write_text(team.replace("STORE", store))

    def command(self, *args: str, kill: tuple[str, int] | None = None) -> tuple[int, str]:
        """Run one `clearance` command, killed as ``kill`` says; its exit code and output."""
        env = {
            **os.environ,
            "OPENAI_BASE_URL": self.url,
            "OPENAI_API_KEY": "test",
            "PYTHONPATH": f"{SRC}{os.pathsep}{self.tmp}",
            "COLUMNS": "250",
            "KILL_IN_TOOL": str(kill[1]) if kill and kill[0] == "tool" else "",
            "KILL_IN_COMMIT": str(kill[1]) if kill and kill[0] == "commit" else "",
        }
        env.pop("CLEARANCE_LEDGER_KEY", None)
        self.script.killed.clear()
        self.script.kill = None
        if kill is not None and kill[0] in ("server", "answered", "synthesis"):
            # N counts this command's requests: the server's count goes on across commands.
            self.script.kill = (kill[0], len(self.script.received) + kill[1])
        proc = subprocess.Popen(
            [sys.executable, "-m", "clearance", *args, "--db", self.db], cwd=self.tmp, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.script.pid = proc.pid
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            self.script.pid = None
            self.script.kill = None
        return self.ended(args, kill, proc.returncode, out)

    def finished(self, rid: str) -> dict[str, dict[str, Any]]:
        """What the ledger holds as finished: completed tasks, answered calls, tool results."""
        with RunLedger(self.db) as ledger:
            tasks, calls = ledger.tasks(rid), ledger.calls(rid)
            return {
                "tasks": {t.task_id: t.result for t in tasks if t.status == "completed"},
                "calls": {c.call_id: c.response for c in calls if c.response is not None},
                "tools": {t.tool_call_id: t.result for t in ledger.tool_calls(rid)},
            }

    def recorded(self, rid: str) -> tuple[set[str], set[str]]:
        """The requests recorded, and those recorded with their answer (canonical messages)."""
        with RunLedger(self.db) as ledger:
            calls = ledger.calls(rid)
        return (
            {canonical(c.messages) for c in calls},
            {canonical(c.messages) for c in calls if c.response is not None},
        )


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def plan(seed: int) -> list[tuple[str, int]]:
    """The kills of a seed: one of `run`, one of the first `resume`."""
    rng = random.Random(seed)
    kills = []
    for budget in (REQUESTS - 1, 3):  # the resume has fewer requests left
        where = rng.choice(["server", "answered", "synthesis", "commit", "tool"])
        number = {
            "server": rng.randint(1, budget),
            "answered": rng.randint(1, budget),
            "synthesis": 0,
            "commit": rng.randint(2, budget),
            "tool": rng.randint(1, 2 if budget == 3 else 5),
        }[where]
        kills.append((where, number))
    return kills


def drive(h: Harness, kills: list[tuple[str, int]]) -> str:
    """Run, resume to the end (approving what pauses), checking the ledger after each step."""
    rid: str | None = None
    seen: dict[str, dict[str, Any]] = {"tasks": {}, "calls": {}, "tools": {}}
    answered: set[str] = set()  # requests whose answer was recorded before this command
    for round_ in range(len(kills) + 6):
        kill = kills[round_] if round_ < len(kills) else None
        sent_before = len(h.script.received)
        if rid is None:
            code, out = h.command("run", str(h.team), "--model", "openai:m", kill=kill)
        else:
            code, out = h.command("resume", rid, "--team", str(h.team), kill=kill)
        assert code in (0, 3, -signal.SIGKILL), h.report()
        rid = rid or h.run_id()
        if rid is None:  # killed before the run's first record committed
            assert not h.script.received and not lines(h.tmp / "calls.log"), h.report()
            continue
        recorded, with_answer = h.recorded(rid)
        missing = [r for r in h.script.received if r not in recorded]
        assert not missing, ("received but not recorded", missing[:1], h.report())
        again = [r for r in h.script.received[sent_before:] if r in answered]
        assert not again, ("an answered request was sent again", again[:1], h.report())
        answered = with_answer
        now = h.finished(rid)
        lost = [
            (k, key) for k, rows in seen.items() for key, v in rows.items() if now[k].get(key) != v
        ]
        assert not lost, ("finished records lost or changed", lost, h.report())
        seen = now
        if code == 0:
            return rid
        if code == 3:  # a tool call that may have run: the ledger shows it, a person decides
            ids = list(dict.fromkeys(re.findall(r"clearance approve \S+ (apr_[0-9a-z_]+)", out)))
            assert ids, h.report()
            with RunLedger(h.db) as ledger:
                started = {e.data["tool_call_id"] for e in ledger.events(rid, "tool_started")}
                done = {t.tool_call_id for t in ledger.tool_calls(rid)}
            assert started - done, ("paused, yet no tool call started without a result", h.report())
            for call_id in ids:
                code, out = h.command("approve", rid, call_id)
                assert code == 0, h.report()
    raise AssertionError("the run did not finish:\n" + h.report())


def check_end(h: Harness, rid: str, approved_tools: int) -> None:
    with RunLedger(h.db) as ledger:
        run = ledger.get_run(rid)
        results = {t.task_id: t.result for t in ledger.tasks(rid)}
    assert run.status == "completed", h.report()
    assert results == RESULTS and run.synthesis == SYNTHESIS, (results, h.report())
    expected = sorted(f"{p}{i}" for p, n in LINES.items() for i in range(n))
    assert sorted(lines(h.tmp / "effects.log")) == expected, h.report()
    calls = lines(h.tmp / "calls.log")
    assert sorted(set(calls)) == expected, h.report()
    assert len(calls) - len(expected) <= approved_tools, (calls, h.report())
    code, out = h.command("verify", rid)
    assert code == 0, out + h.report()


SEEDS = [1, 2, 3]


@pytest.fixture
def harness(tmp_path: Path, openai_server: Any) -> Iterator[Any]:
    def make(db: str, store: str, team: str = TEAM) -> Harness:
        script = Script()
        return Harness(tmp_path, openai_server(script.reply), script, db, store, team)

    yield make


def approvals(h: Harness) -> int:
    return sum(entry.startswith("approve ") for entry in h.log)


@pytest.mark.parametrize("seed", SEEDS)
def test_sqlite_killed_run_and_resume_lose_nothing(harness: Any, tmp_path: Path, seed: int) -> None:
    h = harness(f"sqlite:///{tmp_path / 'r.db'}", f"sqlite:///{tmp_path / 'store.db'}")
    rid = drive(h, plan(seed))
    check_end(h, rid, approvals(h))
    assert h.kills >= 1, h.report()


@pytest.fixture
def pg_database(postgres_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh PostgreSQL database of this test's own."""
    from sqlalchemy import create_engine, text

    name = "kill17_" + re.sub(r"\W", "_", request.node.name).lower()[-40:]
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        yield postgres_url.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.mark.parametrize("seed", SEEDS)
def test_postgresql_killed_run_and_resume_lose_nothing(
    harness: Any, pg_database: str, seed: int
) -> None:
    h = harness(pg_database, pg_database)
    rid = drive(h, plan(seed + 100))
    check_end(h, rid, approvals(h))
    assert h.kills >= 1, h.report()


def test_the_uninterrupted_run(harness: Any, tmp_path: Path) -> None:
    h = harness(f"sqlite:///{tmp_path / 'r.db'}", f"sqlite:///{tmp_path / 'store.db'}")
    rid = drive(h, [])
    check_end(h, rid, 0)
    assert len(h.script.received) == REQUESTS


CHILD_ONLY = """\
name: kill17
agents:
  - {name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}
  - {name: lead, instructions: "You lead.", can_spawn: [scribe], tools: [append],
     limits: {max_children: 1}}
tools:
  append: {function: "kill17_tools:append", idempotent: false}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: b, title: B, description: "Have the lines b0 to b1 appended.", assignee: lead,
     fan_out: {agent: scribe, goals: ["APPEND b: append the lines b0 to b1."]}}
"""


def test_a_child_paused_for_a_person_is_replayed_not_sent_again(
    harness: Any, tmp_path: Path
) -> None:
    """A child killed inside its tool pauses for approval; approved, its steps are replayed.

    It was recorded as a ``failed`` child while it only waited for a person, so the next
    resume sent its answered requests again and ran its finished tool calls again.
    """
    h = harness(f"sqlite:///{tmp_path / 'r.db'}", "none", CHILD_ONLY)
    rid = drive(h, [("tool", 2)])  # the child's second append, after its side effect
    assert approvals(h) == 1, h.report()
    with RunLedger(h.db) as ledger:
        outcomes = [e.data["status"] for e in ledger.events(rid, "child")]
    assert outcomes == ["ok"], h.report()  # the pause is no outcome of the child
    assert lines(tmp_path / "calls.log") == ["b0", "b1", "b1"], h.report()  # b1 approved
    assert len(h.script.received) == len(set(h.script.received)), h.report()
    code, out = h.command("verify", rid)
    assert code == 0, out
