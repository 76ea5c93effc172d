"""Children and delegates replayed across three sessions: `clearance run`, then two resumes.

A scripted OpenAI-compatible server on 127.0.0.1 keeps every request body it received; each
command runs as ``python -m clearance`` in a subprocess and is killed (SIGKILL, the request
recorded and never answered) when a chosen request arrives. The scripted model can make a
child fail (an empty answer) in one session and finish in the next.

After the last session: no request whose answer was recorded by an attempt that did not fail
is sent again, no recorded side effect is repeated (``calls.log`` counts each run of the
side-effecting tool), every request received is recorded, and ``clearance verify`` passes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger

pytestmark = pytest.mark.network

SRC = Path(__file__).resolve().parents[2] / "src"

TOOLS = '''\
from pathlib import Path

HERE = Path(__file__).parent


def append(line: str) -> str:
    """Append a line (every run of this tool is logged in calls.log)."""
    with open(HERE / "calls.log", "a") as calls:
        calls.write(line + "\\n")
    return f"appended {line}"
'''

SCRIBE = (
    '{name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}'
)
HEAD = f"""\
name: replay17
agents:
  - {SCRIBE}
  - {{name: lead, instructions: "You lead.", tools: [append], can_spawn: [scribe],
     can_delegate_to: [deputy],
     limits: {{max_children: 4}}}}
  - {{name: deputy, instructions: "You stand in.", tools: [append], can_spawn: [scribe],
     limits: {{max_children: 4}}}}
tools:
  append: {{function: "replay17_tools:append", idempotent: false}}
coordinator: {{name: editor, instructions: "You are the editor."}}
tasks:
"""

Rule = Callable[[str, str], bool]
"""``(system message, whole request text)`` to whether it applies."""


def canonical(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


class Script:
    """The scripted model of one test; its rules change between sessions.

    Scribes append the lines their goal names (``APPEND x: ... x0 to xN``), one per step,
    then answer ``wrote lines x``. ``fail`` makes a scribe answer empty (its child fails)
    after ``fail[prefix]`` lines; ``kill`` SIGKILLs the command on a matching request.
    ``lead`` answers the lead's requests (text, or tool calls).
    """

    def __init__(self, lead: Callable[[str], Any]) -> None:
        self.received: list[str] = []
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.fail: dict[str, int] = {}
        self.kill: Rule | None = None
        self.lead = lead

    def reply(self, messages: list[dict[str, Any]]) -> Any:
        system = messages[0]["content"]
        text = "\n".join(m.get("content") or "" for m in messages)
        text += "\n".join(json.dumps(m.get("tool_calls") or "") for m in messages)
        with self.lock:
            self.received.append(canonical(messages))
            kill = self.kill
        if kill is not None and self.pid is not None and kill(system, text):
            os.kill(self.pid, signal.SIGKILL)  # never answered: the request was recorded
            self.kill = None
            return "killed"
        if system == "You append lines.":
            marker = re.search(r"APPEND (\w+): append the lines \w+0 to \w+?(\d)", text)
            assert marker is not None, text
            prefix, last = marker.group(1), int(marker.group(2))
            done = len(set(re.findall(rf"appended ({prefix}\d)", text)))
            if self.fail.get(prefix) == done:
                return ""  # an empty completion: the child fails
            if done <= last:
                return [("append", {"line": f"{prefix}{done}"})]
            return f"wrote lines {prefix}"
        if system == "You lead.":
            return self.lead(text)
        if system == "You stand in.":
            return deputy(text)
        return "summary"


def deputy(text: str) -> Any:
    """The deputy spawns a scribe for its line d0 once, then answers."""
    if "ended:" not in text:
        return [("spawn", {"agent": "scribe", "goal": "APPEND d: append the lines d0 to d0."})]
    return "deputy done"


class Harness:
    """``clearance run``/``resume`` in a subprocess against the script's server, logged."""

    tools_module, tools = "replay17_tools", TOOLS  # the team file's tool module, written

    def __init__(self, tmp: Path, url: str, script: Script, team: str) -> None:
        self.tmp, self.url, self.script = tmp, url, script
        (tmp / f"{self.tools_module}.py").write_text(self.tools)
        self.team = tmp / "team.yaml"
        self.team.write_text(team)
        self.db = f"sqlite:///{tmp / 'r.db'}"
        self.log: list[str] = []

    def command(self, *args: str) -> tuple[int, str]:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": self.url,
            "OPENAI_API_KEY": "test",
            "PYTHONPATH": f"{SRC}{os.pathsep}{self.tmp}",
            "COLUMNS": "250",
        }
        env.pop("CLEARANCE_LEDGER_KEY", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "clearance", *args, "--db", self.db], cwd=self.tmp, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.script.pid = proc.pid
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            self.script.pid = None
        self.log.append(f"{' '.join(args[:2])}: exit {proc.returncode}\n{out}")
        assert "Traceback" not in out, self.report()
        return proc.returncode, out

    def report(self) -> str:
        return "\n".join(self.log)

    def run_id(self) -> str:
        with RunLedger(self.db) as ledger:
            (run,) = ledger.list_runs()
        return run.run_id

    def answered(self, rid: str) -> set[str]:
        """The requests recorded with their answer (canonical messages)."""
        with RunLedger(self.db) as ledger:
            return {canonical(c.messages) for c in ledger.calls(rid) if c.response is not None}

    def session(
        self,
        kill: Rule | None,
        fail: dict[str, int] | None = None,
        failed: str | None = None,
        code: int | None = None,
    ) -> list[str]:
        """Run (first) or resume the run; the requests this session sent.

        Checks that every request received is recorded and that, from the second session
        on, no request answered before the session is sent again, but those of the attempts
        that failed (``failed``: text in each of their requests), which are asked again.
        """
        self.script.kill, self.script.fail = kill, dict(fail or {})
        first = not self.log
        before = len(self.script.received)
        answered = set() if first else self.answered(self.run_id())
        if first:
            got, _ = self.command("run", str(self.team), "--model", "openai:m")
        else:
            got, _ = self.command("resume", self.run_id(), "--team", str(self.team))
        expected = code if code is not None else -signal.SIGKILL if kill else 0
        assert got == expected, self.report()
        sent = self.script.received[before:]
        with RunLedger(self.db) as ledger:
            recorded = {canonical(c.messages) for c in ledger.calls(self.run_id())}
        assert not [r for r in sent if r not in recorded], ("received, not recorded", self.report())
        again = [r for r in sent if r in answered and not (failed and failed in r)]
        assert not again, ("an answered request was sent again", again[:1], self.report())
        return sent

    def calls_log(self) -> list[str]:
        path = self.tmp / "calls.log"
        return path.read_text().split() if path.exists() else []

    def child_outcomes(self) -> list[tuple[str, str]]:
        with RunLedger(self.db) as ledger:
            events = ledger.events(self.run_id(), "child")
        return [(e.data["child_id"], e.data["status"]) for e in events]

    def verify(self) -> None:
        code, out = self.command("verify", self.run_id())
        assert code == 0, out + self.report()


