"""Test doubles for `ChatModel`: they record every request they receive."""

from __future__ import annotations

import inspect
import re
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence

from clearance._core.errors import ModelError
from clearance.models._base import ModelRequest, ModelResponse, ToolCall, Usage
from clearance.tokens import heuristic_tokens

Reply = str | ToolCall | Sequence[ToolCall]
"""A scripted answer: a completion text, or one or more tool calls."""

__all__ = ["FunctionModel", "ScriptedModel", "stream_text"]


def stream_text(request: ModelRequest, text: str) -> None:
    """Hand ``text`` to ``request.stream`` word by word, as a streaming provider would.

    Each word goes with its trailing space; nothing happens when the request does not stream.
    """
    if request.stream is not None:
        for piece in re.findall(r"\S+\s*|\s+", text):
            request.stream(piece)


class _RecordingModel:
    """Shared bookkeeping: the requests received, token counting, usage."""

    context_window: int | None = None

    def __init__(self, model_id: str):
        self.model_id = model_id
        self.requests: list[ModelRequest] = []

    def count_tokens(self, text: str) -> int:
        """Estimated tokens (one per 4 UTF-8 bytes, `clearance.tokens.heuristic_tokens`)."""
        return heuristic_tokens(text)

    @property
    def prompts(self) -> list[str]:
        """The full text of every prompt received, in order."""
        return [r.prompt.text for r in self.requests]

    def _respond(self, request: ModelRequest, reply: Reply) -> ModelResponse:
        calls: tuple[ToolCall, ...] = ()
        if isinstance(reply, ToolCall):
            calls, text = (reply,), ""
        elif isinstance(reply, str):
            text = reply
        else:
            calls, text = tuple(reply), ""
        prompt_tokens = sum(self.count_tokens(m.content) for m in request.prompt.messages)
        stream_text(request, text)
        return ModelResponse(
            text=text,
            usage=Usage(
                requests=1,
                prompt_tokens=prompt_tokens,
                completion_tokens=self.count_tokens(text),
            ),
            model_id=self.model_id,
            finish_reason="tool_calls" if calls else "stop",
            tool_calls=calls,
        )


class ScriptedModel(_RecordingModel):
    """Answers with queued responses, in order; records every request.

    Args:
        responses: Texts to answer with, `ToolCall` s (one or a list) to ask for, or
            exceptions to raise, one per call.
        model_id: The id it reports.

    Raises:
        ModelError: When called after the script is used up.
    """

    def __init__(
        self, responses: Iterable[Reply | BaseException], *, model_id: str = "test:scripted"
    ):
        super().__init__(model_id)
        self._queue: deque[Reply | BaseException] = deque(responses)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Record the request and return (or raise) the next scripted response."""
        self.requests.append(request)
        if not self._queue:
            raise ModelError("the script has no more responses", model_id=self.model_id)
        nxt = self._queue.popleft()
        if isinstance(nxt, BaseException):
            raise nxt
        return self._respond(request, nxt)


ResponseFunction = Callable[[ModelRequest], Reply | Awaitable[Reply]]


class FunctionModel(_RecordingModel):
    """Answers with a function of the request (sync or async); records every request.

    Args:
        function: Returns the completion text (or tool calls) for a request; may raise to
            simulate failure.
        model_id: The id it reports.
    """

    def __init__(self, function: ResponseFunction, *, model_id: str = "test:function"):
        super().__init__(model_id)
        self._function = function

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Record the request and answer with ``function(request)``."""
        self.requests.append(request)
        result = self._function(request)
        if inspect.isawaitable(result):
            result = await result
        return self._respond(request, result)
