"""Durable resume end to end: `clearance run` killed at every step boundary, then `resume`.

The model is a real OpenAI-compatible server on 127.0.0.1 answering by script: four calls
of a file-appending tool, then an answer. The run is SIGKILLed in turn before each request
is recorded, after it is recorded (the server kills the client on receipt), inside each
tool call (after its side effect) and after each tool result is recorded. After `clearance
resume`, each side effect happened once, the server got each request at most once (but the
one left pending, sent again once), the result is the uninterrupted run's, and `verify`
passes. The kill points other than the server's are injected by the tool's module, which the
CLI process imports (``KILL_AT``).
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger

pytestmark = pytest.mark.network

SRC = Path(__file__).resolve().parents[2] / "src"

TOOL_MODULE = '''\
import os
import signal
from pathlib import Path

from clearance._state.ledger.run_ledger import RunLedger

HERE = Path(__file__).parent
KILL_AT = os.environ.get("KILL_AT", "")  # "before:K", "tool:K" or "after:K"
_seen = {"before": 0, "after": 0}


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def append(line: str) -> str:
    """Append a line to effects.log, once: a line already there is not appended again."""
    with open(HERE / "calls.log", "a") as calls:
        calls.write(line + "\\n")
    effects = HERE / "effects.log"
    have = effects.read_text().split() if effects.exists() else []
    if line not in have:
        with open(effects, "a") as out:
            out.write(line + "\\n")
    if KILL_AT == f"tool:{line}":
        _die()
    return f"appended {line}"


_record_request = RunLedger.record_request
_record_tool_call = RunLedger.record_tool_call


def record_request(self, **kwargs):
    if kwargs["agent"] == "scribe":
        _seen["before"] += 1
        if KILL_AT == f"before:{_seen['before']}":
            self.flush()
            _die()
    return _record_request(self, **kwargs)


def record_tool_call(self, **kwargs):
    _record_tool_call(self, **kwargs)
    _seen["after"] += 1
    if KILL_AT == f"after:{_seen['after']}":
        self.flush()
        _die()


RunLedger.record_request = record_request
RunLedger.record_tool_call = record_tool_call
'''

TEAM = """\
name: durable
agents:
  - {name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}
tools:
  append: {function: "replay_tools_mod:append", idempotent: %s}
tasks:
  - {id: lines, title: Lines, description: "APPEND-TASK: append the lines 0 to 3.",
     assignee: scribe}
"""

DELEGATED = """\
name: durable
agents:
  # A delegate calls only the tools its delegator may call too.
  - {name: lead, instructions: "You lead.", can_delegate_to: [scribe], tools: [append],
     limits: {max_steps: 4}}
  - {name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}
tools:
  append: {function: "replay_tools_mod:append", idempotent: %s}
tasks:
  - {id: lines, title: Lines, description: "Have the lines 0 to 3 appended.", assignee: lead}
"""

LINES = 4


class Server:
    """The script, and what it received; kills the run's process on a chosen request."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.kill_on: int | None = None
        self.pid: int | None = None
        self.task_requests = 0

    def reply(self, messages: list[dict[str, Any]]) -> Any:
        text = "\n".join(m["content"] or "" for m in messages)
        self.received.append(hashlib.sha256(text.encode()).hexdigest())
        if messages[0]["content"] == "You lead.":  # a delegator
            if "wrote lines 0 to 3" in text:
                return "wrote lines 0 to 3"
            return [("delegate", {"agent": "scribe", "task": "Append the lines 0 to 3."})]
        if messages[0]["content"] != "You append lines.":
            return "summary"  # the coordinator's synthesis
        self.task_requests += 1
        if self.kill_on == self.task_requests and self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)  # the request was recorded before it was sent
        done = len(re.findall(r"appended \d", text))
        if done < LINES:
            return [("append", {"line": str(done)})]
        return "wrote lines 0 to 3"


@pytest.fixture
def env(tmp_path: Path, openai_server) -> dict[str, Any]:
    server = Server()
    url = openai_server(server.reply)
    (tmp_path / "replay_tools_mod.py").write_text(TOOL_MODULE)
    return {"tmp": tmp_path, "url": url, "server": server, "db": f"sqlite:///{tmp_path / 'r.db'}"}


