"""Values from outside never reach a bounded ledger column unbounded (SQLite and PostgreSQL).

The ledger's text columns have widths (``tool_calls.name`` 128, ``calls.model_id`` 256,
``calls.finish_reason`` 64...). PostgreSQL refuses a longer value, and the run failed with
records missing; SQLite stored it silently. Through ``clearance run`` against a real
OpenAI-compatible server on 127.0.0.1 and a real ledger on each database:

- a tool name the MODEL invents, of any length, gets the usual ``unknown tool`` error with the
  name shown cut; the run completes, the tool call is recorded under a bounded name, and
  ``clearance verify`` passes;
- a model id longer than ``calls.model_id`` holds is refused before anything runs, in one
  line naming it (exit 2);
- an MCP server that lists a tool with a 1,000-character name beside the allowed one is
  harmless: only the allowed tools are offered and recorded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import RunLedger
from clearance._state.ledger.schema import CALLS, TOOL_CALLS
from clearance.cli._app import app

pytestmark = pytest.mark.network

NAME_WIDTH = TOOL_CALLS.c.name.type.length
MODEL_ID_WIDTH = CALLS.c.model_id.type.length

TEAM = """\
name: widths
agents:
  - {name: worker, instructions: "You work with tools.", tools: [look]}
tools:
  look: {function: "round20_widths_tools:look"}
tasks:
  - {id: a, title: Look, description: Look at it., assignee: worker}
"""

TOOLS = '''\
def look(what: str) -> str:
    """Look at something."""
    return f"LOOKED AT {what}"
'''


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger URL on a fresh SQLite file, or on the test PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "round20_widths_tools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "round20_widths_tools", raising=False)
    return tmp_path


def cli(db: str, *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", db])


def run_id_of(output: str) -> str:
    return re.search(r"run id: (\S+)", output).group(1)  # type: ignore[union-attr]


def worker_bodies(url: Any) -> list[str]:
    """The text of each request the tool-using agent's model got, in order."""
    texts = ["\n".join(m.get("content") or "" for m in b["messages"]) for b in url.bodies]
    return [t for t in texts if t.startswith("You work with tools.")]


@pytest.mark.parametrize(
    ("invented", "recorded"),
    [
        ("n" * (NAME_WIDTH + 1), "n" * (NAME_WIDTH - 3) + "..."),
        ("n" * 10_000, "n" * (NAME_WIDTH - 3) + "..."),
        ("nn\x00look", "nn\\x00look"),  # PostgreSQL text holds no NUL: shown escaped
    ],
    ids=["one-over", "10000", "nul"],
)
def test_a_tool_name_the_model_invents_is_recorded_bounded_and_answered_unknown(
    tools_module: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, db_url: str,
    invented: str, recorded: str,
) -> None:  # fmt: skip
    turns = iter([[(invented, {"what": "it"})], [("look", {"what": "it"})], "looked"])

    def reply(messages: list[dict[str, Any]]) -> Any:
        system = messages[0]["content"] or ""
        return next(turns) if system.startswith("You work with tools.") else "the summary"

    url = openai_server(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tools_module / "team.yaml").write_text(TEAM)
    run = cli(db_url, "run", str(tools_module / "team.yaml"), "--model", "openai:m")
    assert run.exit_code == 0, run.output
    run_id = run_id_of(run.output)

    # The model heard the usual error for an unknown tool, with the name shown cut.
    second = worker_bodies(url)[1]
    (error,) = re.findall(r"error: unknown tool [^\n]*", second)
    assert error == f"error: unknown tool {recorded!r} (tools: look)", error[:300]
    # The prompt shows the call under its bounded name, never the whole invented one.
    assert invented not in second

    with RunLedger(db_url, create=False) as ledger:
        assert ledger.get_run(run_id).status == "completed"  # type: ignore[union-attr]
        names = [t.name for t in ledger.tool_calls(run_id)]
        asked = [e.data for e in ledger.events(run_id) if e.kind == "model_tool_calls"]
    assert names[1] == "look" and len(names) == 2, names
    assert names[0] == recorded, names[0][:300]
    assert asked[0]["tool_calls"][0]["name"] == names[0]
    verified = cli(db_url, "verify", run_id)
    assert verified.exit_code == 0, verified.output


