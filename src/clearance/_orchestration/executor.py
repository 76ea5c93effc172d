"""Where model calls run: in the orchestrator's process (the default) or on remote workers.

An executor changes one thing only: where the one model call of `ModelCaller` is answered.
The orchestrator keeps the task graph, the clearances, the `ContextBuilder`, the store, the
memory and the tools; it asks the executor for a `ChatModel` per model id, and that model's
``request`` is what the executor may send elsewhere (see `clearance.RayExecutor`). Token
counting (``count_tokens``) and the context window stay with the model made in the
orchestrator's process, so prompts are built and budgeted there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from clearance._core.vocabulary import EventKind
from clearance.models._base import ChatModel

__all__ = ["EventRecorder", "ModelExecutor"]

EventRecorder = Callable[[EventKind, str, dict[str, Any]], object]
"""Records one event of the current run: ``(kind, subject, data)`` (a bound
``RunLedger.record_event``)."""


@runtime_checkable
class ModelExecutor(Protocol):
    """Answers model calls somewhere other than the orchestrator's process."""

    def model(self, model_id: str, local: ChatModel, options: Mapping[str, Any]) -> ChatModel:
        """The model the orchestrator calls for ``model_id``.

        Args:
            model_id: The ``"provider:name"`` id.
            local: The model made in the orchestrator's process: its ``count_tokens`` and
                ``context_window`` serve the prompt builder.
            options: The settings the model is made with (`get_model` keyword arguments).

        Returns:
            The same object for the same ``model_id`` on every call.
        """
        ...

    def attach(self, record: EventRecorder) -> None:
        """Record the executor's own events (a lost worker...) with ``record`` from now on."""
        ...
