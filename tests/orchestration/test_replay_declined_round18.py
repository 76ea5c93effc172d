"""One model answer of [a call whose replay is declined, an ordinary call], resumed twice.

A resume runs a finished call of a ``replay: false`` tool again under a new id (a
``replay_declined`` event), so that step of the answer has two tool-call rows. The calls
after it in the same answer are matched to their rows by their place in the answer: the
second row of the step is no longer the second call's. The ordinary call must still be
replayed, in every later session, never run again or taken for the declined call's row.

- Finished in the first session, killed at the lead's next request twice: the third session
  replays the ordinary call (the rows keep the answer's order, so matching by place holds).
- Killed inside the ordinary call (after its side effect; the tool is idempotent, so the
  second session runs it again under its started id), then killed at the lead's next
  request: the rows of the step are [stamp, stamp again, append], and the third session
  took the declined call's second row for the append (another name), so it ran the append a
  third time instead of replaying the second session's result.

Driven through the command line with the replay sessions' harness (a scripted
OpenAI-compatible server on 127.0.0.1 keeping every request, ``clearance run``/``resume``
subprocesses, a real SQLite ledger).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_replay_sessions_round17 import Harness, Script

from clearance import RunLedger
from clearance._core.vocabulary import EventKind

pytestmark = pytest.mark.network

TOOLS = '''\
import os
import signal
from pathlib import Path

HERE = Path(__file__).parent


def _log(line: str) -> None:
    with open(HERE / "calls.log", "a") as calls:
        calls.write(line + "\\n")


def stamp(label: str) -> str:
    """Stamp a label (a live value: never replayed)."""
    _log(f"stamp:{label}")
    return f"stamped {label}"


def append(line: str) -> str:
    """Append a line; killed after its side effect while the file kill-in-append exists."""
    _log(line)
    flag = HERE / "kill-in-append"
    if flag.exists():
        flag.unlink()
        os.kill(os.getpid(), signal.SIGKILL)
    return f"appended {line}"
'''

TEAM = """\
name: declined18
agents:
  - {name: lead, instructions: "You lead.", tools: [stamp, append]}
tools:
  stamp: {function: "declined18_tools:stamp", replay: false}
  append: {function: "declined18_tools:append", idempotent: true}
coordinator: {name: editor, instructions: "You are the editor."}
tasks:
  - {id: b, title: B, description: "Stamp x, then have L0 appended.", assignee: lead}
"""


class Declined(Harness):
    tools_module, tools = "declined18_tools", TOOLS


def lead(text: str) -> Any:
    """One answer of two calls: the declined one first, then the ordinary one."""
    if "appended L0" not in text:
        return [("stamp", {"label": "x"}), ("append", {"line": "L0"})]
    return "lead done"


def at_lead_after_the_tools(system: str, text: str) -> bool:
    return system == "You lead." and "appended L0" in text


@pytest.fixture
def harness(tmp_path: Path, openai_server: Any) -> Callable[[], Declined]:
    def make() -> Declined:
        script = Script(lead)
        return Declined(tmp_path, openai_server(script.reply), script, TEAM)

    return make


def replay_events(h: Declined) -> tuple[list[str], list[str]]:
    """The tool names replayed and declined, in order, by the records they name."""
    with RunLedger(h.db) as ledger:
        rid = h.run_id()
        names = {row.tool_call_id: row.name for row in ledger.tool_calls(rid)}
        replayed = [names[e.data["original"]] for e in ledger.events(rid, EventKind.REPLAYED)
                    if e.data["record"] == "tool_call"]  # fmt: skip
        declined = [names[e.data["original"]]
                    for e in ledger.events(rid, EventKind.REPLAY_DECLINED)]  # fmt: skip
    return replayed, declined


def finish(h: Declined) -> None:
    with RunLedger(h.db) as ledger:
        (task,) = ledger.tasks(h.run_id())
    assert (task.status, task.result) == ("completed", "lead done"), h.report()
    h.verify()


def test_the_call_after_a_declined_one_is_replayed_in_each_later_session(harness: Any) -> None:
    h = harness()
    h.session(at_lead_after_the_tools)
    assert h.calls_log() == ["stamp:x", "L0"]
    h.session(at_lead_after_the_tools)
    assert h.calls_log() == ["stamp:x", "L0", "stamp:x"], h.report()
    h.session(None)
    assert h.calls_log() == ["stamp:x", "L0", "stamp:x", "stamp:x"], h.report()
    assert replay_events(h) == (["append", "append"], ["stamp", "stamp"])
    finish(h)


def test_after_a_kill_inside_the_ordinary_call_it_is_replayed_not_run_again(
    harness: Any,
) -> None:
    h = harness()
    (h.tmp / "kill-in-append").touch()
    h.session(None, code=-9)  # killed inside append, after its side effect
    assert h.calls_log() == ["stamp:x", "L0"]
    # The stamp runs again (declined); the append, idempotent, runs again under its id.
    h.session(at_lead_after_the_tools)
    assert h.calls_log() == ["stamp:x", "L0", "stamp:x", "L0"], h.report()
    h.session(None)
    assert h.calls_log() == ["stamp:x", "L0", "stamp:x", "L0", "stamp:x"], h.report()
    # The third session replays the second session's append, and declines the latest stamp.
    assert replay_events(h) == (["append"], ["stamp", "stamp"])
    finish(h)
