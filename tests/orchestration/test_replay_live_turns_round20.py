"""A resume whose loop turned live never runs a finished call again unasked.

On ``clearance resume`` a finished call of a tool declared ``replay: false`` runs again
under a new id, so the loop's next prompt is not the recorded one and the model is asked
again (the loop is live). When the model then asks for a later step's call that had
finished before the run stopped (``append``: not idempotent, a side effect outside the run),
that call ran a second time without asking anyone; recorded twice, so ``verify`` and the
"once per recorded call" count accepted it, but the side effect happened twice.

A live turn now handles a finished call as a replayed turn does, found by what it asks
(tool and arguments) instead of its place: its recorded result is given under its recorded
id (a ``replayed`` event that ``verify`` checks); a ``replay: false`` call (a live value)
runs again, as before. The same holds on every path of the tool loop: a task's,
a spawned child's and a delegate's.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_kill_fuzz_round19 import Harness, drive, lines

from clearance import RunLedger

pytestmark = pytest.mark.network

AGENTS = """\
name: live20
agents:
  - {name: scribe, instructions: "You append lines.", tools: [append, stamp],
     limits: {max_steps: 8}}
  - {name: lead, instructions: "You lead.", can_spawn: [scribe], tools: [append, stamp],
     limits: {max_children: 2, max_steps: 4}}
  - {name: boss, instructions: "You split work.", can_delegate_to: [scribe],
     tools: [append, stamp], limits: {max_steps: 4}}
tools:
  append: {function: "fuzz19_tools:append", idempotent: false}
  stamp: {function: "fuzz19_tools:stamp", replay: false}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
