"""What `ModelCaller` accepts from a model: every answer checked before it is recorded or used.

Providers check what their servers send at their boundary; `checked_response` checks it
again for any `ChatModel` (a user's own included), so the ledger, the tool loop and every
later step hold only an answer of the right shape, size and count of tool calls.
"""

from __future__ import annotations

import dataclasses

from clearance._core.errors import LimitExceeded, ModelError
from clearance._core.spec import Agent
from clearance.models._base import (
    MAX_REPORTED_TOKENS,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    arguments_size,
    check_response_size,
    checked_arguments,
    kind_of,
)
from clearance.models._finish import bounded_finish_reason

__all__ = ["checked_response", "paid_usage"]


def checked_response(
    response: object, *, model_id: str, agent: Agent, request: ModelRequest, subject: str
) -> ModelResponse:
    """Refuse what no later step can hold: wrong types, bad Unicode, absurd usage, too much.

    Providers check what their servers send at their boundary (`validated_usage`,
    `max_response_chars`); this checks it again for any `ChatModel`, a user's own included.

    Args:
        response: What the model's ``request`` returned (any object: it is checked).
        model_id: The model's ``"provider:name"`` id, for errors.
        agent: Whose limits apply (``max_tool_calls_per_step``, ``max_tokens_per_step``).
        request: The request answered (its ``max_tokens`` sets `max_response_chars`).
        subject: The call's subject, named in a `LimitExceeded`.

    Returns:
        ``response``, with the arguments of any tool call that a tool cannot take (not an
        object, nested deeper than `MAX_ARGUMENT_DEPTH`) replaced by ``{"_raw": ...}``
        (`checked_arguments`): the model hears a tool error for that call; its finish
        reason bounded (`bounded_finish_reason`: a short printable word, as recorded).

    Raises:
        ModelError: The answer is not a `ModelResponse`, its text is not a string, a tool
            call is not a `ToolCall` or has no name, the text, tool names and arguments (as
            JSON) are longer than `max_response_chars` allows for the request's
            ``max_tokens``, lone surrogates
            in the text or a tool call's name, a usage that is not a `Usage`, token counts
            that are not integers in ``[0, MAX_REPORTED_TOKENS]``; cached prompt tokens
            that are not an integer in ``[0, prompt_tokens]``; a ``finish_reason`` that is
            neither ``None`` nor text (a text, even an unknown one, is kept, bounded by
            `bounded_finish_reason`: only ``"length"`` marks an answer cut off).
        LimitExceeded: ``max_tool_calls_per_step`` (more tool calls than the agent's limit),
            ``max_tokens_per_step``.
    """
    if not isinstance(response, ModelResponse):
        raise ModelError(f"the model returned {kind_of(response)}, not a ModelResponse",
                         model_id=model_id)  # fmt: skip
    text, calls = response.text, response.tool_calls
    if not isinstance(text, str):
        raise ModelError(f"the completion is {kind_of(text)}, not text", model_id=model_id)
    if not isinstance(calls, tuple | list):
        raise ModelError(f"tool_calls is {kind_of(calls)}, not a tuple", model_id=model_id)
    maximum = agent.limits.max_tool_calls_per_step
    if len(calls) > maximum:
        raise LimitExceeded(
            "max_tool_calls_per_step", value=len(calls), maximum=maximum, subject=subject,
            hint="none of them was run",
        )  # fmt: skip
    size = len(text)
    checked: list[ToolCall] = []
    for i, tool_call in enumerate(calls):
        if not isinstance(tool_call, ToolCall):
            raise ModelError(f"tool call {i} is {kind_of(tool_call)}, not a ToolCall",
                             model_id=model_id)  # fmt: skip
        if not isinstance(tool_call.name, str) or not tool_call.name:
            raise ModelError(f"tool call {i}'s name is {kind_of(tool_call.name)}, not a tool name",
                             model_id=model_id)  # fmt: skip
        checked.append(_with_checked_arguments(tool_call))
        size += len(tool_call.name) + arguments_size(checked[-1].arguments)
    check_response_size(size, request.max_tokens, model_id=model_id, who="the answer")
    try:
        text.encode("utf-8")
        for tool_call in calls:  # arguments: see `checked_tool_call`
            tool_call.name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ModelError(
            f"the completion is not valid Unicode ({exc.reason} at position {exc.start})",
            model_id=model_id,
        ) from exc
    _check_finish_reason(response.finish_reason, model_id=model_id)
    _check_usage(response.usage, model_id=model_id, agent=agent, subject=subject)
    finish = bounded_finish_reason(response.finish_reason)
    if not calls and finish is response.finish_reason:
        return response
    return dataclasses.replace(response, tool_calls=tuple(checked), finish_reason=finish)


