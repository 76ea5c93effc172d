"""Reading an Anthropic Messages API answer into a `ModelResponse`.

The answer is the JSON object of a non-streamed body (read capped by the provider) or the
SDK's final message of a stream. Neither is validated by the SDK, so every field read here
is checked: the content list, each block's type, text and tool input, the usage and the
answer's size. A structured answer (the forced answer tool's input) is written back as the
model wrote it, each number digit for digit (`exact_content`): never through a float.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import InvalidOperation
from enum import StrEnum
from typing import Any

from clearance._core.errors import ModelError
from clearance._core.json_answer import JSONNumber, dumps_answer
from clearance.models._base import (
    ModelResponse,
    ToolCall,
    Usage,
    check_response_size,
    checked_arguments,
    kind_of,
    validated_usage,
)
from clearance.models._cache import anthropic_prompt_tokens, field_of
from clearance.models._finish import bounded_finish_reason
from clearance.models._openai_stream import MAX_STREAMED_TOOL_CALLS
from clearance.models._stream_events import malformed_event

__all__ = ["StreamedInputs", "anthropic_response", "exact_content", "streamed_error"]


class _Block(StrEnum):
    """The types of an Anthropic response's content blocks this adapter reads."""

    TEXT = "text"
    TOOL_USE = "tool_use"


_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def exact_content(body: bytes) -> list[Any] | None:
    """The content list of a non-streamed answer's ``body``, each number kept as written.

    A number with a fraction or exponent (and ``-0``) is a `JSONNumber`, whose text is what
    the body holds; an integer is an `int` (exact). ``None`` when the body cannot be read so
    (no content list, a number the decimal module cannot hold, nesting too deep): the
    answer is then written from the values as the body was read for the rest.
    """
    try:
        data = json.loads(body, parse_float=JSONNumber, parse_int=_exact_integer)
    except (ValueError, RecursionError, InvalidOperation):  # 1e9999999999999999999: no Decimal
        return None
    content = data.get("content") if isinstance(data, dict) else None
    return content if isinstance(content, list) else None


def _exact_integer(text: str) -> int | JSONNumber:
    """A JSON integer: an `int`, except ``-0``, kept as written (an `int` has no sign of 0)."""
    return JSONNumber(text) if text == "-0" else int(text)


def _answer_text(answer: Any, exact: Any) -> str:
    """The answer tool's input as JSON text: ``exact`` (its numbers as sent) when it is one.

    ``exact`` is the same block's input read with `exact_content`, or ``None``; its members
    are written in the order the model wrote them.
    """
    if exact is not None:
        try:
            return dumps_answer(exact, indent=None, sort_keys=False)
        except RecursionError:  # nested too deep for the writer: written as before
            pass
    return json.dumps(answer, ensure_ascii=False)


def anthropic_response(
    message: Any,
    *,
    model_id: str,
    answer_tool: str | None,
    wrapped: bool,
    max_tokens: int,
    exact: list[Any] | None = None,
) -> ModelResponse:
    """Our `ModelResponse` from the SDK's message, checked field by field.

    The SDK does not validate a server's answer, so no field is trusted to have its type.

    Args:
        message: The body's JSON object, or the SDK's ``Message`` of a stream (read
            attribute by attribute; either way nothing in it is trusted).
        model_id: The ``"provider:name"`` id, for errors and the response.
        answer_tool: The forced structured-output tool's name, or ``None``.
        wrapped: Whether the schema was wrapped as ``{"answer": ...}`` (unwrapped here).
        max_tokens: The request's ``max_tokens``: the answer may hold at most
            `max_response_chars` of it.
        exact: The body's content list read by `exact_content`, or ``None``: the answer
            tool's input is written from it, each number as the model wrote it.

    Returns:
        The text blocks joined (or the answer tool's input as JSON: its numbers as written
        when ``exact`` holds it, its members in the model's order), the tool calls in order
        (an input that is not an object, or nests deeper than `MAX_ARGUMENT_DEPTH`, as
        ``{"_raw": ...}``), the finish reason, and the checked usage; a usage the server did
        not report (or without ``input_tokens`` or ``output_tokens``) is ``Usage()``, with
        no requests: the provider counts it.

    Raises:
        ModelError: No content list, more than `MAX_STREAMED_TOOL_CALLS` tool calls, more
            than `max_response_chars`, the forced answer tool not called, or a usage that
            is not an object or not a token count. Refused with a reported usage that is a
            token count, the error's ``paid`` holds that usage.
    """
    content = field_of(message, "content")
    if not isinstance(content, list):
        raise ModelError("the server's answer has no content list", model_id=model_id)
    checked = _usage(field_of(message, "usage"), model_id) or Usage()
    try:
        return _answer(message, content, checked, model_id=model_id, answer_tool=answer_tool,
                       wrapped=wrapped, max_tokens=max_tokens, exact=exact)  # fmt: skip
    except ModelError as exc:  # the answer arrived: what its server says it cost is paid
        exc.paid = checked if checked.requests else None
        raise


