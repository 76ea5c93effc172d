"""A structured answer keeps every number as the model wrote it, on every HTTP provider.

The Anthropic provider forces a structured answer through its ``json_answer`` tool: the
tool's ``input`` is read from the answer's body with each number kept as its text, never
through a float. Driven against Messages API and Chat Completions servers on 127.0.0.1
(non-streamed, and with the run streaming its text): the response text, the recorded call,
the task's result and the dependent's request hold ``3.14159265358979323846`` digit for
digit, and the run verifies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("anthropic", reason="the anthropic extra is not installed")

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._context.verify import verify_run
from clearance.models import ModelRequest
from clearance.models._anthropic import ANSWER_TOOL, AnthropicModel

pytestmark = pytest.mark.network

# The tool input as the server's body holds it: text no float keeps.
INPUT = (
    '{"pi": 3.14159265358979323846, "big": 123456789012345678901234567890, '
    '"count": 1.0E2, "neg_zero": -0, "neg_zero_f": -0.0, '
    '"nested": {"b": [0.1000000000000000055511151231257827, 2.5e-300], "a": "x"}}'
)
CANONICAL = """{
  "big": 123456789012345678901234567890,
  "count": 1.0E2,
  "neg_zero": -0,
  "neg_zero_f": -0.0,
  "nested": {
    "a": "x",
    "b": [
      0.1000000000000000055511151231257827,
      2.5e-300
    ]
  },
  "pi": 3.14159265358979323846
}"""
SCHEMA = {"type": "object", "required": ["pi"], "properties": {"pi": {"type": "number"}}}
USAGE = '"usage": {"input_tokens": 21, "output_tokens": 4}'


def tool_answer(tool_input: str, name: str = ANSWER_TOOL) -> bytes:
    """A Messages API body whose one block calls ``name`` with ``tool_input`` (JSON text)."""
    return (
        '{"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test", '
        f'"content": [{{"type": "tool_use", "id": "toolu_1", "name": "{name}", '
        f'"input": {tool_input}}}], "stop_reason": "tool_use", "stop_sequence": null, {USAGE}}}'
    ).encode()


def text_answer(text: str) -> bytes:
    body = {"id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 21, "output_tokens": 4}}  # fmt: skip
    return json.dumps(body).encode()


def streamed_text(text: str) -> bytes:
    """``text`` as the Messages API streams it (server-sent events)."""
    start = {"id": "msg_3", "type": "message", "role": "assistant", "model": "claude-test",
             "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": 21, "output_tokens": 1}}  # fmt: skip
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"output_tokens": 4}},
        {"type": "message_stop"},
    ]  # fmt: skip
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


class Messages:
    """A Messages API server on 127.0.0.1: ``reply(request body text) -> body bytes``.

    Keeps each request's body as the bytes it received.
    """

    def __init__(self, reply: Callable[[str], bytes]) -> None:
        self.bodies: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"])).decode()
                server.bodies.append(raw)
                streamed = json.loads(raw).get("stream") is True
                data = reply(raw)
                self.send_response(200)
                kind = "text/event-stream" if streamed else "application/json"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def messages() -> Iterator[Callable[[Callable[[str], bytes]], Messages]]:
    started: list[Messages] = []

    def start(reply: Callable[[str], bytes]) -> Messages:
        started.append(Messages(reply))
        return started[-1]

    yield start
    for server in started:
        server.close()


# -- the provider --------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_answer_tools_input_is_the_text_as_sent(messages, make_prompt, streamed) -> None:
    server = messages(lambda body: tool_answer(INPUT))
    request = ModelRequest(prompt=make_prompt(len), json_schema=SCHEMA,
                           stream=(lambda piece: None) if streamed else None)  # fmt: skip
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(request)
    # Every number as written, the members in the model's order (not through a float).
    assert response.text == INPUT
    assert response.finish_reason == "stop"
    assert response.usage.prompt_tokens == 21


async def test_a_wrapped_answer_keeps_its_numbers(messages, make_prompt) -> None:
    server = messages(lambda body: tool_answer('{"answer": [3.14159265358979323846, -0, 1E400]}'))
    schema = {"type": "array", "items": {"type": "number"}}
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(ModelRequest(prompt=make_prompt(len), json_schema=schema))
    # 1E400 is no float: kept as written, for the answer's reader to refuse by name.
    assert response.text == "[3.14159265358979323846, -0, 1E400]"


async def test_other_tool_calls_are_read_as_before(messages, make_prompt) -> None:
    # A tool call that is not the answer still reaches the tool as decoded JSON values.
    tools = ({"type": "function", "function": {"name": "measure", "description": "Measure.",
              "parameters": {"type": "object"}}},)  # fmt: skip
    server = messages(lambda body: tool_answer('{"x": 0.5, "n": 3}', name="measure"))
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(
            ModelRequest(prompt=make_prompt(len), json_schema=SCHEMA, tools=tools)
        )
    (call,) = response.tool_calls
    assert call.arguments == {"x": 0.5, "n": 3}
    assert type(call.arguments["x"]) is float and type(call.arguments["n"]) is int


# -- a run: recorded, handed on, verified ----------------------------------------------------


def team_tasks() -> tuple[Team, list[Task]]:
    team = Team(agents=(Agent(name="alpha", instructions="You answer."),))
    tasks = [
        Task(id="m", title="Measure", description="Measure it.", assignee="alpha",
             output_schema=SCHEMA),
        Task(id="u", title="Use", description="Use the measures.", assignee="alpha",
             depends_on=("m",)),
    ]  # fmt: skip
    return team, tasks


def check_run(ledger: RunLedger, run_id: str, answered: str, dependent_body: str) -> None:
    """The recorded response, the result and the dependent's request hold the exact numbers."""
    calls = {c.subject: c for c in ledger.calls(run_id)}
    assert calls["task:m"].response == answered
    results = {t.task_id: t.result for t in ledger.tasks(run_id)}
    assert results["m"] == CANONICAL
    # The dependent's request (as the server received it) holds the result byte for byte.
    assert json.dumps(CANONICAL)[1:-1] in dependent_body
    assert (
        "3.141592653589793," not in dependent_body and "3.141592653589793\\n" not in dependent_body
    )
    report = verify_run(ledger, run_id)
    assert report.ok, report.findings