def clearance(env: dict[str, Any], *args: str, kill_at: str = "", wait: bool = True) -> Any:
    environ = {
        **os.environ,
        "OPENAI_BASE_URL": env["url"],
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": f"{SRC}{os.pathsep}{env['tmp']}",
        "KILL_AT": kill_at,
        "COLUMNS": "250",
    }
    environ.pop("CLEARANCE_LEDGER_KEY", None)
    if "key" in env:
        environ["CLEARANCE_LEDGER_KEY"] = env["key"]
    command = [sys.executable, "-m", "clearance", *args, "--db", env["db"]]
    proc = subprocess.Popen(
        command, cwd=env["tmp"], env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    env["server"].pid = proc.pid
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def start(
    env: dict[str, Any], idempotent: bool = False, kill_at: str = "", text: str = TEAM
) -> tuple[int, str]:
    team = env["tmp"] / "team.yaml"
    team.write_text(text % ("true" if idempotent else "false"))
    return clearance(env, "run", str(team), "--model", "openai:m", kill_at=kill_at)


def run_id(env: dict[str, Any]) -> str:
    with RunLedger(env["db"]) as ledger:
        (run,) = ledger.list_runs()
        return run.run_id


def outcome(env: dict[str, Any], rid: str) -> tuple[str | None, str | None]:
    with RunLedger(env["db"]) as ledger:
        (task,) = ledger.tasks(rid)
        return task.result, ledger.get_run(rid).synthesis


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_an_uninterrupted_run(env) -> None:
    code, out = start(env)
    assert code == 0, out
    rid = run_id(env)
    assert outcome(env, rid) == ("wrote lines 0 to 3", "summary")
    assert lines(env["tmp"] / "effects.log") == ["0", "1", "2", "3"]
    assert len(env["server"].received) == len(set(env["server"].received)) == 6


KILLS = [
    *(f"before:{k}" for k in range(1, LINES + 2)),
    *(f"server:{k}" for k in range(1, LINES + 2)),
    *(f"after:{k}" for k in range(1, LINES + 1)),
]


@pytest.mark.parametrize("kill", KILLS)
def test_a_killed_run_resumes_with_each_side_effect_once(env, kill: str) -> None:
    server: Server = env["server"]
    where, _, k = kill.partition(":")
    if where == "server":
        server.kill_on = int(k)
        code, out = start(env)
    else:
        code, out = start(env, kill_at=kill)
    assert code == -signal.SIGKILL, out
    server.kill_on = None
    rid = run_id(env)
    code, out = clearance(env, "resume", rid)
    assert code == 0, out
    assert outcome(env, rid) == ("wrote lines 0 to 3", "summary")
    assert lines(env["tmp"] / "effects.log") == ["0", "1", "2", "3"]
    assert lines(env["tmp"] / "calls.log") == ["0", "1", "2", "3"]  # no tool ran twice
    twice = [h for h in set(server.received) if server.received.count(h) > 1]
    assert len(twice) == (1 if where == "server" else 0), server.received
    assert len(set(server.received)) == 6
    summary = re.search(r"replayed (\d+) model calls and (\d+) tool calls, sent (\d+)", out)
    assert summary is not None, out
    replayed_calls, _, sent = map(int, summary.groups())
    assert replayed_calls + sent == 6  # five task steps and the synthesis, none twice
    code, out = clearance(env, "verify", rid)
    assert code == 0, out


def test_a_run_killed_inside_a_tool_pauses_until_a_person_decides(env) -> None:
    code, out = start(env, kill_at="tool:2")
    assert code == -signal.SIGKILL, out
    rid = run_id(env)
    code, out = clearance(env, "resume", rid)
    assert code == 3, out
    assert "run finished: awaiting_approval" in out
    assert lines(env["tmp"] / "calls.log") == ["0", "1", "2"]  # not run again
    (call_id,) = re.findall(r"apr_[0-9a-z_]+", out.split("awaiting approval:")[1])
    code, out = clearance(env, "inspect", rid, "--no-prompt")
    assert f"{call_id}: tool append may have run" in out, out
    assert "REPLAYED on resume (1x, not sent again)" in out
    page = env["tmp"] / "page.html"
    assert clearance(env, "view", rid, "--output", str(page))[0] == 0
    assert page.read_text().count("replayed on resume (1x), not sent again") == 3  # 3 steps
    code, out = clearance(env, "approve", rid, call_id)
    assert code == 0, out
    assert "tool append may have run" in out
    code, out = clearance(env, "resume", rid)
    assert code == 0, out
    assert lines(env["tmp"] / "calls.log") == ["0", "1", "2", "2", "3"]  # approved: ran again
    assert lines(env["tmp"] / "effects.log") == ["0", "1", "2", "3"]
    assert outcome(env, rid) == ("wrote lines 0 to 3", "summary")
    code, out = clearance(env, "verify", rid)
    assert code == 0, out


def test_an_idempotent_tool_killed_inside_runs_again_on_resume(env) -> None:
    code, out = start(env, idempotent=True, kill_at="tool:2")
    assert code == -signal.SIGKILL, out
    rid = run_id(env)
    code, out = clearance(env, "resume", rid)
    assert code == 0, out
    assert lines(env["tmp"] / "calls.log") == ["0", "1", "2", "2", "3"]
    assert lines(env["tmp"] / "effects.log") == ["0", "1", "2", "3"]
    assert outcome(env, rid) == ("wrote lines 0 to 3", "summary")
    code, out = clearance(env, "verify", rid)
    assert code == 0, out


def test_an_edited_tool_result_in_a_keyed_ledger_is_not_replayed(env) -> None:
    env["key"] = "k" * 32
    code, out = start(env, kill_at="after:2")
    assert code == -signal.SIGKILL, out
    rid = run_id(env)
    import sqlite3

    db = sqlite3.connect(env["tmp"] / "r.db")
    db.execute("UPDATE tool_calls SET result = 'appended 9' WHERE run_id = ? AND step = 1", (rid,))
    db.commit()
    db.close()
    before = len(env["server"].received)
    code, out = clearance(env, "resume", rid)
    assert code == 2, out
    assert "cannot be resumed" in out and "tool call" in out
    assert len(out.strip().splitlines()) == 1, out
    assert len(env["server"].received) == before
    assert lines(env["tmp"] / "calls.log") == ["0", "1"]


def test_verify_finds_a_replayed_result_that_differs_from_its_original(env, rechain) -> None:
    code, out = start(env, kill_at="after:3")
    assert code == -signal.SIGKILL, out
    rid = run_id(env)
    assert clearance(env, "resume", rid)[0] == 0
    assert clearance(env, "verify", rid)[0] == 0
    import sqlite3

    path = env["tmp"] / "r.db"
    db = sqlite3.connect(path)
    db.execute("UPDATE tool_calls SET result = 'appended 7' WHERE run_id = ? AND step = 2", (rid,))
    db.commit()
    db.close()
    rechain(path, rid)  # a forger without the key re-chains the edited run
    code, out = clearance(env, "verify", rid)
    assert code == 1, out
    assert "the replayed result of tool call" in out and "differs from its original" in out


@pytest.mark.parametrize("kill", ["before:3", "server:2", "after:2", "after:4"])
def test_a_delegate_killed_mid_loop_resumes_with_each_side_effect_once(env, kill: str) -> None:
    server: Server = env["server"]
    where, _, k = kill.partition(":")
    server.kill_on = int(k) if where == "server" else None
    code, out = start(env, kill_at="" if where == "server" else kill, text=DELEGATED)
    assert code == -signal.SIGKILL, out
    server.kill_on = None
    rid = run_id(env)
    code, out = clearance(env, "resume", rid)
    assert code == 0, out
    assert outcome(env, rid) == ("wrote lines 0 to 3", "summary")
    assert lines(env["tmp"] / "calls.log") == ["0", "1", "2", "3"]  # no tool ran twice
    twice = [h for h in set(server.received) if server.received.count(h) > 1]
    assert len(twice) == (1 if where == "server" else 0), server.received
    assert "replayed" in out and "sent" in out
    code, out = clearance(env, "verify", rid)
    assert code == 0, out


def test_a_delegate_killed_inside_its_tool_pauses_the_task(env) -> None:
    code, out = start(env, kill_at="tool:1", text=DELEGATED)
    assert code == -signal.SIGKILL, out
    rid = run_id(env)
    code, out = clearance(env, "resume", rid)
    assert code == 3, out
    assert lines(env["tmp"] / "calls.log") == ["0", "1"]
    code, out = clearance(env, "inspect", rid, "--no-prompt")
    assert "tool append may have run (scribe" in out, out


ISOLATED = """\
name: durable
input: {default: project, include: ["*.py"]}
agents:
  - {name: scribe, instructions: "You review."}
  - {name: other, instructions: "Unused.", tools: [append]}
tools: {append: "replay_tools_mod:append"}  # its module holds the kill hooks
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: lines, mode: isolated, title: Lines, description: "Review a.py.", assignee: scribe,
     files: [a.py]}
"""


def isolated_reply(server: Server, messages: list[dict[str, Any]]) -> Any:
    text = "\n".join(m["content"] or "" for m in messages)
    server.received.append(hashlib.sha256(text.encode()).hexdigest())
    system, user = messages[0]["content"], messages[-1]["content"]
    if system == "You review.":
        server.task_requests += 1
        if server.kill_on == server.task_requests and server.pid is not None:
            os.kill(server.pid, signal.SIGKILL)
        if "### Clarification 1" not in user:
            return "STATUS: needs_context\nQUESTION: Which Python version is this for?"
        return "- a.py defines alpha().\nSTATUS: done"
    if "## Question from the subagent" in user:
        return "Python 3.11."
    return "summary"


@pytest.mark.parametrize("kill", ["server:1", "server:2", "before:2"])
def test_an_isolated_task_killed_between_rounds_resumes_without_asking_twice(
    tmp_path: Path, openai_server, kill: str
) -> None:
    server = Server()
    url = openai_server(lambda messages: isolated_reply(server, messages))
    (tmp_path / "replay_tools_mod.py").write_text(TOOL_MODULE)
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "a.py").write_text("def alpha():\n    return 1\n")
    env = {"tmp": tmp_path, "url": url, "server": server, "db": f"sqlite:///{tmp_path / 'r.db'}"}
    team = tmp_path / "team.yaml"
    team.write_text(ISOLATED)
    where, _, k = kill.partition(":")
    server.kill_on = int(k) if where == "server" else None
    args = ["run", str(team), "--model", "openai:m"]
    code, out = clearance(env, *args, kill_at="" if where == "server" else kill)
    assert code == -signal.SIGKILL, out
    server.kill_on = None
    rid = run_id(env)
    code, out = clearance(env, "resume", rid, "--team", str(team))
    assert code == 0, out
    assert outcome(env, rid) == ("- a.py defines alpha().", "summary")
    twice = [h for h in set(server.received) if server.received.count(h) > 1]
    assert len(twice) == (1 if where == "server" else 0), server.received
    code, out = clearance(env, "verify", rid)
    assert code == 0, out


