"""A hostile MCP server over stdio, written by hand (raw JSON-RPC lines), for the attack tests.

Run as ``python hostile_mcp_server.py BEHAVIOUR_JSON`` (or ``@FILE``, a file holding it).
The behaviour is a JSON object:

- ``tools``: the listed tools, each ``{"name", "inputSchema"}`` (any JSON, unchecked);
- ``page_size``: list the tools this many a page (each page names the next);
- ``endless_pages``: every page names a next one, even past the tools;
- ``result``: what ``tools/call`` answers (a ``CallToolResult`` as JSON);
- ``raw_result``: the same as JSON text, sent as it is (say, nested past any parser's stack);
- ``stderr_bytes``: bytes written to standard error before anything else;
- ``stderr_end``: a last line written to standard error after those;
- ``fsize_limit``: a cap on the size of files this process may write (``RLIMIT_FSIZE``), so
  a flood of standard error into a file kills it, and into a pipe does not;
- ``exit``: exit with this code once standard error is written, before any handshake;
- ``notifications``: notifications sent before the answer to ``tools/call``;
- ``calls_file``: a file to which each ``tools/call`` appends its arguments (one JSON line), so
  a test can count the calls that reached the server.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from typing import Any


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def listing(behaviour: dict[str, Any], cursor: str | None) -> dict[str, Any]:
    """One page of the tools: the one ``cursor`` names (``None``: the first)."""
    tools = behaviour.get("tools", [])
    size = behaviour.get("page_size", len(tools) or 1)
    start = int(cursor or 0)
    page: dict[str, Any] = {"tools": tools[start : start + size]}
    if start + size < len(tools) or behaviour.get("endless_pages"):
        page["nextCursor"] = str(start + size)
    return page


def main() -> None:
    given = sys.argv[1]
    if given.startswith("@"):
        with open(given[1:], encoding="utf-8") as f:
            given = f.read()
    behaviour = json.loads(given)
    limit = behaviour.get("fsize_limit")
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    left = behaviour.get("stderr_bytes", 0)
    chunk = b"e" * (1 << 20)
    while left > 0:
        left -= os.write(2, chunk[:left])
    if "stderr_end" in behaviour:
        os.write(2, ("\n" + behaviour["stderr_end"] + "\n").encode())
    if "exit" in behaviour:
        sys.exit(behaviour["exit"])
    for line in sys.stdin:
        request = json.loads(line)
        method, ident = request.get("method"), request.get("id")
        if ident is None:
            continue  # a notification (initialized, cancelled)
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "1"},
            }
        elif method == "tools/list":
            result = listing(behaviour, (request.get("params") or {}).get("cursor"))
        elif method == "tools/call":
            if "calls_file" in behaviour:
                with open(behaviour["calls_file"], "a", encoding="utf-8") as f:
                    f.write(json.dumps(request["params"].get("arguments")) + "\n")
            for _ in range(behaviour.get("notifications", 0)):
                send({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": "x" * 100}})  # fmt: skip
            if "raw_result" in behaviour:
                sys.stdout.write(f'{{"jsonrpc": "2.0", "id": {json.dumps(ident)}, "result": ')
                sys.stdout.write(behaviour["raw_result"] + "}\n")
                sys.stdout.flush()
                continue
            result = behaviour.get("result", {"content": [{"type": "text", "text": "ok"}]})
        else:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": "no"}})
            continue
        send({"jsonrpc": "2.0", "id": ident, "result": result})


if __name__ == "__main__":
    main()
