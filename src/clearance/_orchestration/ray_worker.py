"""The Ray worker actor: holds models, answers one model request at a time per call.

A worker receives, per call, exactly three things: a model id, the settings the model is made
with, and the `ModelRequest` (the finished `Prompt`, the tool specs, the limits). It never
receives the task graph, other tasks' results, the store, memory or tools. It answers with a
tagged tuple instead of raising, so no exception class (with fields the orchestrator would
have to trust) crosses the network:

- ``("ok", ModelResponse)``;
- ``("error", kind, message, transient)``: the model failed, or could not be made.

A streamed call (`ModelWorker.stream`) is a generator of ``("text", piece)`` items, one per
piece of text the model produced, ending with the outcome above. The orchestrator reads an
outcome with `checked_outcome`: every field's type checked, messages cut to `MAX_MESSAGE`.

This module does not import Ray: `RayExecutor` turns `ModelWorker` into an actor class.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from clearance._core.errors import ClearanceError, ModelError
from clearance.models._base import ChatModel, ModelRequest, ModelResponse, ToolCall, Usage
from clearance.models._registry import get_model

__all__ = [
    "MAX_MESSAGE",
    "MAX_RECORDED",
    "ModelFactory",
    "ModelWorker",
    "Outcome",
    "checked_outcome",
    "short_text",
]

ModelFactory = Callable[..., ChatModel]
"""Makes a model on a worker: ``factory(model_id, **options)`` (`get_model` by default)."""

Outcome = tuple[Any, ...]
"""What a worker answers: ``("ok", response)`` or ``("error", kind, message, transient)``."""

MAX_RECORDED = 100_000
"""Most calls a recording worker keeps (the oldest are dropped beyond)."""
MAX_MESSAGE = 2000
"""Most characters of a worker's error message the orchestrator keeps."""


class ModelWorker:
    """One worker: its models (made on first use, one per model id and settings) and its calls.

    Args:
        factory: Makes a model from its id and settings; ``None`` means `get_model`.
        record: Keep every call's arguments, for `received` (tests of what crosses).
    """

    def __init__(self, factory: ModelFactory | None = None, *, record: bool = False) -> None:
        self._factory: ModelFactory = factory if factory is not None else get_model
        self._models: dict[tuple[str, tuple[tuple[str, Any], ...]], ChatModel] = {}
        self._record = record
        self._received: list[tuple[str, dict[str, Any], ModelRequest]] = []

    def ready(self) -> int:
        """The worker's process id, once it is up."""
        return os.getpid()

    async def complete(
        self,
        model_id: str,
        options: Mapping[str, Any],
        request: ModelRequest,
        *,
        sink: Callable[[str], None] | None = None,
    ) -> Outcome:
        """Answer ``request`` with the model ``model_id`` made with ``options``.

        ``sink``, when given, receives the text as the model streams it (`stream`).

        Returns:
            ``("ok", ModelResponse)``, or ``("error", kind, message, transient)`` when the
            model cannot be made or fails.
        """
        if self._record:
            self._received.append((model_id, dict(options), request))
            del self._received[:-MAX_RECORDED]
        try:
            model = self._model(model_id, options)
            if sink is not None:
                request = dataclasses.replace(request, stream=sink)
            return ("ok", await model.request(request))
        except ModelError as exc:
            return ("error", "ModelError", str(exc), exc.transient)
        except ClearanceError as exc:
            return ("error", type(exc).__name__, str(exc), False)
        except Exception as exc:  # a provider's own bug: reported, never raised across
            return ("error", type(exc).__name__, str(exc), False)

    async def stream(
        self, model_id: str, options: Mapping[str, Any], request: ModelRequest
    ) -> AsyncIterator[Outcome]:
        """`complete`, streaming: ``("text", piece)`` per piece as it comes, then the outcome.

        The request arrives without a sink (a function of the orchestrator's process); here
        the model streams into a queue that this generator drains.
        """
        pieces: asyncio.Queue[Outcome] = asyncio.Queue()

        def sink(piece: str) -> None:
            pieces.put_nowait(("text", piece))

        async def answer() -> None:
            outcome = await self.complete(model_id, options, request, sink=sink)
            pieces.put_nowait(("done", outcome))

        task = asyncio.ensure_future(answer())
        try:
            while True:
                item = await pieces.get()
                if item[0] == "done":
                    yield item[1]
                    return
                yield item
        finally:
            task.cancel()

    def received(self) -> list[tuple[str, dict[str, Any], ModelRequest]]:
        """Every call's arguments, in order (empty unless the worker records)."""
        return list(self._received)

    def _model(self, model_id: str, options: Mapping[str, Any]) -> ChatModel:
        key = (model_id, tuple(sorted(options.items())))
        model = self._models.get(key)
        if model is None:
            model = self._models[key] = self._factory(model_id, **options)
        return model


def checked_outcome(outcome: Outcome, model_id: str) -> ModelResponse:
    """The response in a worker's answer, once its shape is checked.

    Raises:
        ModelError: The worker reported the model's failure (transient as it said), or
            answered with something that is not a well-formed outcome.
    """
    if isinstance(outcome, tuple) and len(outcome) == 2 and outcome[0] == "ok":
        response = outcome[1]
        if _well_formed(response):
            assert isinstance(response, ModelResponse)
            return response
    elif isinstance(outcome, tuple) and len(outcome) == 4 and outcome[0] == "error":
        _, kind, message, transient = outcome
        if isinstance(kind, str) and isinstance(message, str) and isinstance(transient, bool):
            raise ModelError(
                f"on a Ray worker: {short_text(kind)}: {short_text(message)}",
                model_id=model_id,
                transient=transient,
            )
    raise ModelError("a Ray worker answered with a malformed outcome", model_id=model_id)


def _well_formed(response: object) -> bool:
    """Whether ``response`` is a `ModelResponse` whose fields have their declared types."""
    return (
        isinstance(response, ModelResponse)
        and isinstance(response.text, str)
        and isinstance(response.usage, Usage)
        and isinstance(response.model_id, str)
        and (response.finish_reason is None or isinstance(response.finish_reason, str))
        and isinstance(response.tool_calls, tuple)
        and all(
            isinstance(c, ToolCall)
            and isinstance(c.id, str)
            and isinstance(c.name, str)
            and isinstance(c.arguments, dict)
            for c in response.tool_calls
        )
    )


def short_text(text: str) -> str:
    """``text`` cut to at most `MAX_MESSAGE` characters (a worker's message, an error's)."""
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."
