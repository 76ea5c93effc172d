"""Kill fuzz over the product path: `clearance run` and `resume` SIGKILLed, resumed to the end.

A team file runs as ``python -m clearance run`` on a real SQLite ledger against a scripted
OpenAI-compatible server on 127.0.0.1. Its tasks: a tool loop whose turns each ask for two
calls, ``append`` (a side effect, replayed on resume) and ``stamp`` (a side effect declared
``replay: false``: run again on resume); a task whose agent spawns a child (``can_spawn``)
that runs the same loop; a task that delegates it; a task with a review loop (the first
round is sent back); and the coordinator's synthesis. Both tools append a line to a file
outside the run.

Each seed SIGKILLs `clearance run`, and at times `clearance resume` as well, at an instant
spread over the run (once the process committed its k-th ledger record, inside the k-th
tool call after its side effect, as the server receives its n-th request, or a seeded delay
after the process started), then resumes until the run completes, approving each rerun a
resume asks about. After every command:

- nothing recorded as finished (a task's result, a model answer, a tool result) changed;
- the run's hash chain entries and its event, call, tool call and message rows recorded so
  far are a prefix of what is recorded later (nothing lost, reordered or rewritten);

and at the end:

- every task's result and the synthesis equal the uninterrupted run's, byte for byte;
- each tool's side effect happened once per recorded call of it, plus at most one per
  rerun a person approved;
- `clearance verify` passes and `clearance inspect` renders.
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
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger
from killed_runs import KILL_AFTER_RECORDS_HOOK, CommandLog, scribe_turn

pytestmark = pytest.mark.network

SRC = Path(__file__).resolve().parents[2] / "src"

TOOL_MODULE = (
    '''\
import os
from pathlib import Path

HERE = Path(__file__).parent
_calls = [0]


def _effect(tool: str, line: str) -> None:
    with open(HERE / "effects.log", "a") as out:
        out.write(f"{tool}:{line}\\n")
    _calls[0] += 1
    if _calls[0] == int(os.environ.get("KILL_IN_TOOL") or 0):  # after the side effect
        os.kill(os.getpid(), 9)


def append(line: str) -> str:
    """Append a line to the log outside the run."""
    _effect("append", line)
    return f"appended {line}"


def stamp(label: str) -> str:
    """Stamp a label in the log outside the run (a live value: never replayed)."""
    _effect("stamp", label)
    return f"stamped {label}"

'''
    + KILL_AFTER_RECORDS_HOOK
)

TEAM = """\
name: fuzz19
agents:
  - {name: scribe, instructions: "You append lines.", tools: [append, stamp],
     limits: {max_steps: 8}}
  - {name: lead, instructions: "You lead.", can_spawn: [scribe], tools: [append, stamp],
     limits: {max_children: 2, max_steps: 4}}
  - {name: boss, instructions: "You split work.", can_delegate_to: [scribe],
     tools: [append, stamp], limits: {max_steps: 4}}
  - {name: writer, instructions: "You write."}
  - {name: critic, instructions: "You review."}
tools:
  append: {function: "fuzz19_tools:append", idempotent: false}
  stamp: {function: "fuzz19_tools:stamp", replay: false}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: a, title: A, description: "APPEND a: append and stamp a0 to a1.", assignee: scribe}
  - {id: b, title: B, description: "Have b0 to b1 appended by a child.", assignee: lead}
  - {id: d, title: D, description: "Have d0 to d1 appended by a delegate.", assignee: boss}
  - {id: w, title: W, description: "Write about the lines of A.", assignee: writer,
     depends_on: [a], review: {by: [critic], rounds: 3}}
