"""A task's answer over the memory record cap: the task completes, its record is cut.

A record holds at most `MAX_RECORD_CHARS` (1,000,000) characters. A task of an agent with
``memory:`` whose answer is longer used to fail after its model had answered: the finished
result was lost because it could not be remembered. Now the result reaches its dependent
and the ledger byte for byte, the memory holds its first characters and a visible mark with
its full size, the ledger's ``memory_record`` note says it was cut, and ``clearance verify``
passes, on the run that recorded it and on the next run, which recalls it. Real ``clearance``
processes, a real SQLite ledger and memory, and a scripted model server on 127.0.0.1.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance import RunLedger
from clearance._state.memory_records import MAX_RECORD_CHARS, cut_to_cap

pytestmark = pytest.mark.network

BIG = "start big " + "y" * 1_200_000 + " end"  # 1,200,014 characters
KEPT = 999_926  # the cap less the mark
MARK = f"\n\n[cut by Clearance: the first {KEPT:,} of {len(BIG):,} characters are kept]"

TEAM = """\
name: big
memory: {{url: "sqlite:///{memory}", on_error: {on_error}}}
agents:
  - name: writer
    instructions: You write.
    memory: {{record: {record}}}
    limits: {{max_output_tokens: 100000}}
  - name: reader
    instructions: You read.
    limits: {{max_dependency_tokens: 1000000, max_prompt_tokens: 2000000}}
tasks:
  - {{id: big, title: Big, description: Write a lot., assignee: writer}}
  - {{id: use, title: Use, description: Use it., assignee: reader, depends_on: [big]}}
"""


def reply(messages: list[dict[str, Any]]) -> str:
    text = "\n".join(m["content"] or "" for m in messages)
    if "Write a lot." in text:
        return BIG
    return "used it"


def clearance(tmp: Path, url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "x"}
    command = [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{tmp / 'runs.db'}"]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, env=env, timeout=180, cwd=tmp
    )


def team_file(tmp: Path, *, on_error: str = "fail", record: str = "result") -> Path:
    path = tmp / "team.yaml"
    memory = tmp / "memory.db"
    path.write_text(TEAM.format(memory=memory, on_error=on_error, record=record))
    return path


def run_ids(tmp: Path) -> list[str]:
    with RunLedger(f"sqlite:///{tmp / 'runs.db'}", create=False) as ledger:
        return [r.run_id for r in reversed(ledger.list_runs(limit=10))]


def stored_records(tmp: Path) -> list[str]:
    with sqlite3.connect(tmp / "memory.db") as conn:
        return [row[0] for row in conn.execute("SELECT content FROM clearance_memories")]


def the_run_keeps_the_answer(tmp: Path, url: str) -> str:
    """Run the team; check the run, the dependent's request and the ledger; the run id."""
    run = clearance(tmp, url, "run", str(tmp / "team.yaml"), "--model", "openai:m")
    assert run.returncode == 0, run.stderr[-2_000:]
    (run_id,) = run_ids(tmp)[-1:]
    with RunLedger(f"sqlite:///{tmp / 'runs.db'}", create=False) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(run_id)}
        notes = [c for c in ledger.tool_calls(run_id) if c.name == "memory_record"]
    assert {t: r.status for t, r in tasks.items()} == {"big": "completed", "use": "completed"}
    assert tasks["big"].result == BIG  # the ledger holds the answer whole
    (note,) = notes
    assert not note.is_error
    assert note.result.startswith("recorded mem_")
    assert note.result.endswith(
        f" in agent:writer (cut to the first {KEPT:,} of {len(BIG):,} characters: over the "
        f"{MAX_RECORD_CHARS:,} a record may hold)"
    )
    verified = clearance(tmp, url, "verify", run_id)
    assert verified.returncode == 0, verified.stdout[-2_000:] + verified.stderr[-2_000:]
    return run_id


