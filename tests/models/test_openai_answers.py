"""`OpenAIModel` against a real HTTP server on 127.0.0.1 sending answers no honest server sends.

Each answer is refused in one line naming what is wrong (never a Python error from deep
inside), a huge one without reading it whole, and tool-call arguments a tool cannot take go
on as ``{"_raw": ...}`` so the model hears a tool error.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from clearance._core.errors import ModelError
from clearance.models import ModelRequest
from clearance.models._base import MAX_ARGUMENT_DEPTH, max_response_chars
from clearance.models._http_body import max_body_bytes
from clearance.models._openai import OpenAIModel

Body = bytes | dict[str, Any] | list[Any] | None


class RawServer:
    """Answers every POST with ``body`` (JSON-encoded unless bytes); keeps what it received."""

    def __init__(self, body: Body, content_type: str = "application/json") -> None:
        received: list[dict[str, Any]] = []
        self.received = received
        sent = body if isinstance(body, bytes) else json.dumps(body).encode()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(sent)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # client gone
                    self.wfile.write(sent)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def raw_server() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(body: Body, content_type: str = "application/json") -> RawServer:
        servers.append(RawServer(body, content_type))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def completion(message: Any = None, **fields: Any) -> dict[str, Any]:
    """A chat completion whose choice 0 holds ``message`` (text "hello" by default)."""
    if message is None:
        message = {"role": "assistant", "content": "hello"}
    body = {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }  # fmt: skip
    body.update(fields)
    return body


def tool_message(function: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": function}]}  # fmt: skip


async def ask(server: RawServer, make_prompt: Any, max_tokens: int = 64) -> Any:
    async with OpenAIModel("m", base_url=server.url, api_key="k", timeout_s=30) as model:
        request = ModelRequest(prompt=make_prompt(model.count_tokens), max_tokens=max_tokens)
        return await model.request(request)


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (completion({"role": "assistant", "content": 12345}), "application/json",
         "choice 0's content is an int, not text"),
        (completion({"role": "assistant", "content": {"a": 1}}), "application/json",
         "choice 0's content is a dict, not text"),
        (completion(tool_message({"name": None, "arguments": "{}"})), "application/json",
         "tool call 0's name is null, not a tool name"),
        (completion({"role": "assistant", "content": "hi", "tool_calls": "zzz"}),
         "application/json", "tool_calls is a str, not a list"),
        (completion({"role": "assistant", "content": "hi", "tool_calls": [5]}),
         "application/json", "tool call 0 is an int, not an object"),
        (b"<html>oops</html>", "text/html",
         "the server's answer is not JSON (text/html, 17 bytes, starting '<html>oops</html>')"),
        (None, "application/json", "the server's answer is not a JSON object but null"),
        ([1, 2, 3], "application/json", "the server's answer is not a JSON object but a list"),
        (completion(choices=[{"index": 0, "finish_reason": "stop"}]), "application/json",
         "choice 0 has no message"),
        (completion(choices=[{"index": 0, "message": None}]), "application/json",
         "choice 0 has no message"),
        (completion(choices=[7]), "application/json", "choice 0 is an int, not an object"),
        (completion(choices="abc"), "application/json", "choices is a str, not a list"),
        (completion(choices=[]), "application/json", "the server returned no choices"),
        (completion(usage="lots"), "application/json", "usage is a str, not an object"),
        (completion(usage={"prompt_tokens": "5", "completion_tokens": 1}), "application/json",
         "the provider reported prompt_tokens as str '5', not an integer"),
        (b'{"choices": [{"message": {"content": "A\xff"}}]}', "application/json",
         "the server's answer is not UTF-8 (invalid start byte at byte 39)"),
    ],
)  # fmt: skip
async def test_a_malformed_answer_is_one_line_naming_what_is_wrong(
    raw_server, make_prompt, body, content_type, message
) -> None:
    server = raw_server(body, content_type)
    with pytest.raises(ModelError) as info:
        await ask(server, make_prompt)
    assert str(info.value) == f"openai:m: {message}"
    assert not info.value.transient
    assert len(server.received) == 1  # what it was sent is what it answered


@pytest.mark.parametrize("usage", [{}, {"total_tokens": 7}, None])
async def test_a_usage_without_token_counts_is_counted_locally(
    raw_server, make_prompt, usage
) -> None:
    server = raw_server(completion(usage=usage))
    response = await ask(server, make_prompt)
    assert response.text == "hello"
    assert response.usage.counted
    assert response.usage.prompt_tokens > 0
    assert response.usage.completion_tokens == 2  # "hello": one token per 4 bytes, rounded up


def _deep(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"namespace": "ns", "key": "k"}, {"namespace": "ns", "key": "k"}),  # an object: taken
        ('{"key": "k"}', {"key": "k"}),
        ("", {}),
        ("{not json", {"_raw": "{not json"}),
        ("[1, 2]", {"_raw": "[1, 2]"}),
        (_deep(50_000), {"_raw": _deep(50_000)}),  # too deep for the decoder
        (_deep(MAX_ARGUMENT_DEPTH + 1), {"_raw": _deep(MAX_ARGUMENT_DEPTH + 1)}),
        (5, {"_raw": 5}),
    ],
)
async def test_tool_arguments_a_tool_cannot_take_become_raw(
    raw_server, make_prompt, arguments, expected
) -> None:
    server = raw_server(completion(tool_message({"name": "store_get", "arguments": arguments})))
    response = await ask(server, make_prompt, max_tokens=16_000)
    (call,) = response.tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "store_get", expected)


async def test_a_body_over_the_cap_is_refused_without_reading_it_whole(
    raw_server, make_prompt
) -> None:
    cap = max_body_bytes(64)
    server = raw_server(completion({"role": "assistant", "content": "x" * (20 * cap)}))
    with pytest.raises(ModelError) as info:
        await ask(server, make_prompt, max_tokens=64)
    assert str(info.value) == (
        f"openai:m: the server's answer is over the cap of {cap:,} bytes for max_tokens=64 "
        "(max_body_bytes): refused"
    )
    assert not info.value.transient


async def test_text_over_max_response_chars_is_refused(raw_server, make_prompt) -> None:
    cap = max_response_chars(64)
    assert cap + 1 < max_body_bytes(64)  # within the body cap: the text cap refuses it
    server = raw_server(completion({"role": "assistant", "content": "x" * (cap + 1)}))
    with pytest.raises(ModelError, match=f"holds {cap + 1:,} characters, over the cap of {cap:,}"):
        await ask(server, make_prompt, max_tokens=64)


async def test_a_streamed_answer_over_max_response_chars_is_refused(
    openai_server, make_prompt
) -> None:
    cap = max_response_chars(16)
    url = openai_server(lambda messages: iter(["x" * 40_000, "y" * 40_000]))
    heard: list[str] = []
    async with OpenAIModel("m", base_url=url, api_key="k", timeout_s=30) as model:
        request = ModelRequest(
            prompt=make_prompt(model.count_tokens), max_tokens=16, stream=heard.append
        )
        with pytest.raises(ModelError, match=f"streamed more than {cap:,} characters"):
            await model.request(request)
    assert heard == ["x" * 40_000]  # the piece over the cap is never handed on


# -- an answer refused by the provider was paid for: its usage goes with the error -----------


async def test_a_refused_answer_carries_the_usage_its_server_reported(
    raw_server, make_prompt
) -> None:
    cap = max_response_chars(64)
    body = completion({"role": "assistant", "content": "x" * (cap + 1)},
                      usage={"prompt_tokens": 30, "completion_tokens": 900})  # fmt: skip
    with pytest.raises(ModelError) as info:
        await ask(raw_server(body), make_prompt, max_tokens=64)
    assert (info.value.paid.prompt_tokens, info.value.paid.completion_tokens) == (30, 900)
    # No usage reported, or an impossible one: nothing to charge.
    unreported = completion({"role": "assistant", "content": "x" * (cap + 1)}, usage=None)
    with pytest.raises(ModelError) as info:
        await ask(raw_server(unreported), make_prompt, max_tokens=64)
    assert info.value.paid is None


async def test_a_run_charges_an_answer_its_provider_refused(
    raw_server, make_prompt, tmp_path
) -> None:
    from clearance import Agent, RunLedger
    from clearance._agents.budget_meter import BudgetMeter
    from clearance._agents.caller import ModelCaller
    from clearance._core.budget import RunBudget

    paid = {"prompt_tokens": 30, "completion_tokens": 900}
    # Refused for a malformed tool call (not for its size).
    server = raw_server(completion(tool_message({"name": None, "arguments": "{}"}), usage=paid))
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        ledger.start_run(run_id="run-1", team="t", goal=None, graph=None, config={})
        meter = BudgetMeter(RunBudget(tokens=10_000), run_id="run-1")
        caller = ModelCaller(ledger=ledger, run_id="run-1", meter=meter)
        async with OpenAIModel("m", base_url=server.url, api_key="k", timeout_s=30) as model:
            with pytest.raises(ModelError, match="tool call 0's name is null"):
                await caller.call(subject="task:t", agent=Agent(name="a", instructions="A."),
                                  model=model, prompt=make_prompt(model.count_tokens))  # fmt: skip
        assert meter.tokens == 930 and caller.usage.completion_tokens == 900
        (call,) = ledger.calls("run-1")
        assert call.error and (call.usage.prompt_tokens, call.usage.completion_tokens) == (30, 900)