"""

LINES = {"a": 2, "b": 2, "d": 2}
# Requests of an uninterrupted run: a: 3; b: 2 + the child's 3; d: 2 + the delegate's 3;
# w: 2 rounds of the writer and the critic; the synthesis: 1.
REQUESTS = 18


def digest(text: str) -> str:
    """A short digest of a prompt's text, its record ids (new in every run) left out."""
    text = re.sub(r"\b[a-z]+_[0-9a-f]{12}_[0-9a-f]{8}\b", "<id>", text)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class Script:
    """The scripted model: answers from the request alone; keeps every request's digest.

    An answer that ends a task names the digest of what its agent was shown last, so a
    resumed task that saw anything else than the uninterrupted run's task ends otherwise.
    """

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.received: list[str] = []
        self.lock = threading.Lock()
        self.on_request: Any = None  # called with the request's number, before answering

    def reply(self, messages: list[dict[str, Any]]) -> Any:
        text = "\n".join(m.get("content") or "" for m in messages)
        with self.lock:
            self.received.append(digest(text))
            number = len(self.received)
            hook = self.on_request
        if hook is not None:
            hook(number)
        time.sleep(self.latency_s)
        system, user = messages[0]["content"], messages[1]["content"] or ""
        if system == "You append lines.":
            prefix, line = scribe_turn(text, LINES)
            if line is not None:
                return [("append", {"line": line}), ("stamp", {"label": line})]
            return f"wrote lines {prefix} ({digest(text)})"
        if system == "You lead.":
            if "wrote lines b" in text:
                return f"lead: b is done ({digest(text)})"
            return [("spawn", {"agent": "scribe", "goal": "APPEND b: append b0 to b1."})]
        if system == "You split work.":
            if "wrote lines d" in text:
                return f"boss: d is done ({digest(text)})"
            return [("delegate", {"agent": "scribe", "task": "APPEND d: append d0 to d1."})]
        if system == "You write.":
            if "Review findings" in user:
                return f"draft 2 ({digest(user)})"
            return "draft 1"
        if system == "You review.":
            if "draft 1" in user:
                return '{"verdict": "revise", "findings": "Say more."}'
            return '{"verdict": "accept", "findings": ""}'
        return f"summary ({digest(user)})"


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


class Harness(CommandLog):
    """One scenario: its folder, server script, ledger and what each command did."""

    def __init__(self, tmp: Path, openai_server: Any, latency_s: float = 0.0) -> None:
        super().__init__(f"sqlite:///{tmp / 'r.db'}")
        self.tmp = tmp
        self.script = Script(latency_s)
        self.url = openai_server(self.script.reply)
        (tmp / "fuzz19_tools.py").write_text(TOOL_MODULE)
        self.team = tmp / "team.yaml"
        self.team.write_text(TEAM)
        self.approved: Counter[str] = Counter()  # "tool:line" of each approved rerun

    def command(self, *args: str, kill: tuple[str, float] | None = None) -> tuple[int, str]:
        """Run one `clearance` command, SIGKILLed as ``kill`` says; its exit code and output.

        ``("records", k)``: once its k-th ledger record is committed; ``("tool", k)``: in its
        k-th tool call, after the side effect; ``("server", n)``: as the server receives its
        n-th request of this command (not answered); ``("delay", s)``: ``s`` seconds after
        the process started.
        """
        env = {
            **os.environ,
            "OPENAI_BASE_URL": self.url,
            "OPENAI_API_KEY": "test",
            "PYTHONPATH": f"{SRC}{os.pathsep}{self.tmp}",
            "COLUMNS": "250",
            "KILL_AFTER_RECORDS": str(int(kill[1])) if kill and kill[0] == "records" else "",
            "KILL_IN_TOOL": str(int(kill[1])) if kill and kill[0] == "tool" else "",
        }
        env.pop("CLEARANCE_LEDGER_KEY", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "clearance", *args, "--db", self.db], cwd=self.tmp, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        killed = threading.Event()

        def die() -> None:
            if not killed.is_set():
                killed.set()
                proc.send_signal(signal.SIGKILL)

        if kill is not None and kill[0] == "server":
            first = len(self.script.received)

            def hook(number: int) -> None:
                if number - first == int(kill[1]):
                    die()

            self.script.on_request = hook
        timer = threading.Timer(kill[1], die) if kill and kill[0] == "delay" else None
        if timer is not None:
            timer.start()
        try:
            out, _ = proc.communicate(timeout=60)
        finally:
            self.script.on_request = None
            if timer is not None:
                timer.cancel()
        return self.ended(args, kill, proc.returncode, out)


