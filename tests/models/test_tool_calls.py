"""Tool calls through the providers: OpenAI natively (`tools`), llama.cpp by a JSON schema."""

from __future__ import annotations

import json
from typing import Any

import openai

try:  # the HTTP client package the installed openai SDK is built on
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx  # type: ignore[no-redef]

from clearance.models import ModelRequest, ToolCall
from clearance.models._llama_cpp import tool_choice_schema
from clearance.models._openai import OpenAIModel

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "store_get",
            "description": "Read.",
            "parameters": {
                "type": "object",
                "properties": {"namespace": {"type": "string"}, "key": {"type": "string"}},
                "required": ["namespace", "key"],
            },
        },
    },
)


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


async def test_openai_sends_tools_natively_and_parses_tool_calls(make_prompt) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "store_get",
                              "arguments": '{"namespace": "notes", "key": "k"}'}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "store_get", "arguments": "not json"}},
            ],
        }  # fmt: skip
        return httpx.Response(200, json=_completion(message))

    client = openai.AsyncOpenAI(
        api_key="x",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )
    model = OpenAIModel("m", client=client)
    prompt = make_prompt(len)
    response = await model.request(ModelRequest(prompt=prompt, tools=TOOLS))
    assert seen[0]["tools"] == list(TOOLS)
    assert seen[0]["messages"] == prompt.to_dicts()
    assert response.tool_calls == (
        ToolCall(id="call_1", name="store_get", arguments={"namespace": "notes", "key": "k"}),
        ToolCall(id="call_2", name="store_get", arguments={"_raw": "not json"}),
    )
    # Without tools, none are sent.
    await model.request(ModelRequest(prompt=prompt))
    assert "tools" not in seen[1]
    await client.close()


def test_tool_choice_schema_offers_each_tool_or_an_answer() -> None:
    schema = tool_choice_schema(TOOLS)
    options = schema["anyOf"]
    assert options[0]["properties"]["tool"] == {"const": "store_get"}
    assert options[0]["properties"]["arguments"] == TOOLS[0]["function"]["parameters"]
    assert options[-1]["required"] == ["answer"]