def test_a_model_id_longer_than_its_column_is_refused_in_one_line(
    tools_module: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    url = openai_server(lambda messages: "never")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    (tools_module / "team.yaml").write_text(TEAM)
    model = "openai:" + "m" * (MODEL_ID_WIDTH - len("openai:") + 1)
    run = cli(db_url, "run", str(tools_module / "team.yaml"), "--model", model)
    assert run.exit_code == 2, run.output
    (line,) = [x for x in run.output.splitlines() if x.strip()]
    assert "model id" in line and f"at most {MODEL_ID_WIDTH}" in line, line
    assert url.bodies == []  # type: ignore[attr-defined]

    in_file = TEAM.replace("name: widths\n", f"name: widths\nmodel: {model}\n")
    (tools_module / "team.yaml").write_text(in_file)
    run = cli(db_url, "run", str(tools_module / "team.yaml"))
    assert run.exit_code == 2, run.output
    assert f"at most {MODEL_ID_WIDTH}" in run.output, run.output
    assert url.bodies == []  # type: ignore[attr-defined]


# -- an MCP server listing a tool with a 1,000-character name ----------------------------------

LONG_MCP_NAME = "t" * 1000

MCP_SERVER = f'''\
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("widths")


def lookup(term: str) -> str:
    """Look a term up."""
    return f"glossary: {{term}}"


def other(term: str) -> str:
    """Something else."""
    return "never"


server.add_tool(other, name={LONG_MCP_NAME!r})
if sys.argv[1] == "both":
    server.add_tool(lookup, name="lookup")
server.run("stdio")
'''

MCP_TEAM = """\
name: widths
mcp_servers:
  docs: {command: [%s, %s, %s]}
agents:
  - {name: worker, instructions: "You work with tools.", tools: ["mcp:docs/lookup"]}
tasks:
  - {id: a, title: Look, description: Look at it., assignee: worker}
"""


@pytest.mark.parametrize("listed", ["both", "long only"])
def test_an_mcp_servers_tool_with_a_long_name_is_never_offered_or_recorded(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch, db_url: str,
    listed: str,
) -> None:  # fmt: skip
    pytest.importorskip("mcp")
    import sys

    (tmp_path / "server.py").write_text(MCP_SERVER)
    command = [json.dumps(sys.executable), json.dumps(str(tmp_path / "server.py")),
               json.dumps(listed.split()[0])]  # fmt: skip
    (tmp_path / "team.yaml").write_text(MCP_TEAM % tuple(command))
    turns = iter([[("mcp__docs__lookup", {"term": "it"})], "looked"])

    def reply(messages: list[dict[str, Any]]) -> Any:
        system = messages[0]["content"] or ""
        return next(turns) if system.startswith("You work with tools.") else "the summary"

    url = openai_server(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    run = cli(db_url, "run", str(tmp_path / "team.yaml"), "--model", "openai:m")
    offered = [t["function"]["name"] for b in url.bodies for t in b.get("tools", ())]  # type: ignore[attr-defined]
    assert LONG_MCP_NAME not in run.output and all(len(n) <= NAME_WIDTH for n in offered)
    if listed == "long only":  # refused before any model call, in one line naming the server
        assert run.exit_code == 2, run.output
        (line,) = [x for x in run.output.splitlines() if x.startswith("error")]
        assert "MCP server 'docs' has no tool 'lookup'" in line and "ttt\u2026)" in line, line
        assert len(line) < 400 and url.bodies == []  # type: ignore[attr-defined]
        return
    assert run.exit_code == 0, run.output[-2000:]
    run_id = run_id_of(run.output)
    assert set(offered) == {"mcp__docs__lookup"}
    with RunLedger(db_url, create=False) as ledger:
        assert [t.name for t in ledger.tool_calls(run_id)] == ["mcp__docs__lookup"]
    verified = cli(db_url, "verify", run_id)
    assert verified.exit_code == 0, verified.output
