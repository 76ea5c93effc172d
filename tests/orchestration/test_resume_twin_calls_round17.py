"""One model answer asking for the same tool call twice, killed between the two, then resumed.

The loop runs a repeated ``delegate`` call on purpose (a second delegation of the same task),
so one answer can hold two identical calls that both run. A resume finds the call the process
stopped in by its place in the answer: a call of the answer that already has a result is
replayed under its own id, never taken for the one that was interrupted. Told apart by name
and arguments alone, both calls got the first one's id, and every later ``resume`` failed on
the ledger's unique tool call id.

Driven through the CLI with the kill harness of `test_kill_resume_round17` (a scripted
OpenAI-compatible server keeping every request, ``clearance run``/``resume`` subprocesses).
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pytest
from test_kill_resume_round17 import Harness, Script, canonical, lines

from clearance import RunLedger
from clearance._agents.replay import ReplaySource
from clearance._context.verify_approvals import arguments_sha256
from clearance._state.ledger import ToolCallRecord
from clearance.models._base import ToolCall

pytestmark = pytest.mark.network

TWINS = """\
name: twin17
agents:
  - {name: scribe, instructions: "You append lines.", tools: [append], limits: {max_steps: 8}}
  - {name: boss, instructions: "You split work.", tools: [append], can_delegate_to: [scribe]}
tools:
  append: {function: "kill17_tools:append", idempotent: false}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: d, title: D, description: "Have the lines a0 to a2 appended, twice.", assignee: boss}
"""

TASK = "APPEND a: append the lines a0 to a2."
DELEGATE = ("delegate", {"agent": "scribe", "task": TASK})
# The boss: 1 request, each delegation: 4 (three appends, then the answer), the boss: 1,
# the synthesis: 1. The second delegation's first request is the 6th; its first append the
# 4th call of the tool.
REQUESTS = 11


class Twins(Script):
    """The kill harness's scripted model, with a boss that delegates one task twice at once."""

    def reply(self, messages: list[dict[str, Any]]) -> Any:
        if messages[0]["content"] != "You split work.":
            return super().reply(messages)
        with self.lock:
            self.received.append(canonical(messages))
        text = "\n".join(m["content"] or "" for m in messages)
        if "wrote lines a" in text:
            return "both done"
        return [DELEGATE, DELEGATE]


@pytest.fixture
def twins(tmp_path: Path, openai_server: Any) -> Harness:
    script = Twins()
    url = openai_server(script.reply)
    return Harness(tmp_path, url, script, f"sqlite:///{tmp_path / 'r.db'}", "none", TWINS)


def _delegations(h: Harness, rid: str) -> list[Any]:
    with RunLedger(h.db) as ledger:
        return [t for t in ledger.tool_calls(rid) if t.name == "delegate"]


def _answered(h: Harness, rid: str) -> Counter[str]:
    """How many recorded calls of each request text have their answer."""
    with RunLedger(h.db) as ledger:
        return Counter(canonical(c.messages) for c in ledger.calls(rid) if c.response is not None)


def _resume_to_the_end(h: Harness, kill: tuple[str, int]) -> str:
    """Run (killed as ``kill`` says), then resume until done, approving what pauses.

    The two delegations send the same request texts, so a request is told "sent again" by
    count: after each command, no text was sent more often than its calls without an
    answer before that command.
    """
    code, _ = h.command("run", str(h.team), "--model", "openai:m", kill=kill)
    assert code == -signal.SIGKILL, h.report()
    rid = h.run_id()
    assert rid is not None, h.report()
    for _ in range(6):
        answered, before = _answered(h, rid), len(h.script.received)
        code, out = h.command("resume", rid, "--team", str(h.team))
        assert code in (0, 3), h.report()
        with RunLedger(h.db) as ledger:
            rows = Counter(canonical(c.messages) for c in ledger.calls(rid))
        sent = Counter(h.script.received[before:])
        again = [t for t, n in sent.items() if n > rows[t] - answered[t]]
        assert not again, ("an answered request was sent again", again[:1], h.report())
        if code == 0:
            return rid
        ids = list(dict.fromkeys(re.findall(r"clearance approve \S+ (apr_[0-9a-z_]+)", out)))
        assert ids, h.report()
        for approval in ids:
            assert h.command("approve", rid, approval)[0] == 0, h.report()
    raise AssertionError("the run did not finish:\n" + h.report())


def test_the_uninterrupted_twins(twins: Harness) -> None:
    code, _ = twins.command("run", str(twins.team), "--model", "openai:m")
    assert code == 0, twins.report()
    rid = twins.run_id()
    assert rid is not None
    assert len(twins.script.received) == REQUESTS, twins.report()
    assert lines(twins.tmp / "calls.log") == ["a0", "a1", "a2"] * 2, twins.report()
    assert len({t.tool_call_id for t in _delegations(twins, rid)}) == 2


