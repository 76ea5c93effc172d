"""Reading a (non-streamed) OpenAI chat completion from the server's bytes, checked field by field.

The server is untrusted, and the SDK does not validate what it sends (its objects are built
without validation), so the body is read here, capped in bytes while it arrives, decoded as
JSON and checked: every field a later step reads has the type it needs, or the call fails
with a one-line `ModelError` naming the field (``"choice 0 has no message"``, ``"choice 0's
content is an int, not text"``...). Tool-call arguments a tool cannot take go on as
``{"_raw": ...}`` (`decoded_arguments`), so the model hears a tool error instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clearance._core.errors import ModelError
from clearance.models._base import (
    MAX_REPORTED_TOKENS,
    ModelResponse,
    ToolCall,
    Usage,
    arguments_size,
    check_response_size,
    decoded_arguments,
    kind_of,
    validated_usage,
)
from clearance.models._cache import reported_cached_tokens
from clearance.models._finish import bounded_finish_reason
from clearance.models._http_body import json_object
from clearance.models._openai_stream import MAX_STREAMED_TOOL_CALLS

__all__ = ["ParsedCompletion", "parse_completion"]


@dataclass(frozen=True, slots=True)
class ParsedCompletion:
    """A checked completion; ``usage_reported`` is false when the server gave no token counts."""

    response: ModelResponse
    usage_reported: bool


def parse_completion(
    body: bytes, *, content_type: str, model_id: str, max_tokens: int
) -> ParsedCompletion:
    """The `ModelResponse` in a chat-completion body, every field read checked.

    Usage: an absent or ``null`` ``usage``, or one without ``prompt_tokens`` or
    ``completion_tokens``, is unreported (``usage_reported`` false: the caller counts the
    tokens itself); a ``usage`` that is not an object, or a count that is not a token count
    (`validated_usage`; ``total_tokens``, read nowhere, absent or ``null`` too, as a
    streamed answer's is), is refused.

    Args:
        body: The body as received.
        content_type: Its ``Content-Type`` header, named when the body is not JSON.
        model_id: The ``"provider:name"`` id, for errors and the response.
        max_tokens: The request's ``max_tokens``: the answer's text and tool calls may hold
            at most `max_response_chars` of it.

    Returns:
        Choice 0's text (``""`` for none), tool calls in order, finish reason, and usage.

    Raises:
        ModelError: The body is not JSON or not a JSON object; it has no choice; choice 0 or
            its message, content, tool calls, a tool call's function or name, or the usage
            has the wrong type; more than `MAX_STREAMED_TOOL_CALLS` tool calls; the answer is
            longer than `max_response_chars`. Not transient. Refused with a reported usage
            that is a token count, the error's ``paid`` holds that usage.
    """
    data = json_object(body, content_type=content_type, model_id=model_id)
    usage, reported = _usage(data, model_id)
    try:
        message = _message(data, model_id)
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise ModelError(
                f"choice 0's content is {kind_of(content)}, not text", model_id=model_id
            )
        text = content or ""
        calls, arguments_chars = _tool_calls(message.get("tool_calls"), model_id)
        check_response_size(len(text) + arguments_chars, max_tokens, model_id=model_id)
    except ModelError as exc:  # the answer arrived: what its server says it cost is paid
        exc.paid = usage if reported else None
        raise
    finish = data["choices"][0].get("finish_reason")
    response = ModelResponse(
        text=text,
        tool_calls=calls,
        usage=usage,
        model_id=model_id,
        finish_reason=bounded_finish_reason(finish) if isinstance(finish, str) else None,
    )
    return ParsedCompletion(response, reported)


def _message(data: dict[str, Any], model_id: str) -> dict[str, Any]:
    """Choice 0's message, checked to be an object."""
    choices = data.get("choices")
    if choices is None or choices == []:
        raise ModelError("the server returned no choices", model_id=model_id)
    if not isinstance(choices, list):
        raise ModelError(f"choices is {kind_of(choices)}, not a list", model_id=model_id)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise ModelError(f"choice 0 is {kind_of(choice)}, not an object", model_id=model_id)
    message = choice.get("message")
    if message is None:
        raise ModelError("choice 0 has no message", model_id=model_id)
    if not isinstance(message, dict):
        raise ModelError(
            f"choice 0's message is {kind_of(message)}, not an object", model_id=model_id
        )
    return message


def _tool_calls(value: object, model_id: str) -> tuple[tuple[ToolCall, ...], int]:
    """The message's tool calls, and the characters of their names and arguments."""
    if value is None:
        return (), 0
    if not isinstance(value, list):
        raise ModelError(f"tool_calls is {kind_of(value)}, not a list", model_id=model_id)
    if len(value) > MAX_STREAMED_TOOL_CALLS:
        raise ModelError(
            f"the server's answer asks for {len(value):,} tool calls, more than "
            f"{MAX_STREAMED_TOOL_CALLS}",
            model_id=model_id,
        )
    calls: list[ToolCall] = []
    chars = 0
    for i, call in enumerate(value):
        if not isinstance(call, dict):
            raise ModelError(f"tool call {i} is {kind_of(call)}, not an object", model_id=model_id)
        function = call.get("function")
        if not isinstance(function, dict):
            raise ModelError(
                f"tool call {i} has no function object ({kind_of(function)})", model_id=model_id
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ModelError(
                f"tool call {i}'s name is {kind_of(name) if name != '' else 'empty'}, not a "
                "tool name",
                model_id=model_id,
            )
        raw = function.get("arguments")
        chars += len(name) + arguments_size(raw)
        call_id = call.get("id")
        calls.append(
            ToolCall(
                id=call_id if isinstance(call_id, str) and call_id else f"call_{i}",
                name=name,
                arguments=decoded_arguments(raw),
            )
        )
    return tuple(calls), chars


def _usage(data: dict[str, Any], model_id: str) -> tuple[Usage, bool]:
    """The checked usage, and whether the server reported it at all."""
    usage = data.get("usage")
    if usage is None:
        return Usage(requests=1), False
    if not isinstance(usage, dict):
        raise ModelError(f"usage is {kind_of(usage)}, not an object", model_id=model_id)
    _check_total(usage.get("total_tokens"), model_id)
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if prompt is None or completion is None:  # not reported: counted by the caller
        return Usage(requests=1), False
    checked = validated_usage(
        prompt, completion, model_id=model_id, cached_prompt_tokens=reported_cached_tokens(data)
    )
    return checked, True


def _check_total(total: object, model_id: str) -> None:
    """Refuse a ``total_tokens`` that is neither ``None`` nor a token count.

    Nothing reads it, but a streamed answer's is refused when it is not a count
    (`RawStreamUsage`), so a whole answer's is too, in `validated_usage`'s words.
    """
    if total is None:
        return
    shown = repr(total)
    shown = shown if len(shown) <= 40 else f"{shown[:37]}..."
    if isinstance(total, bool) or not isinstance(total, int):
        raise ModelError(
            f"the provider reported total_tokens as {type(total).__name__} {shown}, not an integer",
            model_id=model_id,
        )
    if not 0 <= total <= MAX_REPORTED_TOKENS:
        raise ModelError(
            f"the provider reported total_tokens={shown}, outside 0..{MAX_REPORTED_TOKENS}",
            model_id=model_id,
        )
