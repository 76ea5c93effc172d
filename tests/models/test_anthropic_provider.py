"""`AnthropicModel` against a Messages API server on loopback that answers written responses."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

pytest.importorskip("anthropic", reason="the anthropic extra is not installed")

from clearance import Agent, Orchestrator, Task, TaskStatus, Team
from clearance._context.verify import verify_run
from clearance._core.errors import ConfigError, ModelError
from clearance.models import ChatModel, ModelRequest, ToolCall, get_model
from clearance.models._anthropic import ANSWER_TOOL, AnthropicModel, to_anthropic_messages
from clearance.models._base import MAX_ARGUMENT_DEPTH, max_response_chars
from clearance.models._http_body import max_body_bytes

pytestmark = pytest.mark.network

Reply = tuple[int, dict[str, str], Any]  # status, headers, JSON body, raw bytes or "trickle"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class MessagesServer:
    """A Messages API server on 127.0.0.1: answers from ``replies`` (in order; the last
    one repeats), records every request it got."""

    url: str = ""
    replies: list[Reply | Callable[[dict[str, Any]], Reply]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        return reply(body) if callable(reply) else reply


def sent_key(headers: dict[str, str]) -> str | None:
    """The API key a request carried (SDK releases differ: ``x-api-key`` or a bearer token)."""
    if "x-api-key" in headers:
        return headers["x-api-key"]
    return headers.get("authorization", "").removeprefix("Bearer ") or None


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    usage: dict[str, Any] | None = None,
) -> Reply:
    return (
        200,
        {},
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage if usage is not None else {"input_tokens": 21, "output_tokens": 4},
        },
    )


def text(answer: str, **kwargs: Any) -> Reply:
    return message([{"type": "text", "text": answer}], **kwargs)


def error(status: int, kind: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": f"{kind} says no"}}
    return (status, headers or {}, body)


def _handler(server: MessagesServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(size) or b"{}")
            with server.lock:
                server.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
            status, headers, payload = server.next_reply(body)
            if payload == "trickle":
                self._trickle()
                return
            if body.get("stream") and status == 200:
                self._stream(payload)
                return
            raw = isinstance(payload, bytes)  # a body sent as it is (``Content-Type`` in headers)
            data = payload if raw else json.dumps(payload).encode()
            self.send_response(status)
            if not raw:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, payload: dict[str, Any]) -> None:
            # The message as server-sent events: each text block word by word, usage last.
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()

            def send(data: dict[str, Any]) -> None:
                self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

            start = {**payload, "content": [], "stop_reason": None,
                     "usage": {**payload["usage"], "output_tokens": 1}}  # fmt: skip
            send({"type": "message_start", "message": start})
            for i, block in enumerate(payload["content"]):
                send({"type": "content_block_start", "index": i,
                      "content_block": {"type": "text", "text": ""}})  # fmt: skip
                for word in re.findall(r"\S+\s*", block["text"]):
                    send({"type": "content_block_delta", "index": i,
                          "delta": {"type": "text_delta", "text": word}})  # fmt: skip
                send({"type": "content_block_stop", "index": i})
            delta = {"stop_reason": payload["stop_reason"], "stop_sequence": None}
            usage = {"output_tokens": payload["usage"]["output_tokens"]}
            send({"type": "message_delta", "delta": delta, "usage": usage})
            send({"type": "message_stop"})

        def _trickle(self) -> None:
            # A valid start, then one byte every 50 ms: each read succeeds, the answer never ends.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                self.wfile.write(b'{"id": "msg_1", "content": [')
                for _ in range(200):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass

    return Handler


@pytest.fixture
def server() -> Iterator[MessagesServer]:
    state = MessagesServer(replies=[text("Hello from Claude.")])
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "store_get",
            "description": "Read a key.",
            "parameters": {
                "type": "object",
                "properties": {"namespace": {"type": "string"}, "key": {"type": "string"}},
                "required": ["namespace", "key"],
            },
        },
    },
)


# -- text ----------------------------------------------------------------------------------


async def test_text_answer_and_the_request_it_sent(server: MessagesServer, make_prompt) -> None:
    async with AnthropicModel("claude-test", base_url=server.url, api_key="sk-test") as model:
        assert isinstance(model, ChatModel)
        prompt = make_prompt(model.count_tokens)
        response = await model.request(
            ModelRequest(prompt=prompt, max_tokens=77, temperature=0.3, top_p=0.9, stop=("END",))
        )

    assert response.text == "Hello from Claude."
    assert response.model_id == "anthropic:claude-test"
    assert response.finish_reason == "stop"
    assert response.tool_calls == ()
    assert response.usage.to_dict() == {
        "requests": 1,
        "prompt_tokens": 21,
        "completion_tokens": 4,
        "cached_prompt_tokens": None,
    }

    [got] = server.received
    assert got.path == "/v1/messages"
    assert sent_key(got.headers) == "sk-test"
    assert "anthropic-version" in got.headers
    body = got.body
    system = [m.content for m in prompt.messages if m.role == "system"]
    user = [m.content for m in prompt.messages if m.role == "user"]
    assert body["system"] == "\n\n".join(system)
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": t} for t in user]}
    ]
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 77
    assert body["temperature"] == 0.3
    assert body["top_p"] == 0.9
    assert body["stop_sequences"] == ["END"]
    assert "tools" not in body and "tool_choice" not in body
    # Only the prompt's own text was sent: no message of any other origin.
    sent = body["system"] + "".join(b["text"] for m in body["messages"] for b in m["content"])
    assert sent == "".join(m.content for m in prompt.messages)


async def test_max_tokens_stop_is_length(server: MessagesServer, make_prompt) -> None:
    server.replies = [text("Hel", stop_reason="max_tokens")]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(ModelRequest(prompt=make_prompt(len), max_tokens=1))
    assert (response.text, response.finish_reason) == ("Hel", "length")
    # No key configured: a server at an explicit base URL gets the placeholder.
    assert sent_key(server.received[0].headers) == "unused"


def test_roles_alternate_and_consecutive_messages_are_blocks(make_prompt) -> None:
    from clearance._core.prompt import ChatMessage

    prompt = make_prompt(len)
    extra = (
        ChatMessage(role="user", content="second"),
        ChatMessage(role="assistant", content="reply"),
        ChatMessage(role="assistant", content=""),
        ChatMessage(role="system", content="late rule"),
    )
    object.__setattr__(prompt, "messages", (*prompt.messages, *extra))
    system, messages = to_anthropic_messages(prompt)
    assert system.endswith("\n\nlate rule")
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"][-1] == {"type": "text", "text": "second"}
    assert messages[1]["content"] == [{"type": "text", "text": "reply"}]


# -- tools ---------------------------------------------------------------------------------


async def test_tools_are_sent_natively_and_tool_use_becomes_tool_calls(
    server: MessagesServer, make_prompt
) -> None:
    server.replies = [
        message(
            [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "store_get",
                 "input": {"namespace": "notes", "key": "k"}},
                {"type": "tool_use", "id": "toolu_2", "name": "store_get",
                 "input": "not an object"},
            ],
            stop_reason="tool_use",
        )
    ]  # fmt: skip
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(ModelRequest(prompt=make_prompt(len), tools=TOOLS))

    assert response.tool_calls == (
        ToolCall(id="toolu_1", name="store_get", arguments={"namespace": "notes", "key": "k"}),
        ToolCall(id="toolu_2", name="store_get", arguments={"_raw": "not an object"}),
    )
    assert response.finish_reason == "tool_calls"
    body = server.received[0].body
    assert body["tools"] == [
        {
            "name": "store_get",
            "description": "Read a key.",
            "input_schema": TOOLS[0]["function"]["parameters"],
        }
    ]
    assert body["tool_choice"] == {"type": "auto"}


# -- structured output -----------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"colour": {"type": "string"}, "confidence": {"type": "integer"}},
    "required": ["colour", "confidence"],
}


async def test_json_schema_forces_the_answer_tool_and_returns_its_input(
    server: MessagesServer, make_prompt
) -> None:
    server.replies = [
        message(
            [{"type": "tool_use", "id": "toolu_9", "name": ANSWER_TOOL,
              "input": {"colour": "blue", "confidence": 9}}],
            stop_reason="tool_use",
        )
    ]  # fmt: skip
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(ModelRequest(prompt=make_prompt(len), json_schema=SCHEMA))

    assert json.loads(response.text) == {"colour": "blue", "confidence": 9}
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    body = server.received[0].body
    assert body["tools"] == [
        {
            "name": ANSWER_TOOL,
            "description": body["tools"][0]["description"],
            "input_schema": SCHEMA,
        }
    ]
    assert body["tool_choice"] == {"type": "tool", "name": ANSWER_TOOL}


async def test_non_object_schema_is_wrapped_and_unwrapped(
    server: MessagesServer, make_prompt
) -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    server.replies = [
        message([{"type": "tool_use", "id": "t", "name": ANSWER_TOOL, "input": {"answer": ["a"]}}])
    ]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(ModelRequest(prompt=make_prompt(len), json_schema=schema))
    assert json.loads(response.text) == ["a"]
    sent = server.received[0].body["tools"][0]["input_schema"]
    assert sent == {"type": "object", "properties": {"answer": schema}, "required": ["answer"]}


async def test_answer_without_the_forced_tool_is_refused(
    server: MessagesServer, make_prompt
) -> None:
    server.replies = [text("Sure! Here is some JSON: {}")]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError, match="did not call the 'json_answer' tool") as info:
            await model.request(ModelRequest(prompt=make_prompt(len), json_schema=SCHEMA))
    assert not info.value.transient


# -- hostile answers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 10**12, "output_tokens": 1},
        {"input_tokens": -5, "output_tokens": 1},
        {"input_tokens": 3, "output_tokens": "many"},
        {"input_tokens": 3.5, "output_tokens": 1},
        {"input_tokens": True, "output_tokens": 1},
    ],
)
async def test_absurd_usage_is_refused(server: MessagesServer, make_prompt, usage) -> None:
    server.replies = [text("fine", usage=usage)]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError, match="the provider reported") as info:
            await model.request(ModelRequest(prompt=make_prompt(len)))
    assert not info.value.transient
    assert info.value.model_id == "anthropic:claude-test"


async def test_answer_without_content_is_refused(server: MessagesServer, make_prompt) -> None:
    server.replies = [(200, {}, {"id": "m", "type": "message", "content": "just text"})]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError, match="no content list"):
            await model.request(ModelRequest(prompt=make_prompt(len)))


# -- errors and deadlines ------------------------------------------------------------------


async def test_429_is_transient_with_retry_after(server: MessagesServer, make_prompt) -> None:
    server.replies = [error(429, "rate_limit_error", {"Retry-After": "7"})]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError, match="HTTP 429") as info:
            await model.request(ModelRequest(prompt=make_prompt(len)))
    assert info.value.transient
    assert info.value.retry_after_s == 7.0
    assert info.value.status_code == 429
    assert len(server.received) == 1  # the SDK does not retry by itself


@pytest.mark.parametrize(("status", "transient"), [(529, True), (500, True), (400, False)])
async def test_status_decides_transient(
    server: MessagesServer, make_prompt, status: int, transient: bool
) -> None:
    server.replies = [error(status, "some_error")]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError, match=f"HTTP {status}") as info:
            await model.request(ModelRequest(prompt=make_prompt(len)))
    assert info.value.transient is transient
    assert info.value.status_code == status


async def test_trickling_server_is_cut_at_the_deadline(server: MessagesServer, make_prompt) -> None:
    server.replies = [(200, {}, "trickle")]
    async with AnthropicModel("claude-test", base_url=server.url, timeout_s=30.0) as model:
        started = time.monotonic()
        with pytest.raises(ModelError, match="timed out") as info:
            await model.request(ModelRequest(prompt=make_prompt(len), timeout_s=0.6))
        elapsed = time.monotonic() - started
    assert info.value.transient
    assert elapsed < 3.0


async def test_nothing_listening_is_transient(make_prompt) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with AnthropicModel("claude-test", base_url=f"http://127.0.0.1:{port}") as model:
        with pytest.raises(ModelError, match="cannot reach") as info:
            await model.request(ModelRequest(prompt=make_prompt(len)))
    assert info.value.transient


# -- token counts --------------------------------------------------------------------------


async def test_count_tokens_is_a_local_estimate_and_the_server_counts_exactly(
    server: MessagesServer, make_prompt
) -> None:
    server.replies = [(200, {}, {"input_tokens": 42})]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        assert model.count_tokens("") == 0
        assert model.count_tokens("hello world") == 2  # cl100k_base
        prompt = make_prompt(model.count_tokens)
        assert await model.count_prompt_tokens(ModelRequest(prompt=prompt, tools=TOOLS)) == 42
        server.replies = [(200, {}, {"input_tokens": 10**12})]
        with pytest.raises(ModelError, match="outside"):
            await model.count_prompt_tokens(ModelRequest(prompt=prompt))
    got = server.received[0]
    assert got.path == "/v1/messages/count_tokens"
    assert got.body["tools"][0]["name"] == "store_get"
    assert got.body["messages"][0]["role"] == "user"


# -- configuration -------------------------------------------------------------------------


def test_missing_key_without_base_url_is_config_error() -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        get_model("anthropic:claude-test")


async def test_streamed_answer_is_the_same_response(server: MessagesServer, make_prompt) -> None:
    server.replies = [text("Hello from a streaming Claude.")]
    pieces: list[str] = []
    async with AnthropicModel("claude-test", base_url=server.url, api_key="sk-test") as model:
        prompt = make_prompt(model.count_tokens)
        response = await model.request(ModelRequest(prompt=prompt, stream=pieces.append))
    assert pieces == ["Hello ", "from ", "a ", "streaming ", "Claude."]
    assert response.text == "Hello from a streaming Claude."
    assert response.finish_reason == "stop"
    assert response.usage.to_dict() == {
        "requests": 1,
        "prompt_tokens": 21,
        "completion_tokens": 4,
        "cached_prompt_tokens": None,
    }
    assert server.received[-1].body["stream"] is True


@pytest.mark.parametrize("window", [0, -1, True, 1.5])
def test_bad_context_window_is_config_error(window: Any) -> None:
    with pytest.raises(ConfigError, match="context_window"):
        AnthropicModel("claude-test", base_url="http://127.0.0.1:9", context_window=window)


def test_missing_package_is_one_line_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "anthropic" else real(name)
    )
    with pytest.raises(ConfigError, match=r"pip install 'clearance\[anthropic\]'") as info:
        get_model("anthropic:claude-test")
    assert "\n" not in str(info.value)


async def test_environment_gives_base_url_and_key(
    server: MessagesServer, make_prompt, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")
    model = get_model("anthropic:claude-test", context_window=200_000)
    assert isinstance(model, AnthropicModel) and model.context_window == 200_000
    await model.request(ModelRequest(prompt=make_prompt(len)))
    await model.aclose()
    assert sent_key(server.received[0].headers) == "sk-env"


# -- an orchestrated run -------------------------------------------------------------------


async def test_orchestrated_run_completes_and_verifies(
    server: MessagesServer, ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env")

    def answer(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]["content"][-1]["text"]
        return text("RESEARCHED" if "Collect" in last else "FINAL ANSWER")

    server.replies = [answer]
    team = Team(
        agents=[
            Agent(name="researcher", instructions="You collect facts."),
            Agent(name="writer", instructions="You write."),
        ]
    )
    tasks = [
        Task(id="facts", title="Collect", description="Collect facts.", assignee="researcher"),
        Task(id="write", title="Write", description="Write it up.", assignee="writer",
             depends_on=("facts",)),
    ]  # fmt: skip
    orchestrator = Orchestrator(team, model="anthropic:claude-test", ledger=ledger)
    result = await orchestrator.run_tasks(tasks)

    assert result.tasks["facts"].status is TaskStatus.COMPLETED, result.tasks["facts"].error
    assert result.tasks["write"].status is TaskStatus.COMPLETED, result.tasks["write"].error
    assert result.tasks["facts"].result == "RESEARCHED"
    assert len(server.received) >= 2
    assert all(r.path == "/v1/messages" for r in server.received)
    # The writer saw the researcher's result; every call was recorded and verifies.
    writer_calls = [r for r in server.received if "Write it up." in json.dumps(r.body)]
    assert writer_calls and "RESEARCHED" in json.dumps(writer_calls[0].body)
    assert verify_run(ledger, result.run_id).ok


def test_cli_run_without_a_key_is_a_one_line_error(tmp_path) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from clearance.cli import app

    # Not the main job's team file: its reviewers' repeat_penalty (an embedded-model
    # setting) is refused first for an anthropic: model, which has none.
    example = Path(__file__).parents[2] / "examples" / "code_review.yaml"
    team = tmp_path / "team.yaml"
    team.write_text(example.read_text().replace("repeat_penalty:", "temperature:"))
    args = ["run", str(team), "--model", "anthropic:claude-test",
            "--db", f"sqlite:///{tmp_path}/r.db"]  # fmt: skip
    result = CliRunner().invoke(app, args, env={"ANTHROPIC_API_KEY": ""})
    assert result.exit_code == 2, result.output
    assert "ANTHROPIC_API_KEY" in result.output
    assert "Traceback" not in result.output


# -- answers no honest server sends ---------------------------------------------------------


@pytest.mark.parametrize("usage", ["lots", 7, [1, 2]])
async def test_a_usage_that_is_not_an_object_is_refused(
    server: MessagesServer, make_prompt, usage
) -> None:
    server.replies = [text("fine", usage=usage)]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError) as info:
            await model.request(ModelRequest(prompt=make_prompt(len)))
    assert str(info.value).startswith("anthropic:claude-test: usage is a")
    assert str(info.value).endswith(", not an object")


@pytest.mark.parametrize("usage", [{}, {"input_tokens": 21}, {"output_tokens": 4}])
async def test_a_usage_without_both_counts_is_counted_locally(
    server: MessagesServer, make_prompt, usage
) -> None:
    server.replies = [text("fine", usage=usage)]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(ModelRequest(prompt=make_prompt(model.count_tokens)))
    assert response.text == "fine"
    assert response.usage.counted
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens == 1  # "fine", by cl100k_base


async def test_text_over_max_response_chars_is_refused(server: MessagesServer, make_prompt) -> None:
    cap = max_response_chars(16)
    server.replies = [text("x" * (cap + 1))]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError) as info:
            await model.request(ModelRequest(prompt=make_prompt(len), max_tokens=16))
    assert f"holds {cap + 1:,} characters, over the cap of {cap:,} for max_tokens=16" in str(
        info.value
    )


async def test_a_refused_answer_carries_the_usage_its_server_reported(
    server: MessagesServer, make_prompt
) -> None:
    cap = max_response_chars(16)
    server.replies = [message([{"type": "text", "text": "x" * (cap + 1)}],
                              usage={"input_tokens": 30, "output_tokens": 900})]  # fmt: skip
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError) as info:
            await model.request(ModelRequest(prompt=make_prompt(len), max_tokens=16))
    assert (info.value.paid.prompt_tokens, info.value.paid.completion_tokens) == (30, 900)


async def test_tool_input_nested_too_deep_becomes_raw(server: MessagesServer, make_prompt) -> None:
    deep: Any = 1
    for _ in range(MAX_ARGUMENT_DEPTH + 1):
        deep = {"a": deep}
    block = {"type": "tool_use", "id": "tu_1", "name": "store_get", "input": deep}
    server.replies = [message([block], stop_reason="tool_use")]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        response = await model.request(ModelRequest(prompt=make_prompt(len), tools=TOOLS))
    (call,) = response.tool_calls
    assert call.arguments == {"_raw": f"(arguments nested deeper than {MAX_ARGUMENT_DEPTH} levels)"}


async def test_a_body_over_max_body_bytes_is_refused_while_it_arrives(
    server: MessagesServer, make_prompt
) -> None:
    """The body is read capped: 8 MB of text for ``max_tokens=16`` is refused, not held whole."""
    cap = max_body_bytes(16)
    body = json.dumps({"content": [{"type": "text", "text": "x" * 8_000_000}]}).encode()
    server.replies = [(200, {"Content-Type": "application/json"}, body)]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError) as info:
            await model.request(ModelRequest(prompt=make_prompt(len), max_tokens=16))
    assert str(info.value).endswith(
        f"the server's answer is over the cap of {cap:,} bytes for max_tokens=16 "
        "(max_body_bytes): refused"
    )
    assert not info.value.transient


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b"<html>busy</html>", "text/html", "the server's answer is not JSON (text/html, 17 bytes"),
        (b"[1, 2]", "application/json", "the server's answer is not a JSON object but a list"),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", "the server's answer is not JSON"),
        (b'{"content": "hi"}', "application/json", "the server's answer has no content list"),
        (b'{"content": "\xff"}', "application/json", "the server's answer is not UTF-8"),
    ],
)
async def test_an_unusable_body_is_a_one_line_model_error(
    server: MessagesServer, make_prompt, body: bytes, content_type: str, expected: str
) -> None:
    server.replies = [(200, {"Content-Type": content_type}, body)]
    async with AnthropicModel("claude-test", base_url=server.url) as model:
        with pytest.raises(ModelError) as info:
            await model.request(ModelRequest(prompt=make_prompt(len), max_tokens=16))
    assert expected in str(info.value)
    assert "\n" not in str(info.value)
