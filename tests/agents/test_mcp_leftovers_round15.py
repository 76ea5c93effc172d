"""MCP servers that flood the client with requests or quote control characters back to it.

Each server is real: a raw HTTP server on 127.0.0.1 (so it can send what the SDK's server
never would) or a stdio process written by hand.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("mcp")

from raw_mcp_http import (
    Answer,
    Behaviour,
    RawMcpServer,
    result_body,
    serving,
    standard_result,
)

from clearance._agents.mcp import load_mcp_tools
from clearance._agents.mcp_transport import MAX_SERVER_REQUESTS
from clearance._core.errors import ConfigError
from clearance._core.mcp_spec import McpServerSpec, McpToolRef
from clearance.cli import app

HOSTILE = "\x1b]0;owned\x07\x1b[2J\x00\x9b31m\u202eevil\u2066"
"""A terminal title, a screen clear, NUL, a C1 CSI and two bidirectional controls."""
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], RawMcpServer]]:
    with serving() as start:
        yield start


def _flood(method: str, count: int) -> Answer:
    """Answer tools/call with a stream of ``count`` requests to the client, then nothing."""

    def answer(handler: Any, _: dict[str, Any]) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        try:
            for n in range(count):
                request = {"jsonrpc": "2.0", "id": f"s{n}", "method": method}
                handler.wfile.write(f"data: {json.dumps(request)}\n\n".encode())
            handler.wfile.flush()
            while True:
                handler.wfile.write(b": keep-alive\n\n")
                handler.wfile.flush()
                time.sleep(0.2)
        except OSError:
            return

    return answer


@pytest.mark.parametrize("method", ["ping", "roots/list"])
async def test_a_flood_of_requests_during_a_call_ends_it_at_the_cap(serve, method):
    # Each of the server's requests got its answer until the call's deadline: thousands of
    # answers (and as many handler tasks) for one call, bounded by time only.
    server = serve({"tools/call": _flood(method, 5000)})
    spec = McpServerSpec(url=server.url, connect_timeout_s=5, timeout_s=20)
    tools = await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    started = time.monotonic()
    output = await tools["mcp__evil__t"].call({})
    assert time.monotonic() - started < 10
    assert output.content == (
        f"error: MCP server 'evil' sent more than {MAX_SERVER_REQUESTS} requests while "
        "answering t; the call was ended"
    )
    assert output.is_error and output.source["error"] == "too_many_requests"
    assert server.answers_to_the_client() <= MAX_SERVER_REQUESTS


async def test_a_few_requests_during_a_call_are_answered_and_the_call_goes_on(serve):
    def pings_then_result(handler: Any, message: dict[str, Any]) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        for n in range(3):
            ping = {"jsonrpc": "2.0", "id": f"p{n}", "method": "ping"}
            handler.wfile.write(f"data: {json.dumps(ping)}\n\n".encode())
        handler.wfile.write(b"data: " + result_body(message, standard_result(message)) + b"\n\n")
        handler.wfile.flush()

    server = serve({"tools/call": pings_then_result})
    spec = McpServerSpec(url=server.url, connect_timeout_s=5, timeout_s=5)
    tools = await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    output = await tools["mcp__evil__t"].call({})
    assert (output.content, output.is_error) == ("ok", False)


STDIO_FLOOD = """
import json, sys
def send(message):
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()
for line in sys.stdin:
    request = json.loads(line)
    method, ident = request.get("method"), request.get("id")
    if ident is None or method is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": ident, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": "h", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": ident, "result": {
            "tools": [{"name": "t", "inputSchema": {"type": "object"}}]}})
    elif method == "tools/call":
        for n in range(COUNT):
            send({"jsonrpc": "2.0", "id": "s%d" % n, "method": "ping"})
