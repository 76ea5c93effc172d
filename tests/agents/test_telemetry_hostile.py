"""Spans of a call to a hostile model server: what it chooses stays off them by default.

The server is a real HTTP server on 127.0.0.1 speaking the OpenAI chat API, reached through
the real provider. Its ``finish_reason`` is any text it likes: it used to go on the span as
it came (by default, where no completion text may go), so a server could put the prompt it
was sent, or megabytes, into the telemetry backend.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from clearance import Agent
from clearance._agents import telemetry
from clearance._agents.caller import ModelCaller
from clearance._agents.telemetry import span_id
from clearance._context.builder import ContextBuilder
from clearance._context.isolated import IsolatedContext
from clearance.models._openai import OpenAIModel

pytest.importorskip("opentelemetry.sdk.trace")

ECHOED = "PROMPT-SECRET echoed by the server " * 1000
KEPT = ECHOED[:61] + "..."  # what the provider keeps of it (`bounded_finish_reason`)


@pytest.fixture
def hostile_server() -> Iterator[str]:
    """An OpenAI-compatible server whose every answer has ``ECHOED`` as its finish reason."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({
                "id": "x", "object": "chat.completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "finish_reason": ECHOED,
                             "message": {"role": "assistant", "content": "fine"}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
            }).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


async def call(url: str) -> None:
    agent = Agent(name="a", instructions="You are A.")
    context = IsolatedContext(task_id="t7", task_description="PROMPT-SECRET")
    prompt = ContextBuilder(count_tokens=len).build_isolated_prompt(context, agent=agent)
    model = OpenAIModel("m", base_url=url, api_key="test")
    try:
        response = await ModelCaller().call(
            subject="isolated:t7", agent=agent, model=model, prompt=prompt
        )
    finally:
        await model.aclose()
    assert response.text == "fine"


async def test_a_finish_reason_the_server_made_up_is_a_digest_on_the_span(
    hostile_server, spans, monkeypatch
):
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT_ENV, raising=False)
    await call(hostile_server)
    (span,) = spans()
    # The provider keeps at most 64 characters of it; even those go on the span as a digest.
    assert span.attributes["gen_ai.response.finish_reasons"] == (span_id(KEPT),)
    assert all("SECRET" not in str(value) for value in span.attributes.values())


async def test_with_content_capture_the_finish_reason_is_shown_as_sent(
    hostile_server, spans, monkeypatch
):
    monkeypatch.setenv(telemetry.CAPTURE_CONTENT_ENV, "1")
    await call(hostile_server)
    (span,) = spans()
    assert span.attributes["gen_ai.response.finish_reasons"] == (KEPT,)  # as recorded