CHILD = """\
name: durable
agents:
  - {name: lead, instructions: "You lead.", can_spawn: [scribe], tools: [append],
     limits: {max_children: 1}}
  - {name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}
tools:
  append: {function: "replay_tools_mod:append", idempotent: %s}
tasks:
  - {id: lines, title: Lines, description: "Have the lines 0 to 3 appended.", assignee: lead,
     fan_out: {agent: scribe, goals: ["Append the lines 0 to 3."]}}
"""


@pytest.mark.parametrize("kill", ["server:3", "after:2"])
def test_a_spawned_child_killed_mid_loop_resumes_with_each_side_effect_once(env, kill: str) -> None:
    server: Server = env["server"]
    where, _, k = kill.partition(":")
    server.kill_on = int(k) if where == "server" else None
    code, out = start(env, kill_at="" if where == "server" else kill, text=CHILD)
    assert code == -signal.SIGKILL, out
    server.kill_on = None
    rid = run_id(env)
    code, out = clearance(env, "resume", rid)
    assert code == 0, out
    assert outcome(env, rid) == ("wrote lines 0 to 3", "summary")
    assert lines(env["tmp"] / "calls.log") == ["0", "1", "2", "3"]  # no tool ran twice
    twice = [h for h in set(server.received) if server.received.count(h) > 1]
    assert len(twice) == (1 if where == "server" else 0), server.received
    code, out = clearance(env, "verify", rid)
    assert code == 0, out


