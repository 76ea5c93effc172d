"""MCP servers over streamable HTTP that attack the client, each a raw HTTP server on 127.0.0.1.

Raw HTTP (not the SDK's server) so a server can send what a well-behaved one never would: an
output schema whose pattern backtracks without end, a redirect to another port, an error
page of megabytes, keep-alive comments forever.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("mcp")

from raw_mcp_http import Behaviour, RawMcpServer, serving

from clearance._agents.mcp import load_mcp_tools
from clearance._core.errors import ConfigError
from clearance._core.mcp_spec import McpServerSpec, McpToolRef
from clearance.cli import app


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], RawMcpServer]]:
    with serving() as start:
        yield start


async def _longest_stall(work: Any) -> tuple[Any, float]:
    """``work``'s outcome and the longest the event loop went without running another task."""
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.05)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    try:
        outcome = await work
    finally:
        ticking.cancel()
    return outcome, max(gaps, default=0.0)


async def test_an_output_schema_pattern_that_backtracks_cannot_stall_the_run(serve):
    # The SDK listed the tools again after each call and held the structured result to the
    # server's outputSchema with jsonschema, in the event loop: ^(a+)+$ on 26 a's and a b
    # froze every task of the run for seconds (at 40 characters, for hours), past timeout_s.
    server = serve(
        {
            "tool": {
                "outputSchema": {
                    "type": "object",
                    "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}},
                }
            },
            "result": {
                "content": [{"type": "text", "text": "the result"}],
                "structuredContent": {"a": "a" * 26 + "b"},
            },
        }
    )
    spec = McpServerSpec(url=server.url, connect_timeout_s=5, timeout_s=5)
    tools = await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    output, stall = await _longest_stall(tools["mcp__evil__t"].call({}))
    assert stall < 1.0
    assert (output.content, output.is_error) == ("the result", False)
    # One listing before the run; the call's own session lists nothing.
    assert server.methods().count("tools/list") == 1


async def test_a_redirect_to_another_port_is_not_followed_and_carries_no_header(serve):
    other = serve({})
    server = serve(
        {"initialize": lambda handler, _: handler.reply(307, b"", "text/plain", location=other.url)}
    )
    spec = McpServerSpec(
        url=server.url, headers={"Authorization": "Bearer s3cret"}, connect_timeout_s=5
    )
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert message.startswith("mcp_servers.evil: cannot use MCP server 'evil'")
    assert f"Redirect to {other.url} not followed" in message
    assert "s3cret" not in message and "\n" not in message
    assert other.seen == []
    assert [headers["Authorization"] for _, headers in server.seen] == ["Bearer s3cret"]


@pytest.mark.parametrize("kind", ["text/html", "application/json"])
async def test_a_huge_401_page_is_one_short_line_without_the_token(serve, kind):
    page = (
        json.dumps({"jsonrpc": "2.0", "id": None,
                    "error": {"code": -32001, "message": "denied\n" + "x" * 500_000}})
        if kind == "application/json"
        else "<h1>denied</h1>\n" * 100_000
    ).encode()  # fmt: skip
    server = serve({"initialize": lambda handler, _: handler.reply(401, page, kind)})
    spec = McpServerSpec(url=server.url + "?token=s3cret", connect_timeout_s=5)
    with pytest.raises(ConfigError) as caught:
        await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    message = str(caught.value)
    assert message.startswith(
        f"mcp_servers.evil: cannot use MCP server 'evil' ({server.url}): MCPError: "
    )
    assert len(message) < 500
    assert "s3cret" not in message and "\n" not in message


async def test_keep_alive_comments_forever_end_at_the_calls_deadline(serve):
    def forever(handler: Any, _: Any) -> None:
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        try:
            while True:
                handler.wfile.write(b": keep-alive\n\n")
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:
            return

    server = serve({"tools/call": forever})
    spec = McpServerSpec(url=server.url, connect_timeout_s=5, timeout_s=2)
    tools = await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    started = time.monotonic()
    output = await tools["mcp__evil__t"].call({})
    assert time.monotonic() - started < 6
    assert output.content == "error: MCP server 'evil' did not answer t within 2 s"
    assert output.is_error and output.source["error"] == "timeout"


async def test_a_listing_that_hangs_is_named_as_past_its_deadline(serve):
    # The HTTP read timeout was timeout_s: a listing hanging for it (under connect_timeout_s)
    # was "cannot use MCP server ...: ReadTimeout: ReadTimeout", and a call's ReadTimeout
    # (racing the SDK's own timeout_s) was recorded as error "ReadTimeout", not "timeout".
    server = serve({"tools/list": lambda *_: time.sleep(30)})
    spec = McpServerSpec(url=server.url, connect_timeout_s=2, timeout_s=0.5)
    with pytest.raises(ConfigError) as caught:
        await load_mcp_tools({"evil": spec}, [McpToolRef("evil", "t")])
    assert str(caught.value) == (
        f"mcp_servers.evil: MCP server 'evil' ({server.url}) did not answer within 2 s"
    )


BACKTRACKING = {
    "tool": {
        "outputSchema": {
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}},
        }
    },
    "result": {
        "content": [{"type": "text", "text": "glossary: a bounded thing"}],
        "structuredContent": {"a": "a" * 26 + "b"},
    },
}


@pytest.mark.network
def test_a_run_calling_hostile_http_tools_records_them_and_verifies(
    serve, tmp_path, monkeypatch, openai_server
):
    fine, hung = serve(BACKTRACKING), serve({"tools/call": lambda *_: time.sleep(30)})
    calls = [("mcp__fine__t", {}), ("mcp__hung__t", {})]

    def reply(messages: list[dict[str, Any]]) -> Any:
        if "You look terms up" not in messages[0]["content"]:
            return "The report."  # the synthesis
        if "## Results of your tool calls" not in messages[-1]["content"]:
            return calls
        return "Clearance: a bounded thing."

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    spec = {
        "name": "mcp",
        "mcp_servers": {
            "fine": {"url": fine.url, "connect_timeout_s": 5},
            "hung": {"url": hung.url, "connect_timeout_s": 5, "timeout_s": 1},
        },
        "agents": [
            {
                "name": "researcher",
                "instructions": "You look terms up.",
                "tools": ["mcp:fine/t", "mcp:hung/t"],
                "limits": {"max_steps": 4},
            }
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
    result = runner.invoke(app, ["run", str(path), "--model", "openai:scripted", "--db", db])
    assert result.exit_code == 0, result.output
    run_id = re.search(r"run id: (\S+)", result.output).group(1)
    data = json.loads(runner.invoke(app, ["inspect", run_id, "--db", db, "--json"]).output)
    events = {e["data"]["server"]: e["data"] for e in data["events"] if e["kind"] == "mcp_call"}
    assert events["fine"]["bytes"] == len("glossary: a bounded thing")
    assert events["hung"]["error"] == "timeout", events["hung"]
    verified = runner.invoke(app, ["verify", run_id, "--db", db])
    assert verified.exit_code == 0, verified.output