"""


async def test_a_stdio_server_flooding_pings_is_ended_at_the_cap(tmp_path):
    script = tmp_path / "flood.py"
    script.write_text(STDIO_FLOOD.replace("COUNT", "5000"))
    spec = McpServerSpec(command=[sys.executable, str(script)], connect_timeout_s=10, timeout_s=20)
    tools = await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    started = time.monotonic()
    output = await tools["mcp__evil__t"].call({})
    assert time.monotonic() - started < 10
    assert output.content.startswith(
        f"error: MCP server 'evil' sent more than {MAX_SERVER_REQUESTS}"
    )
    assert output.source["error"] == "too_many_requests"


async def test_a_flood_while_listing_is_one_line_naming_the_cap(serve):
    def listing_flood(handler: Any, message: dict[str, Any]) -> None:
        _flood("ping", 5000)(handler, message)

    server = serve({"tools/list": listing_flood})
    spec = McpServerSpec(url=server.url, connect_timeout_s=20)
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    assert time.monotonic() - started < 10
    assert str(caught.value) == (
        f"mcp_servers.evil: MCP server 'evil' ({server.url}) sent more than "
        f"{MAX_SERVER_REQUESTS} requests while listing its tools"
    )


def _shown(text: str) -> None:
    assert RAW.search(text) is None, ascii(text)
    for escape in ("\\x1b]0;owned\\x07", "\\x1b[2J", "\\x9b31m", "\\u202eevil\\u2066"):
        assert escape in text, ascii(text)


async def test_a_servers_error_message_reaches_the_model_with_its_controls_escaped(serve):
    def error(handler: Any, message: dict[str, Any]) -> None:
        body = {"jsonrpc": "2.0", "id": message["id"],
                "error": {"code": -32000, "message": HOSTILE + "x" * 5000}}  # fmt: skip
        handler.reply(200, json.dumps(body).encode(), "application/json")

    server = serve({"tools/call": error})
    spec = McpServerSpec(url=server.url, connect_timeout_s=5, timeout_s=5)
    tools = await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    output = await tools["mcp__evil__t"].call({})
    assert output.content.startswith("error: MCP server 'evil' failed to answer t: MCPError: ")
    _shown(output.content)
    assert len(output.content) < 400
    assert output.is_error


async def test_a_malformed_line_is_quoted_with_its_controls_escaped(tmp_path):
    # A guard: the SDK's note is a pydantic error, whose input is quoted with repr(); the
    # quote is escaped all the same, should the note ever hold the server's text raw.
    script = tmp_path / "malformed.py"
    flood = STDIO_FLOOD.replace("COUNT", "0")
    script.write_text(flood + "        sys.stdout.write(HOSTILE)\n        sys.stdout.flush()\n")
    script.write_text(f"HOSTILE = {HOSTILE + ' not json' + chr(10)!r}\n" + script.read_text())
    spec = McpServerSpec(command=[sys.executable, str(script)], connect_timeout_s=10, timeout_s=1)
    tools = await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    output = await tools["mcp__evil__t"].call({})
    assert output.source["error"] == "malformed", output.content
    assert output.content.startswith(
        "error: MCP server 'evil' did not answer t within 1 s; it sent a message that is not "
        "JSON-RPC: "
    )
    assert RAW.search(output.content) is None, ascii(output.content)
    assert len(output.content) < 400


@pytest.mark.network
def test_a_run_whose_tool_floods_records_the_error_and_goes_on(
    serve, tmp_path, monkeypatch, openai_server
):
    flooding, fine = serve({"tools/call": _flood("ping", 5000)}), serve({})
    seen: list[str] = []

    def reply(messages: list[dict[str, Any]]) -> Any:
        if "You look terms up" not in messages[0]["content"]:
            return "The report."  # the synthesis
        if "## Results of your tool calls" not in messages[-1]["content"]:
            return [("mcp__flood__t", {}), ("mcp__fine__t", {})]
        seen.append(messages[-1]["content"])
        return "Clearance: a bounded thing."

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    spec = {
        "name": "mcp",
        "mcp_servers": {
            "flood": {"url": flooding.url, "connect_timeout_s": 5, "timeout_s": 20},
            "fine": {"url": fine.url, "connect_timeout_s": 5},
        },
        "agents": [
            {"name": "researcher", "instructions": "You look terms up.",
             "tools": ["mcp:flood/t", "mcp:fine/t"], "limits": {"max_steps": 4}}
        ],
        "tasks": [
            {"id": "define", "title": "Define", "description": "Define clearance.",
             "assignee": "researcher"}
        ],
    }  # fmt: skip
    path = tmp_path / "team.yaml"
    path.write_text(yaml.safe_dump(spec))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    runner = CliRunner()
    started = time.monotonic()
    result = runner.invoke(app, ["run", str(path), "--model", "openai:scripted", "--db", db])
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 15
    run_id = re.search(r"run id: (\S+)", result.output).group(1)
    data = json.loads(runner.invoke(app, ["inspect", run_id, "--db", db, "--json"]).output)
    events = {e["data"]["server"]: e["data"] for e in data["events"] if e["kind"] == "mcp_call"}
    assert events["flood"]["error"] == "too_many_requests", events["flood"]
    assert events["fine"]["bytes"] == len("ok")
    assert f"sent more than {MAX_SERVER_REQUESTS} requests while answering t" in seen[0]
    assert runner.invoke(app, ["verify", run_id, "--db", db]).exit_code == 0
