"""Counted usage: the tokens of a call whose server reported none.

Some OpenAI-compatible servers (llama.cpp's ``llama-server`` streaming, among others) send no
usage, which would record 0 prompt and 0 completion tokens and leave every token limit blind.
The provider then counts them with the model's own counter (`clearance.tokens`) and marks the
usage ``counted``, so the ledger, ``inspect`` and the limits tell counted from reported.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from clearance.models._base import ModelRequest, ModelResponse, Usage

__all__ = ["with_counted_usage"]


def with_counted_usage(
    response: ModelResponse, request: ModelRequest, count: Callable[[str], int]
) -> ModelResponse:
    """``response`` with its usage counted from the request and the answer.

    Args:
        response: The provider's response, whose server reported no usage.
        request: The request it answers: its messages' text (and tool definitions) are the
            prompt tokens.
        count: The model's token counter (text -> tokens).

    Returns:
        The response with ``usage`` holding one request, the counted prompt and completion
        tokens (the text, and each tool call's name and arguments as JSON), ``counted=True``.
    """
    prompt = sum(count(m.content) for m in request.prompt.messages)
    if request.tools:
        prompt += count(json.dumps(list(request.tools), sort_keys=True))
    completion = count(response.text) + sum(
        count(json.dumps({"name": c.name, "arguments": c.arguments}, sort_keys=True))
        for c in response.tool_calls
    )
    usage = Usage(requests=1, prompt_tokens=prompt, completion_tokens=completion, counted=True)
    return replace(response, usage=usage)
