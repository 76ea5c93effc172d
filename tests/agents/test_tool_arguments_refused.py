"""Arguments that were no JSON object never run a tool, whatever the tool's schema admits.

A provider hands on a model's arguments that do not parse, or are a list, as
``{"_raw": <what was sent>}`` so that the model hears a tool error. A function tool refused
that (no ``_raw`` parameter), but an MCP tool whose schema is ``{"type": "object"}`` ran, its
server sent a ``_raw`` argument the model never meant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from raw_mcp_http import Behaviour, RawMcpServer, serving

pytest.importorskip("mcp")

from clearance._agents.mcp import load_mcp_tools
from clearance._agents.tools import Tool, ToolOutput
from clearance._core.mcp_spec import McpServerSpec, McpToolRef
from clearance.models._base import decoded_arguments


def _recording(schema: dict[str, Any], ran: list[dict[str, Any]]) -> Tool:
    """A tool of ``schema`` that notes each call's arguments in ``ran``."""

    def run(arguments: dict[str, Any]) -> ToolOutput:
        ran.append(arguments)
        return ToolOutput(content="ran")

    return Tool(name="t", description="d", parameters=schema, run=run)


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], RawMcpServer]]:
    with serving() as start:
        yield start


@pytest.mark.parametrize(
    ("sent", "quoted"),
    [
        ('{"path": "/etc', '(sent: "{\\"path\\": \\"/etc")'),
        ("[1, 2]", '(sent: "[1, 2]")'),
        ('"\\u001b[2J"', '(sent: "\\"\\\\u001b[2J\\"")'),
    ],
)
async def test_an_mcp_tool_admitting_any_object_is_not_called_with_what_did_not_parse(
    serve: Callable[[Behaviour], RawMcpServer], sent: str, quoted: str
) -> None:
    server = serve({})  # its tool's schema: {"type": "object"}, nothing required
    spec = McpServerSpec(url=server.url, connect_timeout_s=5, timeout_s=5)
    tools = await load_mcp_tools({"srv": spec}, [McpToolRef("srv", "t")])
    output = await tools["mcp__srv__t"].call(decoded_arguments(sent))
    assert output.is_error
    assert output.content == (
        f"error: invalid arguments: they are not a JSON object {quoted}; call again with an "
        "object of the tool's parameters"
    )
    assert "tools/call" not in server.methods()
    fine = await tools["mcp__srv__t"].call(decoded_arguments('{"path": "/etc"}'))
    assert (fine.content, fine.is_error) == ("ok", False)
    assert server.methods().count("tools/call") == 1


def test_what_is_quoted_back_is_escaped_and_cut() -> None:
    ran: list[dict[str, Any]] = []
    tool = _recording({"type": "object"}, ran)
    output = asyncio.run(tool.call({"_raw": "\x1b]0;owned\x07" + "x" * 5000}))
    assert output.is_error and ran == []
    assert "\x1b" not in output.content and "\\u001b]0;owned\\u0007" in output.content
    assert "(cut)" in output.content and len(output.content) < 400


async def test_a_tool_whose_schema_names_raw_still_gets_it() -> None:
    ran: list[dict[str, Any]] = []
    schema = {"type": "object", "properties": {"_raw": {"type": "string"}}}
    tool = _recording(schema, ran)
    output = await tool.call({"_raw": "text"})
    assert (output.content, output.is_error, ran) == ("ran", False, [{"_raw": "text"}])