def test_a_tool_that_opts_out_of_replay_runs_again_and_that_is_recorded(env) -> None:
    team = env["tmp"] / "team.yaml"
    team.write_text(TEAM.replace("idempotent: %s", "replay: false"))
    code, out = clearance(env, "run", str(team), "--model", "openai:m", kill_at="after:2")
    assert code == -signal.SIGKILL, out
    rid = run_id(env)
    code, out = clearance(env, "resume", rid)
    assert code == 0, out
    # Step 1 is replayed; its tool gives a live value again, so the loop goes on live.
    assert lines(env["tmp"] / "calls.log") == ["0", "1", "0", "1", "2", "3"]
    assert "replayed 1 model calls and 0 tool calls, sent 5" in out
    with RunLedger(env["db"]) as ledger:
        (declined,) = ledger.events(rid, "replay_declined")
        first, *rest = ledger.tool_calls(rid)
    again = next(row for row in rest if row.arguments == first.arguments)  # the step-1 call
    assert declined.data == {
        "record": "tool_call",
        "original": first.tool_call_id,
        "why": "replay: false",
        "replacement": again.tool_call_id,
    }
    assert outcome(env, rid) == ("wrote lines 0 to 3", "summary")
    code, out = clearance(env, "verify", rid)
    assert code == 0, out
