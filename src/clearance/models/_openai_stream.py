"""Reading a streamed OpenAI chat completion (server-sent events) into one `ModelResponse`.

The server is untrusted: every chunk is checked as it arrives, the number of chunks is capped
(an honest server sends about one per generated token, plus a few), tool-call pieces are
joined by a bounded index (a piece that changes a call's id or name is refused, never merged
into the call), and the usage (asked for with ``stream_options.include_usage``)
is validated like a non-streamed one (one without token counts is counted here, one that is
not an object refused). The caller's deadline covers the whole stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from clearance._core.errors import ModelError
from clearance.models._base import (
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
    Usage,
    arguments_size,
    decoded_arguments,
    kind_of,
    max_response_chars,
    validated_usage,
)
from clearance.models._cache import field_of, reported_cached_tokens
from clearance.models._counted import with_counted_usage
from clearance.models._finish import bounded_finish_reason
from clearance.models._stream_events import excerpt, malformed_event

__all__ = ["MAX_STREAMED_TOOL_CALLS", "collect_stream", "max_chunks"]

MAX_STREAMED_TOOL_CALLS = 128
"""Most tool calls one answer may hold, streamed or not (Anthropic's too); an agent's own
``limits.max_tool_calls_per_step`` is usually far lower."""


def max_chunks(max_tokens: int) -> int:
    """Most chunks a streamed answer of at most ``max_tokens`` tokens may take.

    Four per token (a token's text, a tool call's pieces) plus 64 for the role, finish and
    usage chunks; more is not an honest server's answer.
    """
    return 4 * max_tokens + 64


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    sent: object = None  # arguments sent as a value (an object), not as JSON text


def _decoded(index: int, call: _Call, model_id: str) -> ToolCall:
    if not call.name:  # as a whole answer's call with no name is refused
        raise ModelError(
            f"the server streamed tool call {index} with no name, not a tool call",
            model_id=model_id,
        )
    if call.sent is not None:  # as in a whole answer: an object is checked as it is
        arguments = (
            decoded_arguments(call.sent)
            if not call.arguments
            else {"_raw": "(arguments sent partly as text, partly as a value)"}
        )
        return ToolCall(id=call.id, name=call.name, arguments=arguments)
    arguments = decoded_arguments("".join(call.arguments))
    return ToolCall(id=call.id, name=call.name, arguments=arguments)


async def collect_stream(
    chunks: AsyncIterator[Any],
    request: ModelRequest,
    *,
    model_id: str,
    sink: TextSink,
    server: str,
    counter: Callable[[str], int] | None = None,
) -> ModelResponse:
    """Read a stream of ``ChatCompletionChunk`` s into the response a non-streamed call gives.

    Args:
        chunks: The SDK's stream.
        request: The request (its ``max_tokens`` sets the chunk cap).
        model_id: The ``"provider:name"`` id, for errors and the response.
        sink: Called with each piece of text as it arrives.
        server: The server's base URL, named when a chunk has the wrong shape.
        counter: The model's token counter: when the stream holds no usage, the tokens are
            counted with it (`with_counted_usage`); ``None`` records zeros.

    Returns:
        The whole completion: text, tool calls (arguments decoded from JSON, undecodable ones
        as ``{"_raw": <text>}``), finish reason and validated (or counted) usage.

    Raises:
        ModelError: More chunks than `max_chunks`, more text (and tool-call names and
            arguments) than `max_response_chars` allows for ``max_tokens``, more tool calls than
            `MAX_STREAMED_TOOL_CALLS` (or a tool call index that is not one), a tool call
            with no name (or one that is not text), a stream with no choice at all, a chunk
            of the wrong shape (``choices`` or ``tool_calls`` not a list, a choice or
            tool-call piece not an object, a ``finish_reason`` that is not text, a tool
            call's id or name changed by a later piece: the server named), or a usage that
            is not a token count; a stream that ended without a ``finish_reason`` (the
            connection was cut: transient, the answer is not taken as whole).
    """
    cap = max_chunks(request.max_tokens)
    chars_cap = max_response_chars(request.max_tokens)
    chars = 0
    text: list[str] = []
    calls: dict[int, _Call] = {}
    finish: str | None = None
    usage: Any = None
    seen_choice = False
    count = 0
    async for chunk in chunks:
        count += 1
        if count > cap:
            raise ModelError(
                f"the server streamed more than {cap} chunks for max_tokens="
                f"{request.max_tokens}: not an honest answer",
                model_id=model_id,
            )
        if getattr(chunk, "usage", None) is not None:
            usage = chunk.usage
        for choice in _objects(chunk, "choices", "choice", server=server, model_id=model_id):
            if getattr(choice, "index", 0) != 0:
                continue
            seen_choice = True
            reason = getattr(choice, "finish_reason", None)
            if reason is not None and not isinstance(reason, str):  # the SDK keeps what it got
                problem = f"finish_reason is {kind_of(reason)}, not text"
                raise malformed_event(server, problem, model_id=model_id)
            finish = reason or finish
            delta = getattr(choice, "delta", None)
            piece = getattr(delta, "content", None)
            if isinstance(piece, str) and piece:
                chars += len(piece)
                _check_chars(chars, chars_cap, request.max_tokens, model_id)
                text.append(piece)
                sink(piece)
            for part in _objects(
                delta, "tool_calls", "tool call piece", server=server, model_id=model_id
            ):
                chars += _add_tool_part(calls, part, server=server, model_id=model_id)
                _check_chars(chars, chars_cap, request.max_tokens, model_id)
    if not seen_choice:
        raise ModelError("the server streamed no choices", model_id=model_id)
    if finish is None:  # an honest stream ends its choice with a finish_reason
        raise ModelError(
            "the stream ended before the answer was finished (no finish_reason): cut off",
            model_id=model_id,
            transient=True,
        )
    checked = _streamed_usage(usage, model_id)
    response = ModelResponse(
        text="".join(text),
        tool_calls=tuple(_decoded(i, calls[i], model_id) for i in sorted(calls)),
        usage=checked or Usage(requests=1),
        model_id=model_id,
        finish_reason=bounded_finish_reason(finish),
    )
    if checked is None and counter is not None:
        return with_counted_usage(response, request, counter)
    return response


def _streamed_usage(usage: Any, model_id: str) -> Usage | None:
    """The stream's usage checked as a non-streamed one's; ``None`` when it gave no counts.

    A usage without ``prompt_tokens`` or ``completion_tokens`` (``{}`` included) is not
    reported, so the caller counts the tokens, as for a non-streamed answer.

    Raises:
        ModelError: The usage is not an object, or a count is not a token count.
    """
    if usage is None:
        return None
    if isinstance(usage, str | int | float | list):  # the SDK keeps what it was sent
        raise ModelError(f"usage is {kind_of(usage)}, not an object", model_id=model_id)
    prompt, completion = field_of(usage, "prompt_tokens"), field_of(usage, "completion_tokens")
    if prompt is None or completion is None:
        return None
    cached = reported_cached_tokens({"usage": usage})
    return validated_usage(prompt, completion, model_id=model_id, cached_prompt_tokens=cached)


def _objects(owner: Any, field: str, what: str, *, server: str, model_id: str) -> list[Any]:
    """``owner``'s list ``field``, each item an object; else the server's event is malformed.

    Args:
        owner: A chunk (``choices``) or a choice's delta (``tool_calls``).
        field: The attribute holding the list (absent or ``None``: an empty list).
        what: How an item is named in the error (``choice``, ``tool call piece``).
        server: The server, named in the error.
        model_id: The model's id, for the error.
    """
    items = getattr(owner, field, None)
    if items is None:
        return []
    if not isinstance(items, list):
        problem = f"{field} is {kind_of(items)}, not a list"
        raise malformed_event(server, problem, model_id=model_id)
    for number, item in enumerate(items):
        if item is None or isinstance(item, (str, int, float, list, dict)):
            problem = f"{what} {number} is {kind_of(item)}, not an object"
            raise malformed_event(server, problem, model_id=model_id)
    return items


def _check_chars(chars: int, cap: int, max_tokens: int, model_id: str) -> None:
    if chars > cap:
        raise ModelError(
            f"the server streamed more than {cap:,} characters for max_tokens={max_tokens} "
            "(max_response_chars): refused",
            model_id=model_id,
        )


def _add_tool_part(calls: dict[int, _Call], part: Any, *, server: str, model_id: str) -> int:
    """Join one streamed piece of a tool call onto the call at its index.

    A call's id and name come once, in its first piece; a server may repeat them in every
    piece, and an empty or absent one adds nothing. Its arguments come in pieces of text, or
    as one value (an object, as a whole answer's may be; checked as it is by
    `decoded_arguments`). Returns the characters the piece added (a value's, as JSON).

    Raises:
        ModelError: A piece names the call another id or another name than it already has
            (which call ran, under which name, would be a guess): a malformed event.
    """
    index = getattr(part, "index", None)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ModelError(f"the server streamed a tool call index {index!r}", model_id=model_id)
    if index not in calls:
        if len(calls) >= MAX_STREAMED_TOOL_CALLS:
            raise ModelError(
                f"the server streamed more than {MAX_STREAMED_TOOL_CALLS} tool calls",
                model_id=model_id,
            )
        calls[index] = _Call()
    call = calls[index]
    call_id = getattr(part, "id", None)
    if isinstance(call_id, str) and call_id:
        _check_same(index, "id", call.id, call_id, server=server, model_id=model_id)
        call.id = call_id
    function = getattr(part, "function", None)
    added = 0
    if function is None:
        return added
    name, arguments = getattr(function, "name", None), getattr(function, "arguments", None)
    if name is not None and not isinstance(name, str):
        raise ModelError(
            f"the server streamed tool call {index}'s name as {kind_of(name)}, not text",
            model_id=model_id,
        )
    if name:
        _check_same(index, "name", call.name, name, server=server, model_id=model_id)
        if not call.name:
            call.name = name
            added += len(name)
    if isinstance(arguments, str):
        call.arguments.append(arguments)
        added += len(arguments)
    elif arguments is not None:
        if call.sent is not None:  # a second value: never one silently kept over the other
            call.arguments.append("")
        call.sent = arguments
        added += arguments_size(arguments)
    return added


def _check_same(index: int, what: str, had: str, got: str, *, server: str, model_id: str) -> None:
    """Refuse a tool call's ``what`` (its id or name) changed from ``had`` to ``got``."""
    if had and got != had:
        problem = f"tool call {index}'s {what} changed from {excerpt(had)} to {excerpt(got)}"
        raise malformed_event(server, problem, model_id=model_id)