def _answer(
    message: Any,
    content: list[Any],
    checked: Usage,
    *,
    model_id: str,
    answer_tool: str | None,
    wrapped: bool,
    max_tokens: int,
    exact: list[Any] | None,
) -> ModelResponse:
    """`anthropic_response` once its content list and usage are read."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    answer: Any = None
    exact_answer: Any = None
    answered = False
    for index, block in enumerate(content):
        kind = field_of(block, "type")
        if kind == _Block.TEXT:
            text = field_of(block, "text")
            if isinstance(text, str):
                texts.append(text)
        elif kind == _Block.TOOL_USE:
            name = field_of(block, "name")
            call_id = field_of(block, "id")
            arguments = field_of(block, "input")
            if not isinstance(name, str):
                continue
            if answer_tool is not None and name == answer_tool and not answered:
                answer, answered = arguments, True
                exact_answer = _exact_input(exact, index, block)
                continue
            if len(calls) >= MAX_STREAMED_TOOL_CALLS:
                raise ModelError(
                    f"the server's answer asks for more than {MAX_STREAMED_TOOL_CALLS} tool calls",
                    model_id=model_id,
                )
            arguments = checked_arguments(arguments)
            calls.append(
                ToolCall(
                    id=call_id if isinstance(call_id, str) else f"call_{len(calls)}",
                    name=name,
                    arguments=arguments,
                )
            )
    reason = field_of(message, "stop_reason")
    finish = bounded_finish_reason(
        _STOP_REASONS.get(reason, reason) if isinstance(reason, str) else None
    )
    _check_size(texts, calls, answer, max_tokens, model_id)
    if answer_tool is not None and not calls:
        if not answered:
            raise ModelError(
                f"the server's answer did not call the {answer_tool!r} tool it was forced "
                f"to (stop reason {reason!r})",
                model_id=model_id,
            )
        if wrapped and isinstance(answer, dict):
            answer = answer.get("answer")
            exact_answer = exact_answer.get("answer") if isinstance(exact_answer, dict) else None
        return ModelResponse(
            text=_answer_text(answer, exact_answer),
            usage=checked,
            model_id=model_id,
            finish_reason="stop" if finish == "tool_calls" else finish,
        )
    return ModelResponse(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=checked,
        model_id=model_id,
        finish_reason=finish,
    )


def _exact_input(exact: list[Any] | None, index: int, block: Any) -> Any:
    """The exact reading of content block ``index``'s input, if it is the same block's."""
    if exact is None or index >= len(exact) or not isinstance(exact[index], dict):
        return None
    twin = exact[index]
    same = twin.get("type") == field_of(block, "type") and twin.get("id") == field_of(block, "id")
    return twin.get("input") if same and twin.get("name") == field_of(block, "name") else None


def _usage(usage: Any, model_id: str) -> Usage | None:
    """The checked usage; ``None`` when the server reported no token counts.

    Raises:
        ModelError: ``usage`` is not an object, or a count is not a token count.
    """
    if usage is None:
        return None
    if isinstance(usage, str | int | float | list):  # the SDK keeps what it was sent
        raise ModelError(f"usage is {kind_of(usage)}, not an object", model_id=model_id)
    prompt_tokens, cached = anthropic_prompt_tokens(usage)
    output = field_of(usage, "output_tokens")
    if prompt_tokens is None or output is None:  # not reported: counted by `request`
        return None
    return validated_usage(prompt_tokens, output, model_id=model_id, cached_prompt_tokens=cached)


def _check_size(
    texts: list[str], calls: list[ToolCall], answer: Any, max_tokens: int, model_id: str
) -> None:
    """Refuse an answer longer than `max_response_chars` allows for ``max_tokens``.

    Tool inputs count as their JSON text, as an OpenAI answer's arguments do.
    """
    size = sum(len(t) for t in texts) + len(_json_text(answer))
    size += sum(len(c.name) + len(_json_text(c.arguments)) for c in calls)
    check_response_size(size, max_tokens, model_id=model_id)


def _json_text(value: Any) -> str:
    """``value`` as the JSON text a server sent it in (about: its size is what counts)."""
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, RecursionError):  # circular or too deep: `checked_arguments` cut it
        return repr(value)


MAX_STREAMED_BLOCKS = 4 * MAX_STREAMED_TOOL_CALLS
"""Most content blocks one streamed answer may start (text, tool use, thinking...)."""


class StreamedInputs:
    """A streamed answer's content blocks, checked as they start, and each tool input's text.

    The SDK appends each started block whatever index the server gives it, and adds a
    delta's pieces to the block at the delta's index: a server that starts two blocks at
    one index would have the second block's input joined onto the first's. A block started
    at any index but the next one, or more than `MAX_STREAMED_BLOCKS` blocks, is refused.
    """

    def __init__(self, *, server: str, model_id: str) -> None:
        self.server, self.model_id = server, model_id
        self.started = 0
        self.inputs: dict[int, list[str]] = {}

    def add(self, event: Any) -> int:
        """Check one event; return the characters of tool input it carried.

        Raises:
            ModelError: A block started out of order, or one too many.
        """
        event_type = getattr(event, "type", None)
        index = getattr(event, "index", None)
        if event_type == "content_block_start":
            if isinstance(index, bool) or index != self.started:
                what = f"content block {index!r} started where block {self.started} was next"
                raise malformed_event(self.server, what, model_id=self.model_id)
            self.started += 1
            if self.started > MAX_STREAMED_BLOCKS:
                what = f"more than {MAX_STREAMED_BLOCKS} content blocks"
                raise malformed_event(self.server, what, model_id=self.model_id)
            return 0
        delta = getattr(event, "delta", None)
        piece = getattr(delta, "partial_json", None)
        if (
            event_type != "content_block_delta"
            or getattr(delta, "type", None) != "input_json_delta"
            or not isinstance(piece, str)
            or not isinstance(index, int)
        ):
            return 0
        self.inputs.setdefault(index, []).append(piece)
        return len(piece)

    def raw_unfinished(self, message: Any) -> None:
        """Give each tool_use block whose streamed input is not whole JSON ``{"_raw": ...}``.

        The SDK reads a streamed input leniently (a string left open is dropped, so
        ``{"force": true, "path": "/da`` would run the tool as ``{"force": true}``); the tool
        must hear the problem instead, as with the OpenAI provider.
        """
        content = getattr(message, "content", None)
        for index, pieces in self.inputs.items():
            text = "".join(pieces)
            if not isinstance(content, list) or not 0 <= index < len(content) or not text.strip():
                continue
            block = content[index]
            if getattr(block, "type", None) != "tool_use":
                continue
            try:
                json.loads(text)
            except (ValueError, RecursionError):
                block.input = {"_raw": text}


_BUSY_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})
"""Error types of a streamed ``error`` event that a retry may get past: what HTTP 529, 500
and 429 say before a stream starts (Anthropic's documented error types)."""


def streamed_error(
    body: object, *, server: str, model_id: str, redact: Callable[[str], str]
) -> ModelError:
    """The `ModelError` for an ``error`` event in a stream (the SDK raises it with status 200).

    Args:
        body: The event's data as the SDK parsed it (``{"error": {"type", "message"}}``).
        server: The server's URL, named in the message.
        model_id: The model's id.
        redact: Takes secrets out of the text (the API key a server may echo).

    Returns:
        One line naming the server, the error's type and (cut to 500 characters, quoted) its
        message; transient for the types in `_BUSY_ERRORS`.
    """
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    kind = error.get("type") if isinstance(error.get("type"), str) else "unknown error"
    detail = str(error.get("message", ""))[:500]
    return ModelError(
        redact(f"the server at {server} streamed an error: {kind:.100}: {detail!r}"),
        model_id=model_id,
        transient=kind in _BUSY_ERRORS,
    )
