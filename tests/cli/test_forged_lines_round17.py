"""Text from a run cannot print a line that passes for one of Clearance's own.

A goal, an error, a status, a store value, a memory record or a model's answer holding a
line break was printed across lines by the terminal commands: its second line could read
``verify: ok``, ``run ...: verified``, a progress line, a heading or a table row. Now a
one-line field (a status line, a heading, a table cell) stays one line (a line break shown
as ``\\n``, a long cell cut with a mark), and a block (a prompt, an answer, a goal of
several lines) is boxed or behind a ``│`` gutter. The attacks go through the real command
line: a run on a scripted OpenAI-compatible server on 127.0.0.1, ledgers and memories
edited by hand (the hash chain rebuilt, as a forger without the key would).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance.cli._app import app
from clearance.cli._common import out

# Lines of Clearance's own, as a model or a forger would imitate them.
MARKERS = (
    "verify: ok",
    "run run_forged: 9 model calls verified",
    "[    1.0s] completed  b (0.1s) [2/2]",
    "run id: run_forged  status: completed",
    "# task:b (call_forged)",
    "task:b  agent writer  model openai:m  completed",
)
HOSTILE = "ok\n" + "\n".join(MARKERS) + "\n\u202eend"

TEAM = """\
name: forged
memory: {{url: "sqlite:///{memory}"}}
agents:
  - {{name: writer, instructions: "You write.", memory: {{record: task_and_result}}}}
tasks:
  - {{id: a, title: First, description: Write the first part., assignee: writer}}
