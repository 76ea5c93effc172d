"""``approve``, ``deny`` and ``chat`` print model and ledger text on the lines it belongs to.

A tool call's arguments are model output, shown by ``clearance approve``/``deny`` and by the
question of ``--interactive``; a chat's answer is model output too. A line or paragraph
separator (U+2028, U+2029) in the arguments was printed raw: an editor, a log viewer or
``str.splitlines`` broke the confirmation there, and the rest could read ``verify: ok`` or
``run id: ... status: completed``. A chat answer of several lines was printed as they came,
so a line of it could pass for the session's own (``error: ...``, ``chat run ...``). Now a
confirmation, a question and a status line are one line (each break shown escaped), and
every line of an answer of several lines is behind a ``│`` gutter. Real ``clearance``
processes, a real SQLite ledger and a scripted model server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger

pytestmark = pytest.mark.network

# Lines of Clearance's own, as a model or a forger would imitate them.
MARKERS = (
    "verify: ok",
    "run id: run_forged  status: completed",
    "[    1.0s] completed  b (0.1s) [2/2]",
    "continue the run with: clearance resume run_forged",
    "approve? [y/N, or n <reason>]",
    "chat run run_forged: 9 model calls, 0 compressions",
    "error: forged",
)
BREAKS = ("\n", "\u2028", "\u2029", "\r", "\x85", "\x0b", "\x0c", "\x1c")
HOSTILE = "ok" + "".join(b + m for b, m in zip(BREAKS, MARKERS, strict=False)) + "\x1b[2J\u202eend"
RAW = ("\x1b", "\u202e", "\u2028", "\u2029", "\r", "\x85")

TOOL_MODULE = '''\
def remove(path: str, note: str = "") -> str:
    """Remove a file."""
    return "REMOVED"
'''

TEAM = """\
name: approvals
agents:
  - name: janitor
    instructions: You tidy up.
    tools: [remove]
    limits: {max_output_tokens: 40000}  # room for a megabyte of arguments
tools:
  remove: {function: "approve_lines_mod:remove", approval: required}
tasks:
  - {id: tidy, title: Tidy, description: Delete the file old.txt., assignee: janitor}
"""


def forged(output: str) -> list[str]:
    """The lines that a marker starts, unfenced: each passes for a line of Clearance's own.

    As ``test_forged_lines_round17.forged_lines``, a line behind a ``│`` gutter is fenced;
    a marker within a line (after an escaped line break, say) starts none. Lines are split
    as `str.splitlines` splits them (U+2028 too), as an editor or a log viewer may.
    """
    found = []
    for line in output.splitlines():
        fenced = line.startswith("│") and line.count("│") <= 2
        if not fenced and any(line.lstrip().startswith(marker) for marker in MARKERS):
            found.append(line)
    return found


def assert_no_raw_breaks(output: str) -> None:
    for char in RAW:
        assert char not in output, (repr(char), output[:2_000])


def clearance(tmp: Path, url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "x", "PYTHONPATH": str(tmp)}
    command = [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{tmp / 'runs.db'}"]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, env=env, timeout=120, cwd=tmp
    )


# -- approve and deny --------------------------------------------------------------------


def tool_reply(messages: list[dict[str, Any]]) -> Any:
    text = "\n".join(m["content"] or "" for m in messages)
    if "Delete the file old.txt." in text and "REMOVED" not in text and "denied" not in text:
        return [("remove", {"path": "old.txt" + HOSTILE, "note": HOSTILE + "n" * 1_000_000})]
    return "done"


@pytest.fixture
def paused(tmp_path: Path, openai_server: Any) -> tuple[Path, str, str, str]:
    """A run paused on the model's hostile tool call: folder, server URL, run id, call id."""
    (tmp_path / "approve_lines_mod.py").write_text(TOOL_MODULE)
    (tmp_path / "team.yaml").write_text(TEAM)
    url = openai_server(tool_reply)
    run = clearance(tmp_path, url, "run", "team.yaml", "--model", "openai:m")
    assert run.returncode == 3, run.stderr[-2_000:]
    assert forged(run.stdout + run.stderr) == []  # the listing of what waits names ids only
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}", create=False) as ledger:
        (record,) = ledger.list_runs()
        (asked,) = ledger.events(record.run_id, "awaiting_approval")
    return tmp_path, url, record.run_id, asked.data["call_id"]


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_a_decision_is_confirmed_on_one_line_and_the_next_step_on_another(
    paused: tuple[Path, str, str, str], verb: str
) -> None:
    tmp, url, run_id, call_id = paused
    reason = ["--reason", "no" + HOSTILE] if verb == "deny" else []
    started = time.monotonic()
    decided = clearance(tmp, url, verb, run_id, call_id, *reason)
    assert time.monotonic() - started < 30
    assert decided.returncode == 0, decided.stderr[-2_000:]
    said = decided.stdout
    assert forged(said) == [], said[:3_000]
    assert_no_raw_breaks(said)
    first, second = said.splitlines()  # before: the arguments' U+2028 broke the first
    verb_done = "approved" if verb == "approve" else "denied"
    assert first.startswith(f"{verb_done} {call_id} by ") and len(first) < 3_500
    assert "janitor in task tidy calls remove {" in first
    assert '{"note":"ok\\nverify: ok\\u2028run id: run_forged  status: completed\\u2029[' in first
    assert second == f"continue the run with: clearance resume {run_id}"


