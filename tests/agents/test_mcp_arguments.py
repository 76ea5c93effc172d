"""A server's argument schema is held to the arguments with the one bounded schema check.

Each server is a real process speaking MCP over stdio (`hostile_mcp_server.py`) that appends
every ``tools/call`` it receives to a file, so each test counts the calls that reached it. The
check is `clearance._core.schema_check`, the one that holds answers to an ``output_schema``:
a ``pattern`` is enforced (under the time limit), a ``$ref`` is never fetched, ``enum`` is
hashed, and a schema that cannot be checked safely refuses the call with one line.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from clearance._agents.mcp import load_mcp_tools
from clearance._core import schema_check
from clearance._core.mcp_spec import McpServerSpec, McpToolRef

SERVER = Path(__file__).with_name("hostile_mcp_server.py")


class Server:
    """A stdio server listing one tool ``t`` with ``schema``, counting the calls it gets."""

    def __init__(self, tmp_path: Path, schema: Any, **settings: Any) -> None:
        self.calls_file = tmp_path / "calls.jsonl"
        behaviour = {"tools": [{"name": "t", "inputSchema": schema}],
                     "calls_file": str(self.calls_file)}  # fmt: skip
        given = tmp_path / "behaviour.json"
        given.write_text(json.dumps(behaviour), encoding="utf-8")
        self.spec = McpServerSpec(command=[sys.executable, str(SERVER), f"@{given}"],
                                  connect_timeout_s=10, timeout_s=10, **settings)  # fmt: skip

    async def tool(self) -> Any:
        tools = await load_mcp_tools({"srv": self.spec}, [McpToolRef("srv", "t")])
        return tools["mcp__srv__t"]

    def calls(self) -> list[Any]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]


async def test_a_pattern_is_enforced_before_the_call_reaches_the_server(tmp_path):
    schema = {"type": "object", "required": ["code"],
              "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}}}  # fmt: skip
    server = Server(tmp_path, schema)
    tool = await server.tool()
    refused = await tool.call({"code": "abc"})
    assert refused.is_error
    assert refused.content == "error: invalid arguments: $.code: 'abc' does not match '^[A-Z]{3}$'"
    assert server.calls() == []
    passed = await tool.call({"code": "ABC"})
    assert not passed.is_error and passed.content == "ok"
    assert server.calls() == [{"code": "ABC"}]


async def test_pattern_properties_name_the_argument_that_matches_none(tmp_path):
    schema = {"type": "object", "patternProperties": {"^x_[a-z]+$": {"type": "integer"}},
              "additionalProperties": False}  # fmt: skip
    server = Server(tmp_path, schema)
    tool = await server.tool()
    refused = await tool.call({"x_ok": 1, "y_bad": 2})
    assert refused.is_error and "'y_bad' was unexpected" in refused.content
    wrong_type = await tool.call({"x_ok": "one"})
    assert wrong_type.is_error and "$.x_ok: 'one' is not of type 'integer'" in wrong_type.content
    assert server.calls() == []
    assert not (await tool.call({"x_ok": 1, "x_two": 2})).is_error
    assert server.calls() == [{"x_ok": 1, "x_two": 2}]


async def test_a_catastrophic_pattern_is_cut_by_the_time_limit_without_stalling_the_run(
    tmp_path, monkeypatch
):
    # `regex` backtracks exponentially on (a|aa)+ against "aaa...!": without a time limit
    # the check would hold the run for ever. The check runs off the event loop, so the
    # run's other tasks go on while it does.
    monkeypatch.setattr(schema_check, "PATTERN_SECONDS", 0.5)
    schema = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a|aa)+$"}}}
    server = Server(tmp_path, schema)
    tool = await server.tool()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    ticking = asyncio.ensure_future(ticker())
    started = time.monotonic()
    try:
        output = await tool.call({"q": "a" * 60 + "!"})
    finally:
        ticking.cancel()
    took = time.monotonic() - started
    assert 0.4 < took < 3
    assert ticks >= 10  # the event loop was not held by the check
    assert output.is_error
    assert output.content == (
        "error: invalid arguments: the tool's argument schema's patterns took over 0.5 seconds "
        "on the arguments"
    )
    assert server.calls() == []
    assert not (await tool.call({"q": "aaaa"})).is_error  # a match is quick, and passes
    assert server.calls() == [{"q": "aaaa"}]


async def test_a_pattern_that_would_take_gigabytes_to_build_is_refused_quickly(tmp_path):
    # `regex` unrolls counted repeats when it compiles: (?:a{65535}){65535} took all memory
    # and the process was killed; this one takes a quarter of a gigabyte.
    schema = {"type": "object", "properties": {"q": {"type": "string",
                                                     "pattern": "(?:a{1000}){1000}"}}}  # fmt: skip
    server = Server(tmp_path, schema)
    tool = await server.tool()
    output = await tool.call({"q": "a"})
    assert output.is_error
    assert "the tool's argument schema cannot be checked: the pattern" in output.content
    assert "too large" in output.content and "\n" not in output.content
    assert server.calls() == []


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_a_reference_outside_the_schema_refuses_the_call_naming_it(tmp_path):
    schema = {"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}
    server = Server(tmp_path, schema)
    output = await (await server.tool()).call({"a": 1})
    assert output.content == (
        "error: invalid arguments: the tool's argument schema cannot be checked: $ref "
        "'file:///etc/passwd' points outside the schema; only '#...' is allowed"
    )
    assert server.calls() == []


async def test_a_huge_enum_is_checked_fast_and_shown_briefly(tmp_path):
    values = [f"v{i}" for i in range(40_000)]
    schema = {"type": "object",
              "properties": {"picks": {"type": "array", "items": {"enum": values}}}}  # fmt: skip
    server = Server(tmp_path, schema, max_schema_bytes=1024 * 1024)
    tool = await server.tool()
    picks = values[::-8]  # 5,000 of them, from the end: each was compared with every value
    started = time.monotonic()
    refused = await tool.call({"picks": [*picks, "nope"]})
    assert refused.is_error and "$.picks[5000]: 'nope' is not one of" in refused.content
    assert "(of 40000 values)" in refused.content and len(refused.content) < 1000
    assert server.calls() == []
    assert not (await tool.call({"picks": picks})).is_error
    assert time.monotonic() - started < 5
    assert server.calls() == [{"picks": picks}]


async def test_a_dialect_the_schema_names_is_the_one_checked(tmp_path):
    # A draft-07 tuple: the second item must be an integer.
    pair = {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
              "properties": {"pair": pair}}  # fmt: skip
    server = Server(tmp_path, schema)
    tool = await server.tool()
    refused = await tool.call({"pair": ["a", "b"]})
    assert refused.is_error and "$.pair[1]: 'b' is not of type 'integer'" in refused.content
    assert not (await tool.call({"pair": ["a", 1]})).is_error
    assert server.calls() == [{"pair": ["a", 1]}]