def state(h: Harness, rid: str) -> dict[str, Any]:
    """What the ledger holds of a run: finished records and the order of every record."""
    with RunLedger(h.db) as ledger:
        tasks, calls, tools = ledger.tasks(rid), ledger.calls(rid), ledger.tool_calls(rid)
        rows = ledger.record_rows(rid)
        entries = ledger.chain_entries(rid)
    return {
        "finished": {
            "tasks": {t.task_id: t.result for t in tasks if t.status == "completed"},
            "calls": {c.call_id: c.response for c in calls if c.response is not None},
            "tools": {t.tool_call_id: t.result for t in tools},
        },
        "order": {
            "chain": [(e.seq, e.chain_sha256) for e in entries],
            "events": [(r["event_id"], r["kind"], r["data"]) for r in rows["event"]],
            "tool_calls": [(r["tool_call_id"], r["result"]) for r in rows["tool_call"]],
            "calls": [r["call_id"] for r in rows["call"]],
            "messages": [r["message_id"] for r in rows["message"]],
        },
    }


def lost(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What ``before`` recorded that ``after`` lost, changed or reordered."""
    found = [
        f"{kind} {key}: {value!r} -> {after['finished'][kind].get(key)!r}"
        for kind, records in before["finished"].items()
        for key, value in records.items()
        if after["finished"][kind].get(key) != value
    ]
    for kind, rows in before["order"].items():
        if after["order"][kind][: len(rows)] != rows:
            found.append(f"the {kind} recorded before are no prefix of those after")
    return found


def drive(h: Harness, kills: list[tuple[str, float]]) -> str:
    """Run, then resume until the run completes (killed as ``kills`` say, in turn)."""
    rid: str | None = None
    seen: dict[str, Any] | None = None
    for round_ in range(len(kills) + 8):
        kill = kills[round_] if round_ < len(kills) else None
        if rid is None:
            code, out = h.command("run", str(h.team), "--model", "openai:m", kill=kill)
        else:
            code, out = h.command("resume", rid, "--team", str(h.team), kill=kill)
        assert code in (0, 3, -signal.SIGKILL), h.report()
        rid = rid or h.run_id()
        if rid is None:  # killed before the run was first recorded
            assert not h.script.received and not lines(h.tmp / "effects.log"), h.report()
            continue
        now = state(h, rid)
        if seen is not None:
            assert not lost(seen, now), (lost(seen, now), h.report())
        seen = now
        with RunLedger(h.db) as ledger:
            status = ledger.get_run(rid).status
        if status == "completed":
            assert code in (0, -signal.SIGKILL), h.report()
            return rid
        assert code != 0, h.report()
        if code == 3:
            approve(h, rid, out)
    raise AssertionError("the run did not finish:\n" + h.report())


def approve(h: Harness, rid: str, out: str) -> None:
    """Approve every rerun the resume asked about, as a person would."""
    ids = list(dict.fromkeys(re.findall(r"clearance approve \S+ (apr_[0-9a-z_]+)", out)))
    assert ids, h.report()
    with RunLedger(h.db) as ledger:
        asked = {e.data["call_id"]: e.data for e in ledger.events(rid, "awaiting_approval")}
    for call_id in ids:
        data = asked[call_id]
        arguments = data["arguments"]
        h.approved[f"{data['tool']}:{arguments.get('line') or arguments.get('label')}"] += 1
        code, _ = h.command("approve", rid, call_id)
        assert code == 0, h.report()


def outcome(h: Harness, rid: str) -> dict[str, Any]:
    with RunLedger(h.db) as ledger:
        run = ledger.get_run(rid)
        tasks = ledger.tasks(rid)
    return {
        "status": run.status,
        "results": {t.task_id: (t.status, t.result) for t in tasks},
        "synthesis": run.synthesis,
    }


def check_end(h: Harness, rid: str, expected: dict[str, Any]) -> None:
    got = outcome(h, rid)
    assert got == expected, (got, expected, h.report())
    effects = Counter(lines(h.tmp / "effects.log"))
    with RunLedger(h.db) as ledger:
        rows = [t for t in ledger.tool_calls(rid) if t.name in ("append", "stamp")]
    recorded = Counter(
        f"{t.name}:{t.arguments.get('line') or t.arguments.get('label')}" for t in rows
    )
    every = [f"{tool}:{p}{i}" for tool in ("append", "stamp") for p, n in LINES.items()
             for i in range(n)]  # fmt: skip
    assert set(effects) == set(every) == set(recorded), (effects, recorded, h.report())
    for key in every:  # once per recorded call, and at most once more per approved rerun
        assert recorded[key] <= effects[key] <= recorded[key] + h.approved[key], (
            key, effects, recorded, h.approved, h.report(),
        )  # fmt: skip
    code, out = h.command("verify", rid)
    assert code == 0, out + h.report()
    code, out = h.command("inspect", rid)
    assert code == 0 and "synthesis" in out.lower(), out + h.report()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, openai_server_module: Any) -> Any:
    """The outcome of the run never interrupted (with its harness)."""
    h = Harness(tmp_path_factory.mktemp("whole"), openai_server_module)
    started = time.monotonic()
    rid = drive(h, [])
    return h, rid, outcome(h, rid), time.monotonic() - started


def test_the_uninterrupted_run(uninterrupted: Any) -> None:
    h, rid, got, _ = uninterrupted
    assert got["status"] == "completed", h.report()
    assert {k: v[0] for k, v in got["results"].items()} == dict.fromkeys("abdw", "completed")
    assert len(h.script.received) == REQUESTS, h.report()
    check_end(h, rid, got)
    assert not h.approved and not h.kills


def plan(seed: int) -> tuple[float, list[tuple[str, float]]]:
    """A seed's model latency and kills: one of `run`, then none to two of a `resume`."""
    rng = random.Random(seed)
    latency = rng.choice([0.0, 0.01, 0.03])
    kills: list[tuple[str, float]] = []
    for number in range(1 + rng.choice([0, 1, 1, 2])):
        left = 1.0 if number == 0 else 0.5  # a resume has less left to do
        where = rng.choices(["records", "tool", "server", "delay"], [3, 2, 2, 2])[0]
        kills.append({
            "records": ("records", rng.randint(1, int(80 * left))),
            "tool": ("tool", rng.randint(1, int(12 * left))),
            "server": ("server", rng.randint(1, int(REQUESTS * left))),
            "delay": ("delay", rng.uniform(0.3, 0.5 + (0.3 + 25 * latency) * left)),
        }[where])  # fmt: skip
    return latency, kills


SEEDS = range(7)  # about 6 s each on an idle machine


def scenario(seed: int, tmp: Path, openai_server: Any, expected: dict[str, Any]) -> Harness:
    latency, kills = plan(seed)
    h = Harness(tmp, openai_server, latency)
    h.log.append(f"seed {seed}: latency {latency}, kills {kills}")
    rid = drive(h, kills)
    check_end(h, rid, expected)
    return h


@pytest.mark.parametrize("seed", SEEDS)
def test_killed_anywhere_then_resumed_ends_as_the_uninterrupted_run(
    seed: int, tmp_path: Path, openai_server: Any, uninterrupted: Any
) -> None:
    h = scenario(seed, tmp_path, openai_server, uninterrupted[2])
    assert h.kills >= 1, h.report()


# -- found by the fuzz: a live turn ran a call that may have run, without asking ------------
ONE_TASK = (
    TEAM.split("  - {name: lead,")[0]
    + """\
tools:
  append: {function: "fuzz19_tools:append", idempotent: false}
  stamp: {function: "fuzz19_tools:stamp", replay: false}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: a, title: A, description: "APPEND a: append and stamp a0 to a1.", assignee: scribe}
"""
)


def test_a_call_that_may_have_run_is_asked_about_when_its_turn_is_asked_again(
    tmp_path: Path, openai_server: Any
) -> None:
    """Killed inside ``append a1`` (after its side effect), the run is resumed.

    The resume runs the first turn's ``stamp a0`` again (``replay: false``) under a new id,
    so the next prompt is not the recorded one and the model is asked again: it asks for
    ``append a1`` again. That call was recorded as started without a result, so it may have
    run: it must pause for a person, as it would in a replayed turn. It ran again unasked
    (a second side effect, no approval).
    """
    h = Harness(tmp_path, openai_server)
    h.team.write_text(ONE_TASK)
    rid = drive(h, [("tool", 3)])  # append a0, stamp a0, append a1 (killed after it)
    assert h.approved == Counter({"append:a1": 1}), h.report()
    assert Counter(lines(tmp_path / "effects.log"))["append:a1"] == 2, h.report()
    with RunLedger(h.db) as ledger:
        started = [
            e.data["tool_call_id"]
            for e in ledger.events(rid, "tool_started")
            if e.data["name"] == "append" and e.data["step"] == 2
        ]
        rows = [t for t in ledger.tool_calls(rid) if t.arguments == {"line": "a1"}]
    assert len(set(started)) == 1 and [t.tool_call_id for t in rows] == started[:1], h.report()
    assert h.command("verify", rid)[0] == 0, h.report()


def test_a_live_turn_reruns_a_started_call_under_its_id_only_once_confirmed() -> None:
    """`ReplaySource.tool_ids` on a live subject: the started call keeps its id, is a rerun."""
    from datetime import UTC, datetime

    from clearance._agents.replay import ReplaySource
    from clearance._context.verify_approvals import arguments_sha256
    from clearance._state.ledger import ToolCallRecord
    from clearance.models._base import ToolCall

    events: list[Any] = []

    class Events:
        def record_event(self, run_id: str, kind: str, subject: str, data: Any) -> None:
            events.append((kind, subject, data))

    append = ToolCall(id="c0", name="append", arguments={"line": "a1"})
    stamp = ToolCall(id="c1", name="stamp", arguments={"label": "a1"})
    started = {
        "tool_a1": {"tool_call_id": "tool_a1", "step": 2, "name": "append", "subject": "task:a",
                    "arguments_sha256": arguments_sha256(append.arguments),
                    "idempotent": False, "replay": True},
    }  # fmt: skip
    done = ToolCallRecord(
        tool_call_id="tool_a0", run_id="run_x", subject="task:a", agent="scribe", step=1,
        name="append", arguments={"line": "a0"}, result="appended a0", is_error=False,
        store_reads=[], chain=None, created_at=datetime.now(UTC),
    )  # fmt: skip
    source = ReplaySource(
        Events(), "run_x", calls={}, asked={}, tools={("task:a", 1): [done]},  # type: ignore[arg-type]
        started=started, owners={"tool_a1": "task:a"},
        last_starts={("task:a", 2, "append", started["tool_a1"]["arguments_sha256"]): "evt_1"},
    )  # fmt: skip
    source._live.add("task:a")  # its prompt differed from the recorded one
    asked: list[Any] = []

    async def confirm(*args: Any) -> str | None:
        asked.append(args)
        return "denied"

    source.confirm = confirm
    ids = source.tool_ids("task:a", 2, [append, stamp])
    assert ids[0] == "tool_a1" and ids[1] not in ("tool_a1", "tool_a0")
    import asyncio

    assert asyncio.run(source.may_rerun(ids[0], "scribe", "append", append.arguments)) == "denied"
    assert asked == [("a", "scribe", "append", {"line": "a1"}, "evt_1")]
    assert asyncio.run(source.may_rerun(ids[1], "scribe", "stamp", stamp.arguments)) is None
    # A live turn's call identical to a finished one is a new call (the model asked anew).
    assert (
        source.tool_ids("task:a", 1, [ToolCall(id="c2", name="append", arguments={"line": "a0"})])[
            0
        ]
        != "tool_a0"
    )
    assert not events


def test_a_declined_call_rerun_that_may_have_run_is_asked_about(
    tmp_path: Path, openai_server: Any
) -> None:
    """A resume killed inside its rerun of ``stamp a0`` (``replay: false``), resumed again.

    That rerun was started and never finished: it may have run. The next resume declined
    the replay of ``stamp a0`` once more and ran it a third time, unasked, so the log held
    three stamps for two recorded calls and no approval.
    """
    h = Harness(tmp_path, openai_server)
    h.team.write_text(ONE_TASK)
    # The run stops as its second request arrives (the first turn's calls recorded); the
    # first resume replays ``append a0`` and is killed inside its rerun of ``stamp a0``.
    rid = drive(h, [("server", 2), ("tool", 1)])
    assert h.approved == Counter({"stamp:a0": 1}), h.report()
    with RunLedger(h.db) as ledger:
        rows = [t for t in ledger.tool_calls(rid) if t.arguments == {"label": "a0"}]
    assert Counter(lines(tmp_path / "effects.log"))["stamp:a0"] == 3 == len(rows) + 1, h.report()
    assert h.command("verify", rid)[0] == 0, h.report()