"""

# Per path: the task, the subject kind of the loop that appends, and the request the run
# is killed at (received, not answered): the appending loop's third, after both of its
# turns' calls finished.
PATHS = {
    "task": ("  - {id: a, title: A, description: 'APPEND a: append a0 to a1.', assignee: scribe}",
             "a", "task", 3),
    "child": ("  - {id: b, title: B, description: 'Have b0 to b1 appended.', assignee: lead}",
              "b", "child", 4),
    "delegate": ("  - {id: d, title: D, description: 'Have d0 to d1 appended.', assignee: boss}",
                 "d", "delegation", 4),
}  # fmt: skip


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_finished_call_asked_again_in_a_live_turn_is_not_run_again(
    path: str, tmp_path: Path, openai_server: Any
) -> None:
    task, prefix, kind, kill_at = PATHS[path]
    h = Harness(tmp_path, openai_server)
    h.team.write_text(AGENTS + task + "\n")
    rid = drive(h, [("server", kill_at)])
    assert h.kills == 1 and not h.approved, h.report()
    effects = Counter(lines(tmp_path / "effects.log"))
    # ``stamp`` (replay: false) runs again on resume; the finished ``append`` calls never.
    expected = {f"append:{prefix}0": 1, f"append:{prefix}1": 1,
                f"stamp:{prefix}0": 2, f"stamp:{prefix}1": 2}  # fmt: skip
    assert effects == Counter(expected), h.report()
    with RunLedger(h.db) as ledger:
        rows = [t for t in ledger.tool_calls(rid) if t.name == "append"]
        replayed = [e.data for e in ledger.events(rid, "replayed")]
        calls = [c for c in ledger.calls(rid) if c.subject.startswith(f"{kind}:")]
    assert len(rows) == 2, h.report()
    (a1,) = [t for t in rows if t.arguments == {"line": f"{prefix}1"}]
    # The live turn was given a1's recorded result, under its recorded id.
    assert {"record": "tool_call", "original": a1.tool_call_id} in [
        {k: d[k] for k in ("record", "original")} for d in replayed
    ], h.report()
    last = calls[-1]
    assert last.response is not None and last.response.startswith("wrote lines"), h.report()
    shown = [i["origin"] for i in last.manifest["items"] if i["origin"].startswith("tool:")]
    assert f"tool:{a1.tool_call_id}" in shown, (shown, h.report())
    text = "\n".join(m["content"] or "" for m in last.messages)
    assert text.count(f"appended {prefix}1") == 1, h.report()
    code, out = h.command("verify", rid)
    assert code == 0, out + h.report()


def _row(call_id: str, step: int, name: str, arguments: dict[str, Any]) -> Any:
    from datetime import UTC, datetime

    from clearance._state.ledger import ToolCallRecord

    return ToolCallRecord(
        tool_call_id=call_id, run_id="run_x", subject="task:a", agent="scribe", step=step,
        name=name, arguments=arguments, result=f"{name} {arguments}", is_error=False,
        store_reads=[], chain=None, created_at=datetime.now(UTC),
    )  # fmt: skip


def test_a_live_turn_finds_each_finished_call_once_by_what_it_asks() -> None:
    """`ReplaySource.tool_ids` on a live subject, against the calls recorded as finished.

    A finished call is given back under its id (its result replayed), at its own step or,
    when the live loop took its steps otherwise, at another; each at most once. A finished
    ``replay: false`` call, a call with no recorded start (a person's denial, a repeat
    refused) and a new call get new ids.
    """
    from clearance._agents.replay import ReplaySource
    from clearance._context.verify_approvals import arguments_sha256
    from clearance.models._base import ToolCall

    events: list[Any] = []

    class Events:
        def record_event(self, run_id: str, kind: str, subject: str, data: Any) -> None:
            events.append((kind, subject, data))

    rows = {
        ("task:a", 1): [_row("tool_a0", 1, "append", {"line": "a0"}),
                        _row("tool_s0", 1, "stamp", {"label": "a0"})],
        ("task:a", 2): [_row("tool_a1", 2, "append", {"line": "a1"}),
                        _row("tool_no", 2, "append", {"line": "denied"})],
    }  # fmt: skip
    started = {
        r.tool_call_id: {"tool_call_id": r.tool_call_id, "step": r.step, "name": r.name,
                         "subject": "task:a", "arguments_sha256": arguments_sha256(r.arguments),
                         "idempotent": False, "replay": r.name != "stamp"}
        for step_rows in rows.values() for r in step_rows if r.tool_call_id != "tool_no"
    }  # fmt: skip
    source = ReplaySource(
        Events(), "run_x", calls={}, asked={}, tools=rows,  # type: ignore[arg-type]
        started=started, owners={},
    )  # fmt: skip
    source._live.add("task:a")  # its prompt differed from the recorded one

    def call(name: str, **arguments: Any) -> ToolCall:
        return ToolCall(id="c", name=name, arguments=arguments)

    # Step 3 of the live loop asks for a1 (finished at step 2) and a0 (step 1).
    ids = source.tool_ids("task:a", 3, [call("append", line="a1"), call("append", line="a0")])
    assert ids == ["tool_a1", "tool_a0"]
    assert source.recorded_output("task:a", "tool_a1") == "append {'line': 'a1'}"
    kind, subject, data = events[-1]
    assert (kind, subject, data["record"], data["original"]) == (
        "replayed", "task:a", "tool_call", "tool_a1",
    )  # fmt: skip
    # Asked again: each finished call is given back once; then it is a new call.
    (again,) = source.tool_ids("task:a", 4, [call("append", line="a1")])
    assert again not in ("tool_a1", "tool_a0") and source.recorded_output("task:a", again) is None
    # A finished replay: false call (a live value) runs again, as the new call it is.
    seen = len(events)
    (stamp,) = source.tool_ids("task:a", 4, [call("stamp", label="a0")])
    assert stamp != "tool_s0" and source.recorded_output("task:a", stamp) is None
    assert len(events) == seen
    # A recorded call that never started (a person's denial) is not found.
    (denied,) = source.tool_ids("task:a", 2, [call("append", line="denied")])
    assert denied != "tool_no"