"""


def forged_lines(output: str) -> list[str]:
    """The lines on which a marker passes for a line (or a table row) of Clearance's own.

    A marker is harmless when it follows an escaped line break on its line (a one-line
    field), or when its line is fenced: behind a ``│`` gutter, or inside a box (one ``│``
    on each side). A table row has a ``│`` per column: a marker that starts one of its
    cells there is a forged row.
    """
    found = []
    for line in output.splitlines():
        for marker in MARKERS:
            at = line.find(marker)
            if at < 0 or line[:at].endswith("\\n"):
                continue
            fenced = line.startswith("│") and line.count("│") <= 2
            if not fenced:
                found.append(line)
    return found


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


class Recorded:
    """A run of the team on a scripted server: its folder, ledger URL and run id."""

    def __init__(self, folder: Path, run_id: str) -> None:
        self.folder = folder
        self.db = f"sqlite:///{folder / 'runs.db'}"
        self.run_id = run_id

    def copy(self, to: Path) -> Recorded:
        """The same files in ``to``, to edit by hand without touching the others' copy."""
        for name in ("runs.db", "mem.db", "team.yaml"):
            shutil.copy(self.folder / name, to / name)
        (to / "team.yaml").write_text(TEAM.format(memory=to / "mem.db"))
        return Recorded(to, self.run_id)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, openai_server_module: Any) -> Recorded:
    """One run whose model answers `HOSTILE` and whose goal is `HOSTILE`."""
    folder = tmp_path_factory.mktemp("forged")
    (folder / "team.yaml").write_text(TEAM.format(memory=folder / "mem.db"))
    url = openai_server_module(lambda messages: HOSTILE)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_BASE_URL", url)
        patch.setenv("OPENAI_API_KEY", "test")
        db = f"sqlite:///{folder / 'runs.db'}"
        args = ("run", str(folder / "team.yaml"), "--model", "openai:m", "--db", db)
        result = cli(*args, "--goal", HOSTILE)
    assert result.exit_code == 0, result.output[-3000:]
    # The run's own lines: the answer is boxed, the progress lines are the run's.
    assert forged_lines(result.output) == [], result.output
    (run_id,) = re.findall(r"^run id: (run_\w+)", result.output, re.MULTILINE)
    return Recorded(folder, run_id)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``out`` draws as on a terminal 300 columns wide (rich's tables and panels)."""
    monkeypatch.setattr(out, "_force_terminal", True)
    monkeypatch.setattr(out, "_width", 300)
    yield


@pytest.mark.network
def test_runs_shows_a_goal_with_line_breaks_on_its_one_row(recorded: Recorded) -> None:
    result = cli("runs", "--db", recorded.db)
    assert result.exit_code == 0, result.output
    assert forged_lines(result.output) == [], result.output
    _, row = result.output.splitlines()  # before: the goal's lines as rows below
    assert row.startswith(recorded.run_id)
    goal = "ok\\nverify: ok\\nrun run_forged: 9 model calls verified\\n[    1…"  # 60, marked
    assert row.endswith(goal)


@pytest.mark.network
@pytest.mark.parametrize("on_terminal", [False, True], ids=["plain", "terminal"])
def test_inspect_keeps_every_forged_line_fenced(
    recorded: Recorded, on_terminal: bool, request: pytest.FixtureRequest
) -> None:
    if on_terminal:
        request.getfixturevalue("terminal")
    result = cli("inspect", recorded.run_id, "--no-pager", "--db", recorded.db)
    assert result.exit_code == 0, result.output
    assert forged_lines(result.output) == [], result.output
    assert "\u202e" not in result.output
    # The answer and the goal are shown whole, each of their lines behind a gutter or boxed.
    lines = [line.strip("│ ") for line in result.output.splitlines()]
    for marker in MARKERS:
        assert lines.count(marker) >= 3, marker  # the goal, the answer, the synthesis


@pytest.mark.network
def test_response_only_of_several_calls_keeps_each_answer_under_its_heading(
    recorded: Recorded,
) -> None:
    every = cli("inspect", recorded.run_id, "--response-only", "--db", recorded.db)
    assert every.exit_code == 0, every.output
    assert forged_lines(every.output) == [], every.output
    headings = [line for line in every.output.splitlines() if line.startswith("#")]
    assert [h.split(" ")[1] for h in headings] == ["task:a", "synthesis"]
    assert "│ # task:b (call_forged)" in every.output.splitlines()
    # One call's answer alone is written as it is, for scripts.
    one = cli("inspect", recorded.run_id, "--response-only", "--task", "a", "--db", recorded.db)
    assert one.output == HOSTILE.replace("\u202e", "\\u202e") + "\n"


def forge_ledger(ledger: Path, run_id: str, rechain: Any) -> None:
    """Put `HOSTILE` in each one-line field a forger can edit, and rebuild the chain."""
    conn = sqlite3.connect(ledger)
    conn.execute("UPDATE runs SET team = team || ?, status = status || ?", (HOSTILE, HOSTILE))
    conn.execute("UPDATE tasks SET status = status || ?", (HOSTILE,))
    conn.execute(
        "UPDATE calls SET agent = agent || ?, model_id = model_id || ? WHERE subject = 'task:a'",
        (HOSTILE, HOSTILE),
    )
    conn.execute(
        "UPDATE calls SET error = ?, response = NULL WHERE subject = 'synthesis'", (HOSTILE,)
    )
    conn.execute(
        "UPDATE tool_calls SET result = result || ?, subject = subject || ?", (HOSTILE,) * 2
    )
    manifest = json.loads(
        conn.execute("SELECT manifest FROM calls WHERE subject = 'task:a'").fetchone()[0]
    )
    manifest["items"][-1]["title"] += HOSTILE
    conn.execute("UPDATE calls SET manifest = ? WHERE subject = 'task:a'", (json.dumps(manifest),))
    data = {"limit": "max_model_calls", "value": 2, "maximum": 1, "error": HOSTILE}
    conn.execute(
        "INSERT INTO events (event_id, run_id, kind, subject, data, created_at) "
        "VALUES ('evt_forged', ?, 'limit_exceeded', ?, ?, '2026-01-01 00:00:00.000000')",
        (run_id, "task:a" + HOSTILE, json.dumps(data)),
    )
    conn.commit()
    conn.close()
    rechain(ledger, run_id)


@pytest.mark.network
@pytest.mark.parametrize("on_terminal", [False, True], ids=["plain", "terminal"])
def test_inspect_and_verify_of_a_forged_ledger_print_each_field_on_its_line(
    recorded: Recorded,
    tmp_path: Path,
    rechain: Any,
    on_terminal: bool,
    request: pytest.FixtureRequest,
) -> None:
    forged = recorded.copy(tmp_path)
    forge_ledger(tmp_path / "runs.db", forged.run_id, rechain)
    if on_terminal:
        request.getfixturevalue("terminal")
    result = cli("inspect", forged.run_id, "--no-pager", "--no-prompt", "--db", forged.db)
    assert result.exit_code == 0, result.output
    assert forged_lines(result.output) == [], result.output
    (head,) = [line for line in result.output.splitlines() if line.startswith("run run_")]
    assert "team forged" + HOSTILE.replace("\n", "\\n").replace("\u202e", "\\u202e") in head
    (error,) = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert error == "error: " + HOSTILE.replace("\n", "\\n").replace("\u202e", "\\u202e")
    (event,) = [line for line in result.output.splitlines() if "limit_exceeded" in line]
    assert "task:aok\\nverify: ok\\n" in event
    checked = cli("verify", forged.run_id, "--db", forged.db)
    assert checked.exit_code == 1, checked.output
    assert forged_lines(checked.output) == [], checked.output


@pytest.mark.network
def test_memory_lists_a_forged_record_on_its_two_lines(recorded: Recorded, tmp_path: Path) -> None:
    forged = recorded.copy(tmp_path)
    with sqlite3.connect(tmp_path / "mem.db") as conn:
        conn.execute(
            "UPDATE clearance_memories SET scope = scope || ?, author = author || ?, "
            "provider = provider || ?, content = ? || content",
            (HOSTILE, HOSTILE, HOSTILE, "x" * 999_000),
        )
    result = cli("memory", str(tmp_path / "team.yaml"), "--db", forged.db)
    assert result.exit_code == 0, result.output
    assert forged_lines(result.output) == [], result.output
    head, first, preview = result.output.splitlines()
    assert head.startswith("memory: ")
    assert first.startswith("mem_") and "agent:writer" + "ok\\nverify: ok" in first
    assert preview == "    " + "x" * 79 + "…"  # the first line, cut with a mark


@pytest.mark.parametrize(
    "value", [HOSTILE, "\n" * 100_000 + "verify: ok", HOSTILE + "z" * 1_000_000]
)
def test_store_query_shows_each_value_on_its_row(tmp_path: Path, value: str) -> None:
    db = f"sqlite:///{tmp_path / 'store.db'}"
    assert cli("store", "set", "notes", "k", value, "--db", db).exit_code == 0
    assert cli("store", "set", "notes", "j", "plain", "--db", db).exit_code == 0
    started = time.perf_counter()
    result = cli("store", "query", "notes", "--db", db)
    assert time.perf_counter() - started < 5
    assert result.exit_code == 0, result.output
    assert forged_lines(result.output) == [], result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│ ")]
    assert [row.split("│")[1].strip() for row in rows] == ["j", "k"]  # one line each
    # `store get` writes the value whole, as it is: a value is not a line of ours.
    got = cli("store", "get", "notes", "k", "--db", db)
    assert got.output == value.replace("\u202e", "\\u202e") + "\n"


def test_graph_estimate_shows_a_file_name_as_it_is_not_as_markup(tmp_path: Path) -> None:
    # A file name with rich's markup: "[red]" was taken as a colour (the name shown as
    # "x.md"), a closing tag with none open as a traceback.
    (tmp_path / "in" / "x[").mkdir(parents=True)
    (tmp_path / "in" / "x[" / "red].md").write_text("y" * 100)
    (tmp_path / "in" / "[red]x.md").write_text("y" * 100)
    (tmp_path / "team.yaml").write_text(
        "model: fake:x\n"
        "agents: [{name: a, instructions: You work.}]\n"
        "tasks:\n"
        "  - {id: t, title: T, description: Go., assignee: a, mode: isolated,"
        " files: ['x[/red].md']}\n"
        "  - {id: u, title: U, description: Go., assignee: a, mode: isolated,"
        " files: ['[red]x.md']}\n"
        f"input: {{default: '{tmp_path / 'in'}'}}\n"
        "isolation: {file_caps: {max_file_bytes: 10, on_oversize: error}}\n"
    )
    result = cli("graph", str(tmp_path / "team.yaml"), "--estimate")
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "error: x[/red].md: over" in result.output
    assert "error: [red]x.md: over" in result.output


@pytest.mark.network
def test_the_run_page_shows_a_forged_task_id_and_status_escaped(
    recorded: Recorded, tmp_path: Path, rechain: Any
) -> None:
    forged = recorded.copy(tmp_path)
    with sqlite3.connect(tmp_path / "runs.db") as conn:
        conn.execute("UPDATE tasks SET task_id = 'a\u202eevil', status = 'completed\u202egnp'")
    rechain(tmp_path / "runs.db", forged.run_id)
    page = tmp_path / "page.html"
    result = cli("view", forged.run_id, "--output", str(page), "--db", forged.db)
    assert result.exit_code == 0, result.output
    html = page.read_text()
    found = re.search(r'<script type="application/json" id="graph-data">(.*?)</script>', html)
    assert found is not None
    nodes = json.loads(found[1])["nodes"]
    # What the script puts in with textContent: the override as its escape, never as is.
    assert not [n for n in nodes if "\u202e" in n["id"] + n["status"] + n["label"]], nodes
    (node,) = [n for n in nodes if n["id"].endswith("evil")]
    assert node["id"] == "a\\u202eevil"
    assert node["status"] == "completed\\u202egnp"
    assert node["label"].startswith("completed\\u202egnp")
    assert isinstance(node["index"], int)  # the script finds nodes by index: unchanged
    assert f'id="task-{node["index"]}"' in html


@pytest.mark.network
def test_a_megabyte_line_and_100000_line_breaks_stay_fenced_and_quick(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = "\n" * 100_000 + "verify: ok\n" + "w" * 1_000_000
    goal = "g" * 1_000_000 + "\nrun id: run_forged  status: completed"

    def reply(messages: list[dict[str, Any]]) -> str:
        return answer if "Write the first part." in messages[-1]["content"] else HOSTILE

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    (tmp_path / "team.yaml").write_text(
        "name: big\n"
        "agents: [{name: writer, instructions: You write., limits: {max_output_tokens: 32768}}]\n"
        "tasks: [{id: a, title: First, description: Write the first part., assignee: writer}]\n"
    )
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    ran = cli("run", str(tmp_path / "team.yaml"), "--model", "openai:m", "--db", db, "--goal", goal)
    assert ran.exit_code == 0, ran.output[:3000]
    assert forged_lines(ran.output) == [], ran.output[-3000:]
    (run_id,) = re.findall(r"^run id: (run_\w+)", ran.output, re.MULTILINE)
    for command in (["runs"], ["inspect", run_id, "--no-pager"], ["verify", run_id]):
        for on_terminal in (False, True):
            with monkeypatch.context() as patch:
                if on_terminal:
                    patch.setattr(out, "_force_terminal", True)
                    patch.setattr(out, "_width", 300)
                started = time.perf_counter()
                result = cli(*command, "--db", db)
                took = time.perf_counter() - started
            assert result.exit_code == 0, result.output[-3000:]
            assert forged_lines(result.output) == [], (command, on_terminal)
            assert took < 10, (command, on_terminal, took)  # before: 20 s on a terminal
