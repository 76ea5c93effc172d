"""Text from outside reaches the terminal whole, escaped and on the lines it belongs to.

The attacks: a model streams a long answer (many lines in one piece, a line with no line
break) to ``clearance run --stream`` in a pipe; a model server's error body holds a line
break followed by a line that poses as the command's own; a ledger edited by hand records an
origin whose line break forges a "verified" line in ``clearance verify``; a report's Markdown
holds a link whose target a terminal would hide behind its text.
"""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, RunResult, Task, Team
from clearance.cli import _run_output
from clearance.cli._app import app
from clearance.runs import Report
from clearance.testing import FunctionModel

TEAM = """\
name: streamed
agents:
  - {name: writer, instructions: "You write."}
tasks:
  - {id: a, title: First, description: Write the first part., assignee: writer}
"""

RAW = ("\x1b", "\x07", "\x9b", "\x00", "\r", "\u202e")


def assert_no_raw_controls(output: str) -> None:
    for char in RAW:
        assert char not in output, (char, output[:2000])


@pytest.mark.network
def test_stream_to_a_pipe_prints_every_line_and_a_long_line_whole(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One piece of 400 lines (over the 4,000 characters a terminal's panel keeps), then a
    # line of 10,000 characters with no line break: before, a pipe got only the last
    # 4,000 characters of each, the rest silently dropped.
    many = "".join(f"line {i:03d} \x1b]52;c;aGk=\x07\n" for i in range(400))
    long_line = "Z" * 10_000

    def reply(messages: list[dict[str, Any]]) -> Any:
        if "Write the first part." in messages[-1]["content"]:
            return iter([many, long_line[:6_000], long_line[6_000:]])
        return "summary"

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m", "--db", db, "--stream"]
    )
    assert result.exit_code == 0, result.output[-2000:]
    lines = result.output.splitlines()
    shown = [line for line in lines if line.startswith("task:a | line ")]
    assert shown == [f"task:a | line {i:03d} \\x1b]52;c;aGk=\\x07" for i in range(400)]
    pieces = [line.removeprefix("task:a | ") for line in lines if line.startswith("task:a | Z")]
    assert "".join(pieces) == long_line  # whole, in pieces of at most 4,000 characters
    assert max(map(len, pieces)) <= 4_000
    assert_no_raw_controls(result.output)


class _FailingServer:
    """A model server on 127.0.0.1 answering every request with HTTP 400 and ``body``."""

    def __init__(self, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def failing_server() -> Iterator[Any]:
    servers: list[_FailingServer] = []

    def start(body: bytes) -> str:
        servers.append(_FailingServer(body))
        return servers[-1].url

    yield start
    for server in servers:
        server.close()


FORGED = "run run_forged: 9 model calls verified"


@pytest.mark.network
def test_a_server_error_body_with_a_line_break_stays_on_the_run_error_line(
    tmp_path: Path, failing_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = f"bad request \x1b]52;c;aGk=\x07\r\n{FORGED}\n\u202eevil"
    body = json.dumps({"error": {"message": message}}).encode()
    monkeypatch.setenv("OPENAI_BASE_URL", failing_server(body))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    (tmp_path / "team.yaml").write_text(TEAM)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = CliRunner().invoke(
        app, ["run", str(tmp_path / "team.yaml"), "--model", "openai:m", "--db", db]
    )
    assert result.exit_code == 1, result.output[-2000:]
    assert_no_raw_controls(result.output)
    # No line of the output starts with the server's text: it cannot pose as a line of ours.
    assert not [line for line in result.output.splitlines() if line.startswith(FORGED)]
    (run_line,) = [line for line in result.stderr.splitlines() if line.startswith("run run_")]
    assert "synthesis failed" in run_line
    assert f"bad request \\x1b]52;c;aGk=\\x07\\r\\n{FORGED}\\n\\u202eevil" in run_line


def test_a_verify_finding_quoting_a_line_break_stays_on_one_line(
    tmp_path: Path, rechain: Any
) -> None:
    path = tmp_path / "runs.db"
    db = f"sqlite:///{path}"
    team = Team(agents=(Agent(name="a", instructions="Do it."),))
    tasks = [Task(id="t1", title="T", description="d", assignee="a")]

    async def run() -> str:
        with RunLedger(db) as ledger:
            orchestrator = Orchestrator(team, model=FunctionModel(lambda r: "ok"), ledger=ledger)
            return (await orchestrator.run_tasks(tasks, goal="g")).run_id

    run_id = asyncio.run(run())
    # A forger edits a manifest so that an item's origin holds a line break and a line that
    # poses as verify's own verdict, then rebuilds the (unkeyed) hash chain.
    conn = sqlite3.connect(path)
    call_id, manifest = conn.execute(
        "SELECT call_id, manifest FROM calls WHERE subject = 'task:t1'"
    ).fetchone()
    data = json.loads(manifest)
    data["items"].append({**data["items"][-1], "origin": f"store:zz\n{FORGED}\x1b[2J"})
    conn.execute("UPDATE calls SET manifest = ? WHERE call_id = ?", (json.dumps(data), call_id))
    conn.commit()
    conn.close()
    rechain(path, run_id)

    result = CliRunner().invoke(app, ["verify", run_id, "--db", db])
    assert result.exit_code == 1, result.output
    assert_no_raw_controls(result.output)
    assert not [line for line in result.output.splitlines() if line.startswith(FORGED)]
    assert f"task:t1 store:zz\\n{FORGED}\\x1b[2J: not in the clearance" in result.output


def test_a_report_link_is_shown_with_its_target_not_as_a_terminal_hyperlink(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On a terminal rich renders a Markdown link as an OSC 8 hyperlink: the text "the docs"
    # would open a target the reader never sees.
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="truecolor", width=200)
    monkeypatch.setattr(_run_output, "out", console)
    report = Report(
        markdown="# R\n\nSee [the docs](https://evil.example/x).\n",
        data={},
    )
    result = RunResult(run_id="run_1", status="completed", synthesis=None)
    _run_output.write_report(
        report, result, shown=True, output=None, json_output=None, sarif_output=None
    )
    printed = buffer.getvalue()
    assert "\x1b]8;" not in printed  # no hyperlink sequence
    assert "https://evil.example/x" in printed  # the target is shown
    assert "the docs" in printed