@pytest.mark.parametrize("on_error", ["fail", "continue"])
def test_an_answer_over_the_cap_reaches_its_dependent_whole_and_is_recorded_cut(
    tmp_path: Path, openai_server, on_error: str
) -> None:
    url = openai_server(reply)
    team_file(tmp_path, on_error=on_error)
    the_run_keeps_the_answer(tmp_path, url)
    # The dependent's request held the answer byte for byte.
    (asked,) = [b for b in url.bodies if "Use it." in str(b["messages"])]
    assert any(BIG in (m["content"] or "") for m in asked["messages"])
    (record,) = stored_records(tmp_path)
    assert len(record) <= MAX_RECORD_CHARS
    assert record == BIG[:KEPT] + MARK


def test_the_next_run_recalls_the_cut_record_and_verifies(tmp_path: Path, openai_server) -> None:
    url = openai_server(reply)
    team_file(tmp_path)
    the_run_keeps_the_answer(tmp_path, url)
    (record,) = stored_records(tmp_path)
    url.bodies.clear()
    the_run_keeps_the_answer(tmp_path, url)  # recalls the cut record; verify checks it
    (asked,) = [b for b in url.bodies if "Write a lot." in str(b["messages"])]
    assert any(record in (m["content"] or "") for m in asked["messages"])


def test_task_and_result_is_cut_as_a_whole(tmp_path: Path, openai_server) -> None:
    url = openai_server(reply)
    team_file(tmp_path, record="task_and_result")
    run = clearance(tmp_path, url, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    assert run.returncode == 0, run.stderr[-2_000:]
    (record,) = stored_records(tmp_path)
    whole = f"Task: Big\nWrite a lot.\n\nResult: {BIG}"
    assert record == cut_to_cap(whole) and len(record) <= MAX_RECORD_CHARS
    assert record.startswith("Task: Big\nWrite a lot.\n\nResult: start big yyy")
    assert record.endswith(f" of {len(whole):,} characters are kept]")


def test_a_record_at_the_cap_is_kept_whole_and_one_over_is_cut_to_it() -> None:
    assert cut_to_cap("z" * MAX_RECORD_CHARS) == "z" * MAX_RECORD_CHARS
    cut = cut_to_cap("z" * (MAX_RECORD_CHARS + 1))
    assert len(cut) <= MAX_RECORD_CHARS and cut.startswith("z" * 999_000)
    assert cut.endswith(f" of {MAX_RECORD_CHARS + 1:,} characters are kept]")


CHAT_TEAM = """\
name: talk
agents:
  - {name: carol, instructions: "You are Carol.", limits: {max_output_tokens: 40000}}
"""


def test_a_chat_answer_over_the_cap_is_shown_whole_and_remembered_cut(
    tmp_path: Path, openai_server
) -> None:
    # The answer is too long to keep in the window: it is dropped, and recorded first. Its
    # record failed, and the session ended with exit 1 after one answer.
    url = openai_server(lambda messages: BIG)
    (tmp_path / "team.yaml").write_text(CHAT_TEAM)
    chat = clearance(
        tmp_path, url, "chat", "team.yaml", "--agent", "carol", "--model", "openai:m",
        "--context-window", "100000", "--memory", f"sqlite:///{tmp_path / 'memory.db'}",
        stdin="hello\nagain\n",
    )  # fmt: skip
    assert chat.returncode == 0, chat.stderr[-2_000:]
    assert chat.stdout == f"{BIG}\n{BIG}\n"  # both answers, whole
    records = stored_records(tmp_path)
    whole = f"carol: {BIG}"  # a turn is recorded with its author
    assert sorted(records) == sorted(["user: hello", "user: again", *[cut_to_cap(whole)] * 2])
    assert cut_to_cap(whole).endswith(f"[cut by Clearance: the first {KEPT:,} of {len(whole):,} "
                               "characters are kept]")  # fmt: skip
    (run_id,) = run_ids(tmp_path)
    verified = clearance(tmp_path, url, "verify", run_id)
    assert verified.returncode == 0, verified.stdout[-2_000:] + verified.stderr[-2_000:]
