"""Crash-consistency fuzz: `clearance run` SIGKILLed at random moments, resumed until done.

A team of five tasks (dependencies, two tool loops of a side-effecting user tool, a
delegation, an isolated task with a clarification round, a plain answer) runs on a scripted
OpenAI-compatible server on 127.0.0.1. Each seed SIGKILLs `clearance run`, then `clearance
resume` (one to four kills in all), then resumes until the run ends. A kill lands once the
process committed its k-th ledger record (a hook in the tool's module, which the process
imports), or a random delay after the run started or the process did. The seed also picks
the model's latency, whether the tool is `idempotent`, a keyed ledger, `--max-concurrency 1`
and a tool slow enough to be killed inside. A tool call that may have run pauses its task
for approval: the fuzz approves it, as a person would (the `approve` itself killed at
times). Then:

- every command exits as documented (killed, 0, or 3 awaiting approval; no traceback);
- the run is `completed`, every task's result and the synthesis are the scripted model's;
- each side effect happened once, but a call a person approved to run again, or of an
  idempotent tool after a kill;
- no request reached the server more often than the kills allow (one in flight per kill);
- nothing recorded as finished (a task's result, a model answer, a tool result) is lost or
  changed by a later kill or resume;
- `clearance verify` passes and `clearance inspect` works.

The seeds are fixed, so the kill points are too; where a timed kill lands still depends on
the machine's speed. Two seeds run at a time; the whole fuzz takes about 30 to 60 seconds.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger
from killed_runs import KILL_AFTER_RECORDS_HOOK, scribe_turn

pytestmark = pytest.mark.network

SRC = Path(__file__).resolve().parents[2] / "src"

TOOL_MODULE = (
    '''\
import os
import time
from pathlib import Path

HERE = Path(__file__).parent
_calls = [0]


def append(line: str) -> str:
    """Append a line to effects.log (a line already there is not appended again)."""
    with open(HERE / "calls.log", "a") as calls:
        calls.write(line + "\\n")
    time.sleep(float(os.environ.get("TOOL_SLEEP_S", "0")))  # a kill may land in the tool
    _calls[0] += 1
    if _calls[0] == int(os.environ.get("KILL_IN_TOOL") or 0):  # after its side effect
        os.kill(os.getpid(), 9)
    effects = HERE / "effects.log"
    have = effects.read_text().split() if effects.exists() else []
    if line not in have:
        with open(effects, "a") as out:
            out.write(line + "\\n")
    return f"appended {line}"

'''
    + KILL_AFTER_RECORDS_HOOK
)

TEAM = """\
name: fuzz
input: {default: project, include: ["*.py"]}
agents:
  - {name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}
  - {name: lead, instructions: "You lead.", can_delegate_to: [scribe], tools: [append],
     limits: {max_steps: 4}}
  - {name: writer, instructions: "You write."}
  - {name: reviewer, instructions: "You review."}
tools:
  append: {function: "fuzz_tools:append", idempotent: IDEMPOTENT}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: a, title: A, description: "APPEND a: append the lines a0 to a2.", assignee: scribe}
  - {id: b, title: B, description: "Have the lines b0 to b1 appended.", assignee: lead}
  - {id: c, title: C, description: "Write about the lines.", assignee: writer, depends_on: [a]}
  - {id: d, mode: isolated, title: D, description: "Review a.py.", assignee: reviewer,
     files: [a.py]}
  - {id: e, title: E, description: "APPEND e: append the lines e0 to e1.", assignee: scribe,
     depends_on: [b, c]}
"""

LINES = {"a": 3, "b": 2, "e": 2}
RESULTS = {
    "a": "wrote lines a",
    "b": "lead: b is done",
    "c": "c is written",
    "d": "- a.py defines alpha().",
    "e": "wrote lines e",
}
SYNTHESIS = "summary"
SEEDS = range(12)
KILLS = (1, 4)  # each seed kills its run and resumes this many times, then resumes to the end


class Script:
    """The scripted model: answers from the prompt alone, and counts what it received."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s
        self.received: list[str] = []
        self.lock = threading.Lock()

    def reply(self, messages: list[dict[str, Any]]) -> Any:
        text = "\n".join(m["content"] or "" for m in messages)
        with self.lock:
            self.received.append(hashlib.sha256(text.encode()).hexdigest())
        time.sleep(self.latency_s)
        system, user = messages[0]["content"], messages[-1]["content"] or ""
        if system == "You append lines.":
            prefix, line = scribe_turn(text, LINES)
            if line is not None:
                return [("append", {"line": line})]
            return f"wrote lines {prefix}"
        if system == "You lead.":
            if "wrote lines b" in text:
                return RESULTS["b"]
            return [("delegate", {"agent": "scribe", "task": "APPEND b: append b0 to b1."})]
        if system == "You write.":
            return RESULTS["c"]
        if system == "You review.":
            if "### Clarification 1" not in user:
                return "STATUS: needs_context\nQUESTION: Which Python version is this for?"
            return RESULTS["d"] + "\nSTATUS: done"
        if "## Question from the subagent" in user:
            return "Python 3.11."
        return SYNTHESIS