@pytest.fixture
def harness(tmp_path: Path, openai_server: Any) -> Callable[[str, Callable[[str], Any]], Harness]:
    def make(tasks: str, lead: Callable[[str], Any]) -> Harness:
        script = Script(lead)
        return Harness(tmp_path, openai_server(script.reply), script, HEAD + tasks)

    return make


def lead_text(text: str) -> str:
    return "lead done"


def at_lead(system: str, text: str) -> bool:
    return system == "You lead."


def at_synthesis(system: str, text: str) -> bool:
    return system == "You are the editor."


FAN_OUT_B = """\
  - {id: b, title: B, description: "Have the lines appended.", assignee: lead,
     fan_out: {agent: scribe, goals: ["APPEND b: append the lines b0 to b1."]}}
"""


def test_a_child_failed_then_finished_is_replayed_in_the_third_session(harness: Any) -> None:
    """Session 1: the child fails after b0; session 2: it runs again and finishes; both are
    killed at the lead's answer. Session 3 replays session 2's steps of the child.

    `ReplaySource.load` left out every record of a child with any failed outcome, so session
    3 sent session 2's answered requests again and appended b0 and b1 a third time.
    """
    h = harness(FAN_OUT_B, lead_text)
    h.session(at_lead, fail={"b": 1})
    assert h.calls_log() == ["b0"]
    h.session(at_lead, failed="APPEND b")  # the failed attempt runs again, from its start
    assert h.calls_log() == ["b0", "b0", "b1"]
    sent = h.session(None)
    assert h.calls_log() == ["b0", "b0", "b1"], h.report()  # nothing run again
    assert not [r for r in sent if "You append lines." in r], h.report()
    assert h.child_outcomes() == [("b.1", "failed"), ("b.1", "ok"), ("b.1", "ok")]
    h.verify()