def _check_finish_reason(finish: object, *, model_id: str) -> None:
    """Refuse a ``finish_reason`` that is neither ``None`` nor text (the ledger holds text)."""
    if finish is not None and not isinstance(finish, str):
        raise ModelError(
            f"the answer's finish_reason is {kind_of(finish)}, not text: refused",
            model_id=model_id,
        )


def _with_checked_arguments(tool_call: ToolCall) -> ToolCall:
    arguments = checked_arguments(tool_call.arguments)
    if arguments is tool_call.arguments:
        return tool_call
    return dataclasses.replace(tool_call, arguments=arguments)


def paid_usage(answer: object) -> Usage | None:
    """The usage of an answer that arrived, if it is a `Usage` of counts in range.

    An answer refused after it arrived (`checked_response`: too many tool calls, over
    ``max_tokens_per_step``, bad text), or refused by its provider (a `ModelError` whose
    ``paid`` is its reported usage), was paid for all the same; an impossible usage is not
    a figure to charge, and gives ``None``.

    Args:
        answer: The `ModelResponse` received, or the `ModelError` that refused it.
    """
    usage: object = None
    if isinstance(answer, ModelResponse):
        usage = answer.usage
    elif isinstance(answer, ModelError):
        usage = answer.paid
    if usage is None:
        return None
    try:
        _check_counts(usage, model_id="")
    except ModelError:
        return None
    assert isinstance(usage, Usage)  # checked by _check_counts
    return usage


def _check_usage(usage: object, *, model_id: str, agent: Agent, subject: str) -> None:
    """Refuse a usage that is not a `Usage` of counts in range; apply ``max_tokens_per_step``."""
    _check_counts(usage, model_id=model_id)
    assert isinstance(usage, Usage)  # checked by _check_counts
    per_step = agent.limits.max_tokens_per_step
    if per_step is not None and usage.completion_tokens > per_step:
        raise LimitExceeded(
            "max_tokens_per_step",
            value=usage.completion_tokens,
            maximum=per_step,
            subject=subject,
        )


def _check_counts(usage: object, *, model_id: str) -> None:
    """Refuse a usage that is not a `Usage` of counts in range."""
    if not isinstance(usage, Usage):
        raise ModelError(f"the usage is {kind_of(usage)}, not a Usage", model_id=model_id)
    for name in ("requests", "prompt_tokens", "completion_tokens"):
        value = getattr(usage, name)
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not 0 <= value <= MAX_REPORTED_TOKENS
        ):
            raise ModelError(
                f"the model server reported an impossible usage: {name}={value!r}",
                model_id=model_id,
            )
    cached = usage.cached_prompt_tokens
    if cached is not None and (
        not isinstance(cached, int)
        or isinstance(cached, bool)
        or not 0 <= cached <= usage.prompt_tokens
    ):
        raise ModelError(
            f"the model server reported an impossible usage: cached_prompt_tokens={cached!r} "
            f"with prompt_tokens={usage.prompt_tokens}",
            model_id=model_id,
        )