@pytest.mark.parametrize("streamed", [False, True])
async def test_anthropic_run_hands_on_the_numbers_as_answered(
    messages, ledger, monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    def reply(body: str) -> bytes:
        if "Measure it." in body:
            return tool_answer(INPUT)
        return streamed_text("used") if streamed else text_answer("used")

    server = messages(reply)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    team, tasks = team_tasks()
    orchestrator = Orchestrator(team, model="anthropic:claude-test", ledger=ledger,
                                options=RunOptions(stream_text=streamed))  # fmt: skip
    result = await orchestrator.run_tasks(tasks)
    assert result.status == "completed", result
    (dependent,) = [b for b in server.bodies if "Use the measures." in b]
    check_run(ledger, result.run_id, INPUT, dependent)


@pytest.mark.parametrize("streamed", [False, True])
async def test_openai_run_hands_on_the_numbers_as_answered(
    openai_server, ledger, monkeypatch: pytest.MonkeyPatch, streamed: bool
) -> None:
    url = openai_server(lambda sent: INPUT if "Measure it." in sent[-1]["content"] else "used")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    team, tasks = team_tasks()
    orchestrator = Orchestrator(team, model="openai:m", ledger=ledger,
                                options=RunOptions(stream_text=streamed))  # fmt: skip
    result = await orchestrator.run_tasks(tasks)
    assert result.status == "completed", result
    assert any(b.get("stream") for b in url.bodies) is streamed
    (dependent,) = [b for b in url.bodies if "Use the measures." in b["messages"][-1]["content"]]
    check_run(ledger, result.run_id, INPUT, json.dumps(dependent, ensure_ascii=False))
