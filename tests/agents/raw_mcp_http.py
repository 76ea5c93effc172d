"""A raw MCP endpoint over streamable HTTP on 127.0.0.1, for the tests of hostile servers.

Raw HTTP (not the SDK's server), so a test can answer what a well-behaved server never
would. A server answers ``initialize``, ``tools/list`` (one tool, ``t``) and ``tools/call``
(``ok``) as an honest one does, unless its *behaviour* says otherwise:

- a method name -> ``answer(handler, message)``, which writes the whole answer itself
  (``handler.reply(status, body, content_type, **headers)`` or raw ``handler.wfile``);
- ``"tool"`` -> fields added to the listed tool; ``"result"`` -> the ``tools/call`` result.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

Answer = Callable[[Any, dict[str, Any]], None]
Behaviour = dict[str, Any]


def standard_result(message: dict[str, Any], behaviour: Behaviour | None = None) -> dict[str, Any]:
    """The ``result`` an honest server gives ``message`` (with ``behaviour``'s tool and result)."""
    behaviour = behaviour or {}
    if message["method"] == "initialize":
        return {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1"},
        }
    if message["method"] == "tools/list":
        tool = {"name": "t", "inputSchema": {"type": "object"}}
        tool.update(behaviour.get("tool", {}))
        return {"tools": [tool]}
    return behaviour.get("result", {"content": [{"type": "text", "text": "ok"}]})


def result_body(message: dict[str, Any], result: dict[str, Any]) -> bytes:
    """The JSON-RPC answer to ``message`` holding ``result``, as bytes."""
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()


class RawMcpServer:
    """A scripted MCP endpoint at ``url``; each message sent, with its headers, in ``seen``."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.seen: list[tuple[dict[str, Any], dict[str, str]]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                message = json.loads(self.rfile.read(int(self.headers["content-length"])))
                owner.seen.append((message, dict(self.headers)))
                if "id" not in message or "method" not in message:
                    return self.reply(202, b"", "text/plain")  # a notification, an answer
                answer = owner.behaviour.get(message["method"])
                if callable(answer):
                    return answer(self, message)
                body = result_body(message, standard_result(message, owner.behaviour))
                self.reply(200, body, "application/json")

            def reply(self, status: int, body: bytes, kind: str, **headers: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.reply(405, b"", "text/plain")

            do_DELETE = do_GET

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/mcp"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def methods(self) -> list[str]:
        """The methods of the messages sent, in order (``?`` for an answer)."""
        return [message.get("method", "?") for message, _ in self.seen]

    def answers_to_the_client(self) -> int:
        """How many of the client's messages were answers (to the server's requests)."""
        return sum(1 for message, _ in self.seen if "id" in message and "method" not in message)


@contextlib.contextmanager
def serving() -> Iterator[Callable[[Behaviour], RawMcpServer]]:
    """``start(behaviour) -> RawMcpServer``; every server started is shut down on exit."""
    servers: list[RawMcpServer] = []

    def start(behaviour: Behaviour) -> RawMcpServer:
        servers.append(RawMcpServer(behaviour))
        return servers[-1]

    try:
        yield start
    finally:
        for server in servers:
            server.http.shutdown()
            server.http.server_close()