FAN_OUT_BC = """\
  - {id: b, title: B, description: "Have the lines appended.", assignee: lead,
     fan_out: {agent: scribe, goals: ["APPEND b: append the lines b0 to b1.",
                                      "APPEND c: append the lines c0 to c1."]}}
"""


def test_a_fan_out_of_a_finished_and_a_failed_child_replays_both_later(harness: Any) -> None:
    """b.1 finishes and b.2 fails in session 1; b.2 runs again in session 2 (b.1 replayed);
    session 3 replays both, each from the attempt that did not fail."""
    h = harness(FAN_OUT_BC, lead_text)
    h.session(at_lead, fail={"c": 1})
    assert sorted(h.calls_log()) == ["b0", "b1", "c0"]
    sent = h.session(at_lead, failed="APPEND c")
    # b.1 replayed: no scribe's request for it is sent again (its lead's prompt names its goal
    # in b.1's result's label).
    assert not [r for r in sent if "You append lines." in r and "APPEND b" in r], h.report()
    assert sorted(h.calls_log()) == ["b0", "b1", "c0", "c0", "c1"]
    sent = h.session(None)
    assert not [r for r in sent if "You append lines." in r], h.report()
    assert sorted(h.calls_log()) == ["b0", "b1", "c0", "c0", "c1"], h.report()
    outcomes = h.child_outcomes()
    assert sorted(outcomes[:2]) == [("b.1", "ok"), ("b.2", "failed")]
    assert sorted(outcomes[2:]) == [("b.1", "ok")] * 2 + [("b.2", "ok")] * 2
    h.verify()


def lead_delegates(text: str) -> Any:
    if "deputy done" not in text:
        return [("delegate", {"agent": "deputy", "task": "Have d0 appended."})]
    return "lead done"


DELEGATED = """\
  - {id: b, title: B, description: "Have the line d0 appended.", assignee: lead}
"""


def at_deputy_after(status: str) -> Rule:
    return lambda system, text: system == "You stand in." and f"ended: {status}" in text


def test_a_child_under_a_delegate_failed_then_finished_is_replayed(harness: Any) -> None:
    """The deputy's child fails in session 1, finishes in session 2; each session is killed
    inside the delegation (the deputy's next request), so session 3 runs the delegation
    again and replays its child's session-2 steps."""
    h = harness(DELEGATED, lead_delegates)
    h.session(at_deputy_after("failed"), fail={"d": 1})
    assert h.calls_log() == ["d0"]
    h.session(at_deputy_after("ok"), failed="APPEND d")
    assert h.calls_log() == ["d0", "d0"]
    sent = h.session(None)
    assert not [r for r in sent if "You append lines." in r], h.report()
    assert h.calls_log() == ["d0", "d0"], h.report()
    assert h.child_outcomes() == [("b.1", "failed"), ("b.1", "ok"), ("b.1", "ok")]
    h.verify()


def lead_appends(script: Script) -> Callable[[str], Any]:
    def lead(text: str) -> Any:
        if "appended L0" not in text:
            return [("append", {"line": "L0"})]
        return "" if script.fail.get("lead") else "lead done"

    return lead


def test_a_task_failed_then_resumed_and_killed_is_replayed_from_its_last_attempt(
    harness: Any,
) -> None:
    """Session 1: the lead appends L0, then answers empty (the task fails). Session 2 runs it
    again and is killed at its second request; session 3 replays session 2's first step.

    The task's records held its failed attempt too, so session 3 replayed session 1's steps
    into the same failure (and a fourth session would send session 2's answered request)."""
    h = harness(DELEGATED, lambda text: "unused")
    h.script.lead = lead_appends(h.script)
    h.session(None, fail={"lead": 1}, code=1)
    assert h.calls_log() == ["L0"]
    h.session(lambda system, text: system == "You lead." and "appended L0" in text,
              failed="You lead.")  # fmt: skip
    assert h.calls_log() == ["L0", "L0"]
    h.session(None)
    assert h.calls_log() == ["L0", "L0"], h.report()
    with RunLedger(h.db) as ledger:
        (task,) = ledger.tasks(h.run_id())
    assert (task.status, task.result) == ("completed", "lead done"), h.report()
    h.verify()
