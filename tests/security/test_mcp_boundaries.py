"""Attacks through MCP servers on `clearance run`: a side channel, a name collision, a flood.

The servers are real (the official SDK over stdio), the model a scripted OpenAI-compatible
server on 127.0.0.1 that asks for the tool calls, so every attack goes through the team
file, the tool loop and the ledger as a user's run would.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("mcp")

from clearance.cli import app

pytestmark = pytest.mark.network

runner = CliRunner()
SECRET = "SECRET-ALICE-4242"

NOTES_SERVER = '''\
"""Notes kept in a file of the working directory, the way many real servers keep state."""
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")


@server.tool()
def remember(text: str) -> str:
    """Keep a note."""
    with open("notes.txt", "a", encoding="utf-8") as f:
        f.write(text + "\\n")
    return "kept"


@server.tool()
def recall() -> str:
    """Every note kept."""
    path = Path("notes.txt")
    return path.read_text(encoding="utf-8") if path.exists() else "no notes"


@server.tool()
def b_c() -> str:
    """A tool only agent y may call."""
    Path(sys.argv[1]).write_text("b_c called", encoding="utf-8")
    return "b_c ran"


@server.tool(name="b.c")
def b_dot_c() -> str:
    """A tool agent x may call."""
    return "b.c ran"


@server.tool()
def big(size: int) -> str:
    """A text of the given size."""
    return "x" * size


server.run("stdio")
'''


def notes_team(tmp_path: Path, *, share: bool) -> dict[str, Any]:
    (tmp_path / "notes_server.py").write_text(NOTES_SERVER)
    server: dict[str, Any] = {
        "command": [sys.executable, str(tmp_path / "notes_server.py"), str(tmp_path / "marker")]
    }
    if share:
        server["share"] = True
    return {
        "name": "notes",
        "max_concurrency": 1,
        "mcp_servers": {"notes": server},
        "agents": [
            {"name": "alice", "instructions": "You keep notes.", "tools": ["mcp:notes/remember"]},
            {"name": "bob", "instructions": "You read notes.", "tools": ["mcp:notes/recall"]},
        ],
        "tasks": [
            {"id": "keep", "title": "Keep", "description": "Keep the code.", "assignee": "alice"},
            {"id": "read", "title": "Read", "description": "Read notes.", "assignee": "bob"},
        ],
    }


def reply(messages: list[dict[str, Any]]) -> Any:
    system, last = messages[0]["content"], messages[-1]["content"]
    done = "## Results of your tool calls" in last
    if "You keep notes." in system:
        return "kept it" if done else [("mcp__notes__remember", {"text": SECRET})]
    if "You read notes." in system:
        return "read them" if done else [("mcp__notes__recall", {})]
    if "You are x." in system:
        return "x done" if done else [("mcp__notes__b_c", {})]
    if "You fetch." in system:
        return "fetched" if done else [("mcp__notes__big", {"size": 30_000_000})]
    return "The report."


def run(tmp_path: Path, monkeypatch, openai_server, spec: dict[str, Any]) -> tuple[Any, str, Any]:
    url = openai_server(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(spec))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    result = runner.invoke(app, ["run", str(path), "--model", "openai:m", "--db", db])
    return result, db, url


def bob_saw(url: Any) -> str:
    return "\n".join(
        str(body["messages"]) for body in url.bodies if "You read notes." in str(body["messages"])
    )


def test_one_server_is_no_channel_between_two_agents_by_default(
    tmp_path, monkeypatch, openai_server
) -> None:
    result, db, url = run(tmp_path, monkeypatch, openai_server, notes_team(tmp_path, share=False))
    assert result.exit_code == 0, result.output
    seen = bob_saw(url)
    assert "no notes" in seen  # bob's call ran, in a server folder of his own
    assert SECRET not in seen  # alice's argument did not reach him
    run_id = re.search(r"run id: (\S+)", result.output).group(1)
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output
    assert "declared channel" not in verified.output


def test_a_shared_server_is_a_declared_channel_shown_by_verify(
    tmp_path, monkeypatch, openai_server
) -> None:
    result, db, url = run(tmp_path, monkeypatch, openai_server, notes_team(tmp_path, share=True))
    assert result.exit_code == 0, result.output
    assert SECRET in bob_saw(url)  # the team file allowed it
    run_id = re.search(r"run id: (\S+)", result.output).group(1)
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output
    assert (
        "declared channel: MCP server 'notes' shared by agents alice, bob (share: true)"
        in verified.output
    )


def test_two_agents_tools_that_map_to_one_function_name_are_refused(
    tmp_path, monkeypatch, openai_server
) -> None:
    spec = notes_team(tmp_path, share=False)
    spec["agents"] = [
        {"name": "x", "instructions": "You are x.", "tools": ["mcp:notes/b.c"]},
        {"name": "y", "instructions": "You are y.", "tools": ["mcp:notes/b_c"]},
    ]
    spec["tasks"] = [{"id": "t", "title": "T", "description": "Do t.", "assignee": "x"}]
    result, _, _ = run(tmp_path, monkeypatch, openai_server, spec)
    assert result.exit_code == 2, result.output
    assert "would both be called 'mcp__notes__b_c'" in result.output
    assert not (tmp_path / "marker").exists()  # x never called y's tool


def test_a_huge_result_fails_its_call_quickly(tmp_path, monkeypatch, openai_server) -> None:
    spec = notes_team(tmp_path, share=False)
    spec["agents"] = [
        {"name": "fetcher", "instructions": "You fetch.", "tools": ["mcp:notes/big"]},
    ]
    spec["tasks"] = [{"id": "t", "title": "T", "description": "Fetch.", "assignee": "fetcher"}]
    started = time.monotonic()
    result, _, url = run(tmp_path, monkeypatch, openai_server, spec)
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, result.output
    seen = "\n".join(str(b["messages"]) for b in url.bodies if "You fetch." in str(b["messages"]))
    assert "with a message over 1048576 bytes, which was not read" in seen
    assert elapsed < 30, elapsed  # it took over 60 s (then a timeout) when read whole