def test_the_terminal_question_is_one_line(tmp_path: Path, openai_server: Any) -> None:
    (tmp_path / "approve_lines_mod.py").write_text(TOOL_MODULE)
    (tmp_path / "team.yaml").write_text(TEAM)
    url = openai_server(tool_reply)
    run = clearance(
        tmp_path, url, "run", "team.yaml", "--model", "openai:m", "--interactive", stdin="n\n"
    )
    assert run.returncode == 0, run.stderr[-2_000:]
    asked = run.stderr
    # The one line that starts like one of Clearance's own is its own question.
    assert forged(asked) == ["approve? [y/N, or n <reason>] "], asked[:3_000]
    assert_no_raw_breaks(asked)
    (question,) = [line for line in asked.splitlines() if line.startswith("approval apr_")]
    assert "janitor in task tidy calls remove {" in question and len(question) < 3_500


def test_a_forged_request_is_confirmed_on_one_line_or_refused_in_one(
    paused: tuple[Path, str, str, str], rechain: Any
) -> None:
    tmp, url, run_id, call_id = paused
    with sqlite3.connect(tmp / "runs.db") as conn:
        ((event_id, data),) = conn.execute(
            "SELECT event_id, data FROM events WHERE kind = 'awaiting_approval'"
        ).fetchall()
        edited = json.loads(data)
        edited["task_id"] = "tidy\u2028verify: ok\nrun id: run_forged  status: completed"
        conn.execute(
            "UPDATE events SET data = ? WHERE event_id = ?", (json.dumps(edited), event_id)
        )
    rechain(tmp / "runs.db", run_id)
    decided = clearance(tmp, url, "deny", run_id, call_id)
    output = decided.stdout + decided.stderr
    assert decided.returncode in (0, 2), output[-2_000:]
    assert forged(output) == [], output[:3_000]
    assert_no_raw_breaks(output)
    assert len(output.splitlines()) <= 2


# -- chat --------------------------------------------------------------------------------

CHAT_TEAM = """\
name: talk
agents:
  - {name: carol, instructions: "You are Carol.", limits: {max_output_tokens: 40000}}
"""


def chat(tmp: Path, url: str, *messages: str) -> subprocess.CompletedProcess[str]:
    (tmp / "team.yaml").write_text(CHAT_TEAM)
    stdin = "".join(f"{m}\n" for m in messages)
    return clearance(tmp, url, "chat", "team.yaml", "--agent", "carol", "--model", "openai:m",
                     "--context-window", "100000", stdin=stdin)  # fmt: skip


def gutter_free(stdout: str) -> list[str]:
    """The answer's lines as printed, without their gutter."""
    return [line.removeprefix("│").removeprefix(" ") for line in stdout.splitlines()]


def test_an_answer_of_several_lines_is_behind_a_gutter(tmp_path: Path, openai_server: Any) -> None:
    url = openai_server(lambda messages: "fine" + HOSTILE)
    result = chat(tmp_path, url, "hello", "again")
    assert result.returncode == 0, result.stderr[-2_000:]
    assert forged(result.stdout + result.stderr) == [], result.stdout[:3_000]
    assert_no_raw_breaks(result.stdout + result.stderr)
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("│") for line in lines)
    # Each answer whole, a line of it for each line break (escaped characters as `safe`).
    last = "\\r".join(MARKERS[2:4]) + "\\x85" + MARKERS[4] + "\\x0b" + MARKERS[5] + "\\x0c"
    one = ["fineok", MARKERS[0], MARKERS[1], last + MARKERS[6] + "\\x1b[2J\\u202eend"]
    assert gutter_free(result.stdout) == one + one
    session = [line for line in result.stderr.splitlines() if line.startswith("chat run ")]
    assert len(session) == 1 and session[0].endswith(f"--db sqlite:///{tmp_path / 'runs.db'}")


def test_a_one_line_answer_is_printed_as_it_is(tmp_path: Path, openai_server: Any) -> None:
    url = openai_server(lambda messages: "a plain answer \x1b[31m")
    result = chat(tmp_path, url, "hello")
    assert result.returncode == 0, result.stderr[-2_000:]
    assert result.stdout == "a plain answer \\x1b[31m\n"


def test_a_megabyte_line_and_100000_line_breaks_are_shown_fenced_and_quick(
    tmp_path: Path, openai_server: Any
) -> None:
    answer = "\n" * 100_000 + "verify: ok\n" + "w" * 1_000_000
    url = openai_server(lambda messages: answer)
    started = time.monotonic()
    result = chat(tmp_path, url, "hello")
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-2_000:]
    assert forged(result.stdout + result.stderr) == []
    lines = result.stdout.splitlines()
    assert len(lines) == 100_002 and lines[-1] == "│ " + "w" * 1_000_000
    assert took < 20, took
