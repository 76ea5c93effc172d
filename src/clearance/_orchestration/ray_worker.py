"""The Ray worker actor: holds models, answers one model request at a time per call.

A worker receives, per call, exactly three things: a model id, the settings the model is made
with, and the `ModelRequest` (the finished `Prompt`, the tool specs, the limits). It never
receives the task graph, other tasks' results, the store, memory or tools. It answers with a
tagged tuple instead of raising, so no exception class (with fields the orchestrator would
have to trust) crosses the network:

- ``("ok", ModelResponse)``;
- ``("error", kind, message, transient, details)``: the model failed, or could not be made
  (`error_outcome`; ``details`` holds a `ModelError`'s ``retry_after_s``, ``status_code``
  and ``paid``, so a failure reads as it would in the orchestrator's process).

A streamed call (`ModelWorker.stream`) is a generator of ``("text", piece)`` items, one per
piece of text the model produced, ending with the outcome above. The orchestrator reads an
outcome with `checked_outcome`: every field's type checked, messages cut to `MAX_MESSAGE`.

This module does not import Ray: `RayExecutor` turns `ModelWorker` into an actor class.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from clearance._core.errors import ModelError
from clearance.models._base import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    check_response_size,
)
from clearance.models._registry import get_model

__all__ = [
    "MAX_MESSAGE",
    "MAX_RECORDED",
    "ModelFactory",
    "ModelWorker",
    "Outcome",
    "checked_outcome",
    "error_outcome",
    "short_text",
]

ModelFactory = Callable[..., ChatModel]
"""Makes a model on a worker: ``factory(model_id, **options)`` (`get_model` by default)."""

Outcome = tuple[Any, ...]
"""What a worker answers: ``("ok", response)`` or ``("error", kind, message, transient,
details)`` (see `error_outcome`)."""

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
            ``("ok", ModelResponse)``, or `error_outcome` when the model cannot be made or
            fails (whatever it raises, `SystemExit` included; only a cancellation of the
            call is raised).
        """
        if self._record:
            self._received.append((model_id, dict(options), request))
            del self._received[:-MAX_RECORDED]
        try:
            model = self._model(model_id, options)
            if sink is not None:
                request = dataclasses.replace(request, stream=sink)
            return ("ok", _within_cap(await model.request(request), request.max_tokens))
        except asyncio.CancelledError:  # `ray.cancel` (the caller's deadline passed)
            raise
        except BaseException as exc:  # anything the model raised: reported, never raised
            return error_outcome(exc)

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


def _within_cap(response: ModelResponse, max_tokens: int) -> ModelResponse:
    """``response``, unless it is over `max_response_chars` for ``max_tokens``.

    Measured as `ModelCaller` measures it (the text and every tool call's name), so the
    answer it would refuse is refused here, before it crosses the network, and charged as
    it is there (the error's ``paid``). Anything that is not a well-formed answer is left
    for `checked_outcome`.

    Raises:
        ModelError: The answer is over the cap (its usage as ``paid``).
    """
    if not _well_formed(response):
        return response
    size = len(response.text) + sum(len(call.name) for call in response.tool_calls)
    try:
        check_response_size(size, max_tokens, model_id="", who="the answer")
    except ModelError as exc:
        exc.paid = response.usage
        raise
    return response


def error_outcome(exc: BaseException) -> Outcome:
    """The outcome reporting ``exc``, raised by a model (or its making) on a worker.

    Reports what `ModelCaller` would make of ``exc`` in the orchestrator's process: a
    `ModelError`'s text without its model id (the orchestrator adds it again: the one the
    error named, or none), its ``transient``, ``retry_after_s``, ``status_code`` and ``paid``
    usage; a
    `ConnectionError` as transient; anything else (`SystemExit` and `KeyboardInterrupt`
    included: a model cannot end its worker) as ``Type: text``, not transient. An error
    whose ``str`` fails is reported by its type alone.

    Returns:
        ``("error", kind, message, transient, details)``, ``details`` a dict of
        ``retry_after_s``, ``status_code`` and ``paid`` (and, for a `ModelError`, its
        ``model_id``).
    """
    try:
        message = str(exc)
    except Exception:  # an exception's own bug
        message = "(its text cannot be read)"
    details: dict[str, Any] = {}
    if isinstance(exc, ModelError):
        prefix = f"{exc.model_id}: " if exc.model_id else ""
        details = {
            "retry_after_s": exc.retry_after_s,
            "status_code": exc.status_code,
            "paid": exc.paid if isinstance(exc.paid, Usage) else None,
        }
        if exc.model_id != "":  # the orchestrator names it as the model did ("": the pool's)
            details["model_id"] = exc.model_id
        return ("error", "ModelError", message.removeprefix(prefix), exc.transient, details)
    transient = isinstance(exc, ConnectionError)
    return ("error", type(exc).__name__, short_text(message), transient, details)


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
    elif isinstance(outcome, tuple) and len(outcome) in (4, 5) and outcome[0] == "error":
        _, error_type, message, transient, *rest = outcome
        details = _details(rest[0] if rest else {})
        if (
            isinstance(error_type, str)
            and isinstance(message, str)
            and isinstance(transient, bool)
            and details is not None
        ):
            # A model's `ModelError` reads as it would in this process; anything else as
            # `ModelCaller` words a provider's own exception (``Type: text``).
            text = message if error_type == "ModelError" else f"{error_type}: {message}"
            named = details.pop("model_id", model_id)  # a ModelError's own, else the pool's
            raise ModelError(short_text(text), model_id=named, transient=transient, **details)
    raise ModelError("a Ray worker answered with a malformed outcome", model_id=model_id)


def _details(details: object) -> dict[str, Any] | None:
    """An error outcome's ``retry_after_s``, ``status_code`` and ``paid``, checked.

    ``None`` when they are malformed: not a dict of those keys (and ``model_id``, a printable
    id of at most `MAX_MODEL_ID` characters or ``None``), a ``retry_after_s`` that is
    not a finite number of seconds from 0 to a day, a ``status_code`` that is not an HTTP
    status (100 to 599), a ``paid`` that is not a `Usage` (its counts are checked where it
    is charged, `paid_usage`).
    """
    if not isinstance(details, dict) or not set(details) <= set(_DETAIL_KEYS):
        return None
    after = details.get("retry_after_s")
    status = details.get("status_code")
    paid = details.get("paid")
    if after is not None and not (
        isinstance(after, int | float)
        and not isinstance(after, bool)
        and math.isfinite(after)
        and 0 <= after <= 86_400
    ):
        return None
    if status is not None and not (
        isinstance(status, int) and not isinstance(status, bool) and 100 <= status <= 599
    ):
        return None
    if paid is not None and type(paid) is not Usage:
        return None
    checked: dict[str, Any] = {"retry_after_s": after, "status_code": status, "paid": paid}
    if "model_id" in details:
        named = details["model_id"]
        if named is not None and not (
            isinstance(named, str) and 0 < len(named) <= MAX_MODEL_ID and named.isprintable()
        ):
            return None
        checked["model_id"] = named
    return checked


_DETAIL_KEYS = ("retry_after_s", "status_code", "paid", "model_id")
MAX_MODEL_ID = 200
"""Longest model id a worker's error may name (longer: a malformed outcome)."""


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
