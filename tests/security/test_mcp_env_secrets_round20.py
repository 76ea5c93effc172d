"""A stdio MCP server's ``env:`` values (its API tokens) stay out of what is shown of it.

A stdio server is given its secrets through ``env:`` (``API_TOKEN: ${TOKEN}``, or written
literally). A server that echoed one on its standard error had it quoted whole in the error
line of a failed listing (``its standard error ends: ...``, on the terminal), and one that
echoed it in an error (a JSON-RPC error, an error result) had it in the tool's output (the
model's next prompt, the ledger, ``inspect``): only HTTP servers' URL and header values were
masked. Each ``env:`` value of at least 4 characters is now masked the same way, cut short
or not; the ``command:`` is recorded as written. Real servers (processes) over stdio.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("mcp")

from clearance._agents.mcp import load_mcp_tools
from clearance._core.errors import ConfigError
from clearance._core.masking import MASK
from clearance._core.mcp_spec import McpServerSpec, McpToolRef
from clearance.cli import app

TOKEN = "Zq7-R20-env-secret-0123456789"  # from the environment: ${MCP_R20_TOKEN}
LITERAL = "lit-R20-written-in-the-file"  # written in the team file as it is
SECRETS = (TOKEN, LITERAL)

SERVER = r"""
import json, os, sys

TOKEN, LITERAL = os.environ["API_TOKEN"], os.environ["OTHER_KEY"]
how = sys.argv[1]
if how == "crash":
    sys.stderr.write("starting\n")
    sys.stderr.write(f"auth failed for {TOKEN} and {LITERAL} (" + "z" * int(sys.argv[2]) + ")\n")
    sys.stderr.flush()
    sys.exit(3)
for line in sys.stdin:
    request = json.loads(line)
    method, ident = request.get("method"), request.get("id")
    if ident is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": request["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}
    elif how == "rpc-error":
        error = {"code": -32001, "message": f"denied: token {TOKEN}, key {LITERAL}"}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}) + "\n")
        sys.stdout.flush()
        continue
    else:
        text = f"denied: token {TOKEN}, key {LITERAL}"
        result = {"isError": True, "content": [{"type": "text", "text": text}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}) + "\n")
    sys.stdout.flush()
"""


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MCP_R20_TOKEN", TOKEN)
    script = tmp_path / "env_server.py"
    script.write_text(SERVER)
    return script


def entry(script: Path, *args: str) -> dict[str, Any]:
    return {
        "command": [sys.executable, str(script), *args],
        "env": {"API_TOKEN": "${MCP_R20_TOKEN}", "OTHER_KEY": LITERAL, "MODE": "on"},
        "connect_timeout_s": 10,
        "timeout_s": 10,
    }


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text, (secret, text)
            for n in range(3, len(secret)):  # nor its beginning or end
                assert f" {secret[:n]}" not in text and f"{secret[-n:]} " not in text, n


def test_the_secrets_of_a_stdio_server_are_its_env_values(server: Path) -> None:
    secrets = McpServerSpec(**entry(server)).secrets()
    assert TOKEN in secrets and LITERAL in secrets
    assert "${MCP_R20_TOKEN}" not in secrets


@pytest.mark.parametrize("padding", [0, 280], ids=["whole", "cut"])
async def test_a_crashing_servers_standard_error_quotes_no_env_value(
    server: Path, padding: int
) -> None:
    # "cut": the tail keeps the last 300 characters of the line, from inside the token.
    spec = McpServerSpec(**entry(server, "crash", str(padding)))
    with pytest.raises(ConfigError) as caught:
        await load_mcp_tools({"s": spec}, [McpToolRef("s", "t")])
    message = str(caught.value)
    assert "its standard error ends: " in message, message
    assert_no_secret(message)
    if not padding:
        assert message.endswith(f"its standard error ends: auth failed for {MASK} and {MASK} ()")


@pytest.mark.parametrize("how", ["rpc-error", "error-result"])
async def test_an_error_echoing_an_env_value_reaches_the_model_masked(
    server: Path, how: str
) -> None:
    spec = McpServerSpec(**entry(server, how))
    tools = await load_mcp_tools({"s": spec}, [McpToolRef("s", "t")])
    output = await tools["mcp__s__t"].call({})
    assert output.is_error
    assert f"denied: token {MASK}, key {MASK}" in output.content, output.content
    assert_no_secret(output.content)


def test_the_terminal_line_of_a_failed_listing_quotes_no_env_value(
    server: Path, tmp_path: Path
) -> None:
    team = {
        "name": "t",
        "model": "fake:m",
        "mcp_servers": {"s": entry(server, "crash", "0")},
        "agents": [{"name": "a", "instructions": "Go.", "tools": ["mcp:s/t"]}],
        "tasks": [{"id": "t1", "title": "T", "description": "Do it.", "assignee": "a"}],
    }
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(team))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    run = CliRunner().invoke(app, ["run", str(tmp_path / "team.yaml"), "--db", db])
    assert run.exit_code == 2, run.output
    assert run.output.count("\n") == 1, run.output
    assert run.output.startswith(f"error: {tmp_path / 'team.yaml'}: mcp_servers.s: "), run.output
    assert run.output.endswith(f"auth failed for {MASK} and {MASK} ()\n"), run.output
    assert_no_secret(run.output)