def environ(url: str, tmp: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": url,
        "OPENAI_API_KEY": "test",
        "PYTHONPATH": f"{SRC}{os.pathsep}{tmp}",
        "COLUMNS": "250",
    }
    env.pop("CLEARANCE_LEDGER_KEY", None)
    return env


def command(
    tmp: Path, env: dict[str, str], *args: str, kill: tuple[str, float] | None = None
) -> Any:
    """Run one `clearance` command, SIGKILLed per ``kill``: ``(where, number)``.

    ``("exec", s)``: ``s`` seconds after the process started (before or while the run is
    first recorded, or later); ``("run", s)``: ``s`` seconds after the progress line saying
    the run started or resumed; ``("records", k)``: once its ``k``-th ledger record is
    committed (by the tool module's hook, in the process); ``("tool", k)``: inside its
    ``k``-th tool call, after the side effect.
    """
    db = f"sqlite:///{tmp / 'r.db'}"
    hooks = {"records": "KILL_AFTER_RECORDS", "tool": "KILL_IN_TOOL"}
    hooked = {v: str(int(kill[1])) if kill and kill[0] == k else "" for k, v in hooks.items()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "clearance", *args, "--db", db], cwd=tmp,
        env={**env, "PYTHONUNBUFFERED": "1", **hooked},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    out: list[str] = []
    started = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if " started (" in line:
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    launched = time.monotonic()
    deadline = launched + 60
    anchor: float | None = None
    while proc.poll() is None and time.monotonic() < deadline:
        if kill is not None and kill[0] in ("exec", "run"):
            if anchor is None and (kill[0] == "exec" or started.is_set()):
                anchor = time.monotonic()
            if anchor is not None and time.monotonic() - anchor >= kill[1]:
                proc.send_signal(signal.SIGKILL)
                break
        time.sleep(0.002)
    if proc.poll() is None and kill is None:
        proc.kill()
    proc.wait(timeout=30)
    reader.join(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()
    return proc.returncode, "".join(out)


def snapshot(db: str) -> dict[str, dict[str, Any]]:
    """What the ledger holds as finished: completed tasks, answered calls, tool results."""
    with RunLedger(db) as ledger:
        runs = ledger.list_runs()
        if not runs:
            return {"tasks": {}, "calls": {}, "tools": {}}
        rid = runs[0].run_id
        return {
            "tasks": {t.task_id: t.result for t in ledger.tasks(rid) if t.status == "completed"},
            "calls": {c.call_id: c.response for c in ledger.calls(rid) if c.response is not None},
            "tools": {t.tool_call_id: t.result for t in ledger.tool_calls(rid)},
        }


def kept(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    """What ``before`` held as finished that ``after`` lost or changed."""
    return [
        f"{kind} {key}: {value!r} -> {after[kind].get(key)!r}"
        for kind, records in before.items()
        for key, value in records.items()
        if after[kind].get(key) != value
    ]


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def approve(tmp: Path, env: dict[str, str], rid: str, call_id: str, rng: random.Random) -> str:
    """`clearance approve`, killed at times: then asked again (refused if it was recorded)."""
    kill = ("exec", rng.uniform(0.1, 0.6)) if rng.random() < 0.3 else None
    code, out = command(tmp, env, "approve", rid, call_id, kill=kill)
    said = f"approve {call_id} (kill {kill}): exit {code}\n{out}"
    if code == -signal.SIGKILL:
        code, out = command(tmp, env, "approve", rid, call_id)
        said += f"\napprove {call_id} again: exit {code}\n{out}"
        assert code == 0 or (code == 2 and "already approved" in out), said
    else:
        assert code == 0, said
    assert "Traceback" not in said, said
    return said


def fuzz(seed: int, tmp: Path, openai_server: Any, rounds: int | None = None) -> dict[str, Any]:
    """Run the team on one seed's kills; check the outcome; return what happened."""
    rng = random.Random(seed)
    latency = rng.choice([0.005, 0.02, 0.05])
    script = Script(latency_s=latency)
    rounds = rng.randint(*KILLS) if rounds is None else rounds
    idempotent = rng.random() < 0.3
    url = openai_server(script.reply)
    (tmp / "fuzz_tools.py").write_text(TOOL_MODULE)
    (tmp / "project").mkdir()
    (tmp / "project" / "a.py").write_text("def alpha():\n    return 1\n")
    team = tmp / "team.yaml"
    team.write_text(TEAM.replace("IDEMPOTENT", str(idempotent).lower()))
    env = {**environ(url, tmp), "TOOL_SLEEP_S": str(rng.choice([0, 0.02]))}
    if rng.random() < 0.3:
        env["CLEARANCE_LEDGER_KEY"] = "k" * 32
    options = ["--max-concurrency", "1"] if rng.random() < 0.25 else []
    db = f"sqlite:///{tmp / 'r.db'}"
    keyed = "CLEARANCE_LEDGER_KEY" in env
    log = [f"seed {seed}: latency {latency}, idempotent {idempotent}, keyed {keyed}, {options}"]
    kills = 0
    approved: Counter[str] = Counter()
    seen: dict[str, dict[str, Any]] = {"tasks": {}, "calls": {}, "tools": {}}
    rid: str | None = None
    for round_ in range(rounds + 4):  # and up to three approvals
        kill: tuple[str, float] | None = None
        if round_ < rounds:  # after a record, or at a moment while tasks run or it starts
            where = rng.choices(["records", "tool", "run", "exec"], [4, 2, 3, 1])[0]
            kill = {
                "records": ("records", rng.randint(1, 90)),
                "tool": ("tool", rng.randint(1, 7)),
                "run": ("run", rng.uniform(0, 0.1 + 12 * latency)),
                "exec": ("exec", rng.uniform(0.05, 1.5)),
            }[where]
        if rid is None:
            args = ["run", str(team), "--model", "openai:m", *options]
        else:
            args = ["resume", rid, "--team", str(team)]
        code, out = command(tmp, env, *args, kill=kill)
        log.append(f"round {round_} ({args[0]}, kill {kill}): exit {code}\n{out}")
        report = "\n".join(log)
        assert "Traceback" not in out, report
        assert code in (0, 3, -signal.SIGKILL), report
        kills += code == -signal.SIGKILL
        if (tmp / "r.db").exists():
            now = snapshot(db)
            assert not kept(seen, now), (kept(seen, now), report)
            seen = now
            with RunLedger(db) as ledger:
                runs = ledger.list_runs()
            assert len(runs) <= 1, report
            if runs:
                rid = runs[0].run_id
                if runs[0].status == "completed":  # done, or killed as it printed
                    break
        if rid is None:
            assert not lines(tmp / "calls.log"), report  # no run recorded, no side effect
        if code == 3:
            ids = list(dict.fromkeys(re.findall(r"clearance approve \S+ (apr_[0-9a-z_]+)", out)))
            assert ids and rid is not None, report
            with RunLedger(db) as ledger:
                asked = {e.data["call_id"]: e.data for e in ledger.events(rid, "awaiting_approval")}
            for call_id in ids:
                assert asked[call_id]["tool"] == "append", (asked, report)
                approved[asked[call_id]["arguments"]["line"]] += 1
                log.append(approve(tmp, env, rid, call_id, rng))
        assert code != 0, report  # exit 0: the run is completed
    else:
        raise AssertionError("the run did not finish:\n" + "\n".join(log))
    assert rid is not None
    report = "\n".join(log)
    with RunLedger(db) as ledger:
        run = ledger.get_run(rid)
        results = {t.task_id: t.result for t in ledger.tasks(rid)}
        statuses = {t.task_id: t.status for t in ledger.tasks(rid)}
    assert run.status == "completed", (run.status, run.error, report)
    assert statuses == dict.fromkeys(RESULTS, "completed"), report
    assert results == RESULTS, report
    assert run.synthesis == SYNTHESIS, report
    expected = [f"{p}{i}" for p, n in LINES.items() for i in range(n)]
    assert sorted(lines(tmp / "effects.log")) == sorted(expected), report
    calls = Counter(lines(tmp / "calls.log"))
    assert set(calls) == set(expected), (calls, report)
    for line, count in calls.items():  # once, but when a person approved, or it is idempotent
        allowed = 1 + approved[line] + (kills if idempotent else 0)
        assert count <= allowed, (line, count, approved, report)
    if not idempotent:
        assert not approved or kills, report
    twice = {h: n for h, n in Counter(script.received).items() if n > 1}
    assert all(n - 1 <= kills for n in twice.values()), (twice, kills, report)
    assert sum(n - 1 for n in twice.values()) <= 3 * kills, (twice, kills, report)
    code, out = command(tmp, env, "verify", rid)
    assert code == 0, out + report
    code, out = command(tmp, env, "inspect", rid, "--no-prompt")
    assert code == 0 and "Traceback" not in out, out + report
    code, out = command(tmp, env, "resume", rid)  # a completed run is not run again
    assert code == 2 and "already completed" in out, out + report
    return {"seed": seed, "kills": kills, "approved": sum(approved.values()), "log": log}


def test_the_uninterrupted_run(tmp_path: Path, openai_server: Any) -> None:
    outcome = fuzz(0, tmp_path, openai_server, rounds=0)
    assert outcome["kills"] == 0


def test_random_kills_then_resume_lose_nothing_and_repeat_no_side_effect(
    tmp_path: Path, openai_server: Any
) -> None:
    started = time.monotonic()
    for seed in SEEDS:
        (tmp_path / f"seed{seed}").mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(fuzz, seed, tmp_path / f"seed{seed}", openai_server) for seed in SEEDS
        ]
        outcomes = [f.result() for f in futures]
    assert sum(o["kills"] for o in outcomes) >= len(SEEDS), outcomes  # most kills land
    assert time.monotonic() - started < 120, outcomes