@pytest.mark.parametrize(
    ("kill", "resent"),
    [
        (("server", 6), {1}),  # the second delegation's first request, never answered
        (("answered", 7), {0, 1}),  # its second request, answered (recorded or not yet)
        (("tool", 4), {0}),  # inside its first append, after the side effect
    ],
)
def test_killed_in_the_second_of_two_identical_delegations(
    twins: Harness, kill: tuple[str, int], resent: set[int]
) -> None:
    h = twins
    rid = _resume_to_the_end(h, kill)
    with RunLedger(h.db) as ledger:
        run = ledger.get_run(rid)
        results = {t.task_id: t.result for t in ledger.tasks(rid)}
        replayed = [e.data for e in ledger.events(rid, "replayed")]
        started = [e.data["tool_call_id"] for e in ledger.events(rid, "tool_started")]
        calls = ledger.calls(rid)
    assert run.status == "completed", h.report()
    assert results == {"d": "both done"} and run.synthesis == "summary", h.report()
    first, second = _delegations(h, rid)
    assert first.tool_call_id != second.tool_call_id, h.report()
    assert first.result == second.result == "wrote lines a", h.report()
    # The first delegation is replayed from its record, not run again: its result is given
    # to the boss, none of its steps is asked again.
    assert {"record": "tool_call", "original": first.tool_call_id} in [
        {k: d[k] for k in ("record", "original")} for d in replayed
    ], h.report()
    assert started.count(first.tool_call_id) == 1, h.report()
    inner = [c for c in calls if c.subject == f"delegation:{first.tool_call_id}"]
    assert len(inner) == 4, h.report()
    # One record per model call; only the request in flight at the kill was sent again.
    assert len(calls) == REQUESTS, h.report()
    assert len(h.script.received) - REQUESTS in resent, h.report()
    effects = lines(h.tmp / "calls.log")
    assert sorted(set(effects)) == ["a0", "a1", "a2"], h.report()
    reruns = sum(entry.startswith("approve ") for entry in h.log)  # each approved once
    # A call recorded as started "may have run": the kill may land before its body did, so
    # an approved rerun adds at most one run (and each delegation ran its three lines).
    assert 6 <= len(effects) <= 6 + reruns, h.report()
    assert reruns == (kill[0] == "tool") or kill[0] == "answered", h.report()
    code, out = h.command("verify", rid)
    assert code == 0, out + h.report()


class _Events:
    """A recorder keeping only the events a replay records."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, dict[str, Any]]] = []

    def record_event(self, run_id: str, kind: str, subject: str, data: dict[str, Any]) -> None:
        self.events.append((kind, subject, data))


def _twin_source(*, finished: int, started: int) -> tuple[ReplaySource, list[str]]:
    """Two identical ``delegate`` calls at step 1: ``finished`` with a result, ``started``."""
    from datetime import UTC, datetime

    ids = ["tool_first", "tool_second"]
    args = {"agent": "scribe", "task": TASK}
    rows = [
        ToolCallRecord(
            tool_call_id=ids[i],
            run_id="run_x",
            subject="task:d",
            agent="boss",
            step=1,
            name="delegate",
            arguments=args,
            result=f"result {i}",
            is_error=False,
            store_reads=[],
            chain=None,
            created_at=datetime.now(UTC),
        )
        for i in range(finished)
    ]
    begun = {
        ids[i]: {
            "tool_call_id": ids[i],
            "step": 1,
            "name": "delegate",
            "subject": "task:d",
            "arguments_sha256": arguments_sha256(args),
            "idempotent": True,
            "replay": True,
        }
        for i in range(started)
    }
    source = ReplaySource(
        cast(Any, _Events()), "run_x", calls={}, asked={}, tools={("task:d", 1): rows},
        started=begun, owners={i: "task:d" for i in ids[:started]},
    )  # fmt: skip
    return source, ids


@pytest.mark.parametrize(("finished", "started"), [(1, 2), (0, 1), (1, 1)])
def test_identical_calls_are_told_apart_by_their_place(finished: int, started: int) -> None:
    """The finished call keeps its id and result; the one in flight its own id, or a new one."""
    source, ids = _twin_source(finished=finished, started=started)
    call = ToolCall(id="call_0", name="delegate", arguments={"agent": "scribe", "task": TASK})
    got = source.tool_ids("task:d", 1, [call, call])
    assert len(set(got)) == 2
    if finished:
        assert got[0] == ids[0] and source.recorded_output("task:d", ids[0]) == "result 0"
    in_flight = ids[finished] if started > finished else None
    if in_flight is not None:
        assert got[finished] == in_flight
        assert source.recorded_output("task:d", in_flight) is None  # run again, not replayed
    assert got.count(ids[0]) == (started > 0)  # the first call's id: at its own place only
