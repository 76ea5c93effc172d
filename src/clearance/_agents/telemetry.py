"""OpenTelemetry spans of model calls, following the GenAI semantic conventions.

When tracing is configured, `ModelCaller.call` wraps every model call in a client span named
``chat {model name}`` from the tracer ``clearance`` of the global tracer provider. Tracing is
configured when a tracer provider has been set (``trace.set_tracer_provider``, as the
``clearance`` command does when the ``OTEL_*`` variables ask for OTLP export, or
``opentelemetry-instrument``) or is named by ``OTEL_PYTHON_TRACER_PROVIDER``. Otherwise
nothing is done: OpenTelemetry is not even imported, and no span object, generator or
context manager is made (`model_call_span` and `agent_span` return a shared no-op). Install
the ``otel`` extra and configure a ``TracerProvider`` to export them (see
``docs/telemetry.md``).

A run decides once, as it starts (`traced_run`, through `tracing_for_run`), and its calls
and tasks keep that decision; outside a run, each call asks again.

A span carries the GenAI attributes (``gen_ai.operation.name``, ``gen_ai.provider.name``,
``gen_ai.request.*``, ``gen_ai.usage.*``, ``gen_ai.response.*``, ``error.type``) and
Clearance's own: the run id, the call's subject, the task it serves, the agent, and the
prompt manifest's origins and token counts. Prompt and completion text are never put on a
span unless ``CLEARANCE_OTEL_CAPTURE_CONTENT=1`` is set in the environment; neither are the
ids in subjects, task ids and origins, which a model may have chosen (a coordinator's plan
names tasks, a model names store keys): by default each appears as its kind and a digest
(`span_ref`), so the spans of one task still correlate.

Each task's assignee, delegate, spawned child and chat turn runs in an ``invoke_agent`` span
(`agent_span`); the run's root span and the tool-call spans are in
`clearance._agents.telemetry_spans`.

Source: OpenTelemetry semantic conventions for generative AI client spans,
https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from types import ModuleType
from typing import Any

from clearance._core.errors import ConfigError
from clearance.models._base import ModelRequest, ModelResponse

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "TRACER_NAME",
    "agent_span",
    "capture_content",
    "check_provider_variable",
    "mark_failed",
    "model_call_span",
    "span_id",
    "span_ref",
    "span_task_id",
    "tracing",
    "tracing_configured",
    "tracing_for_run",
]

CAPTURE_CONTENT_ENV = "CLEARANCE_OTEL_CAPTURE_CONTENT"
"""Set to ``1`` to put prompt and completion text on the spans (off by default)."""

TRACER_NAME = "clearance"

# Subjects whose reference is a task id (`ModelCaller.call`'s ``subject``).
_TASK_SUBJECTS = ("task:", "isolated:")

# The finish reasons providers send (OpenAI, Anthropic, llama.cpp, the GenAI conventions'):
# any other text is the model server's to choose, shown as a digest without content capture.
_FINISH_REASONS = frozenset({
    "stop", "length", "tool_calls", "function_call", "content_filter", "error", "end_turn",
    "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
})  # fmt: skip

ResponseHook = Callable[[ModelResponse], None]


def span_ref(ref: str) -> str:
    """How a subject or origin (``kind:id``) appears on a span.

    With content capture on, as it is; otherwise its kind and ``h`` plus the first 12 hex
    digits of the SHA-256 of its id (``task:plan-step-1`` -> ``task:h1c0e...``). A reference
    without an id (``synthesis``, ``instructions``) is kept.
    """
    kind, colon, rest = ref.partition(":")
    if not colon or capture_content():
        return ref
    return f"{kind}:{_digest(rest)}"


def span_id(value: str) -> str:
    """How an id or name a model may have chosen appears on a span (a task id, a tool call id).

    As it is with content capture, else `span_ref`'s digest (``h`` and 12 hex digits).
    """
    return value if capture_content() else _digest(value)


def span_task_id(task_id: str) -> str:
    """How a task id appears on a span: `span_id`."""
    return span_id(task_id)


def _digest(text: str) -> str:
    return "h" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:12]


def _ignore(response: ModelResponse) -> None:
    """The response hook when nothing records."""


_PROVIDER_ENV = "OTEL_PYTHON_TRACER_PROVIDER"
"""Names a tracer provider that OpenTelemetry's API loads itself (`get_tracer_provider`)."""


def _export_requested() -> bool:
    """Whether the environment names a tracer provider (and the SDK is not disabled)."""
    env = os.environ
    if not env.get(_PROVIDER_ENV, "").strip():
        return False
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() != "true"


def check_provider_variable() -> None:
    """Refuse an ``OTEL_PYTHON_TRACER_PROVIDER`` naming no installed tracer provider.

    OpenTelemetry would log a traceback and fail the first `get_tracer_provider`; call this
    before it while no provider is set (it then loads the variable's).

    Raises:
        ConfigError: The variable is set and no ``opentelemetry_tracer_provider`` entry point
            has its name.
    """
    from importlib.metadata import entry_points

    name = os.environ.get(_PROVIDER_ENV)
    if name is not None and not entry_points(group="opentelemetry_tracer_provider", name=name):
        raise ConfigError(
            f"no installed tracer provider is named {name!r} (the SDK's is sdk_tracer_provider)",
            field=_PROVIDER_ENV,
        )


# The decision of the run going on in this context (`tracing_for_run`): a 1-tuple holding
# OpenTelemetry's ``trace`` module or ``None``; ``None`` outside a run.
_RUN_TRACING: ContextVar[tuple[ModuleType | None] | None] = ContextVar(
    "clearance_run_tracing", default=None
)


def tracing() -> ModuleType | None:
    """OpenTelemetry's ``trace`` module when spans may be recorded, else ``None``.

    Inside a run, the decision the run took as it started (`tracing_for_run`): a lookup in a
    context variable. Outside a run, checked on every call (a provider may be set at any
    time; see `tracing_now`).
    """
    decided = _RUN_TRACING.get()
    if decided is not None:
        return decided[0]
    return tracing_now()


@contextmanager
def tracing_for_run() -> Iterator[ModuleType | None]:
    """Decide once whether the run about to start is traced (`tracing_now`); keep it for the run.

    Inside the block, `tracing` answers with this decision in this context and the contexts
    made from it (the run's asyncio tasks), so the run's model calls, tasks and tool loops
    do not check the environment again. A provider set during the run takes effect from the
    next run.

    Yields:
        The decision: OpenTelemetry's ``trace`` module, or ``None``.
    """
    trace = tracing_now()
    token = _RUN_TRACING.set((trace,))
    try:
        yield trace
    finally:
        _RUN_TRACING.reset(token)


def tracing_now() -> ModuleType | None:
    """Whether spans may be recorded now, asked of OpenTelemetry and the environment.

    Costs a dictionary and an environment lookup when nothing is configured. A provider is
    set through ``opentelemetry.trace`` (by the ``clearance`` command when the ``OTEL_*``
    variables ask for export, by ``opentelemetry-instrument``, or by the caller), so until
    that module is imported no provider can be set, unless ``OTEL_PYTHON_TRACER_PROVIDER``
    names one; and spans are made only once a real (not the API's placeholder) provider is
    set.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        if not _export_requested():
            return None
        try:
            trace = importlib.import_module("opentelemetry.trace")
        except ImportError:  # the core install has no OpenTelemetry
            return None
        # Nothing could set a provider before the import: the variable's is loaded below.
        check_provider_variable()
    try:
        provider = trace.get_tracer_provider()
    except Exception as exc:  # the named provider fails to load (OpenTelemetry logs why)
        raise ConfigError(
            f"cannot load the tracer provider it names: {type(exc).__name__}", field=_PROVIDER_ENV
        ) from None
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None  # no provider set: every span would be a no-op
    return trace


def tracing_configured() -> bool:
    """Whether model calls and tasks get spans now (see the module docstring)."""
    return tracing() is not None


_NO_CALL_SPAN: AbstractContextManager[ResponseHook] = nullcontext(_ignore)
"""`model_call_span` without tracing: a shared no-op (a `nullcontext` is reusable)."""
_NO_AGENT_SPAN: AbstractContextManager[None] = nullcontext()
"""`agent_span` without tracing: a shared no-op."""


def model_call_span(
    *, run_id: str | None, subject: str, agent: str, model_id: str, request: ModelRequest
) -> AbstractContextManager[ResponseHook]:
    """A client span around one model call (every attempt included); a no-op without OTel.

    Args:
        run_id: The run the call belongs to; ``None`` outside a recorded run.
        subject: What the call is for (``task:<id>``, ``isolated:<id>``, ``synthesis``...).
        agent: The calling agent's name.
        model_id: The model's ``"provider:name"`` id.
        request: The request sent (its prompt's manifest gives origins and token counts).

    Yields:
        A function to call with the response once the call succeeded; it records usage,
        finish reason and, when content capture is on, the completion. An exception leaving
        the block sets ``error.type`` (the exception's class name) and the error status.
    """
    trace = tracing()
    if trace is None:
        return _NO_CALL_SPAN
    return _model_call_span(trace, run_id, subject, agent, model_id, request)


@contextmanager
def _model_call_span(
    trace: ModuleType,
    run_id: str | None,
    subject: str,
    agent: str,
    model_id: str,
    request: ModelRequest,
) -> Iterator[ResponseHook]:
    provider, _, name = model_id.partition(":")
    if not name:
        provider, name = "", model_id
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"chat {name}",
        kind=trace.SpanKind.CLIENT,
        record_exception=False,  # exception messages may quote what a server returned
        set_status_on_exception=False,
    ) as span:
        if not span.is_recording():
            yield _ignore
            return
        span.set_attributes(_request_attributes(run_id, subject, agent, provider, name, request))
        try:
            yield lambda response: span.set_attributes(_response_attributes(response))
        except BaseException as exc:
            mark_failed(trace, span, exc)
            raise


def agent_span(
    *,
    run_id: str,
    agent: str,
    task_id: str | None = None,
    subject: str | None = None,
    conversation_id: str | None = None,
) -> AbstractContextManager[None]:
    """An ``invoke_agent {agent}`` span around one agent's work; a no-op without OTel.

    A task's assignee, a delegate, a spawned child and a chat turn each run in one; their
    model calls and tool calls (`clearance._agents.telemetry_spans`) are its children.

    Args:
        run_id: The run.
        agent: The agent's name.
        task_id: The task the agent works on, if it is a task's assignee.
        subject: What the agent answers (``delegation:<call id>``, ``child:<id>``), if not a task.
        conversation_id: The chat's id (``gen_ai.conversation.id``), for a chat turn.

    Yields:
        Nothing; an exception leaving the block sets ``error.type`` and the error status.
    """
    trace = tracing()
    if trace is None:
        return _NO_AGENT_SPAN
    return _agent_span(trace, run_id, agent, task_id, subject, conversation_id)


@contextmanager
def _agent_span(
    trace: ModuleType,
    run_id: str,
    agent: str,
    task_id: str | None,
    subject: str | None,
    conversation_id: str | None,
) -> Iterator[None]:
    tracer = trace.get_tracer(TRACER_NAME)
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
    with tracer.start_as_current_span(
        f"invoke_agent {agent}",
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        if span.is_recording():
            span.set_attribute("clearance.run_id", run_id)
            if task_id is not None:
                span.set_attribute("clearance.task_id", span_task_id(task_id))
            if subject is not None:
                span.set_attribute("clearance.subject", span_ref(subject))
            if conversation_id is not None:
                span.set_attribute("gen_ai.conversation.id", conversation_id)
        try:
            yield
        except BaseException as exc:
            mark_failed(trace, span, exc)
            raise


def mark_failed(trace: ModuleType, span: Any, exc: BaseException) -> None:
    """Mark ``span`` failed with the exception's class name only (never its message)."""
    if span.is_recording():
        span.set_attribute("error.type", type(exc).__name__)
        span.set_status(trace.StatusCode.ERROR, type(exc).__name__)


def capture_content() -> bool:
    """Whether prompt and completion text go on spans (``CLEARANCE_OTEL_CAPTURE_CONTENT=1``)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")


def _request_attributes(
    run_id: str | None, subject: str, agent: str, provider: str, name: str, request: ModelRequest
) -> dict[str, Any]:
    manifest = request.prompt.manifest
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": name,
        "gen_ai.request.max_tokens": request.max_tokens,
        "gen_ai.request.temperature": request.temperature,
        "clearance.subject": span_ref(subject),
        "clearance.agent": agent,
        "clearance.prompt.origins": [span_ref(item.origin) for item in manifest.items],
        "clearance.prompt.item_tokens": [item.tokens for item in manifest.items],
        "clearance.prompt.total_tokens": manifest.total_tokens,
    }
    if provider:
        attributes["gen_ai.provider.name"] = provider
        attributes["gen_ai.system"] = provider  # the name before semconv 1.37
    if request.top_p is not None:
        attributes["gen_ai.request.top_p"] = request.top_p
    if request.stop:
        attributes["gen_ai.request.stop_sequences"] = list(request.stop)
    if run_id is not None:
        attributes["clearance.run_id"] = run_id
    for prefix in _TASK_SUBJECTS:
        if subject.startswith(prefix):
            attributes["clearance.task_id"] = span_task_id(subject.removeprefix(prefix))
    if capture_content():
        messages = [
            {"role": m.role, "parts": [{"type": "text", "content": m.content}]}
            for m in request.prompt.messages
        ]
        attributes["gen_ai.input.messages"] = json.dumps(messages, ensure_ascii=False)
    return attributes


def _response_attributes(response: ModelResponse) -> dict[str, Any]:
    usage = response.usage
    attributes: dict[str, Any] = {
        "gen_ai.response.model": response.model_id.partition(":")[2] or response.model_id,
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
    }
    finish = response.finish_reason or ("tool_calls" if response.tool_calls else None)
    if finish is not None:
        shown = finish if finish in _FINISH_REASONS else span_id(finish)
        attributes["gen_ai.response.finish_reasons"] = [shown]
    if capture_content():
        parts: list[dict[str, Any]] = []
        if response.text:
            parts.append({"type": "text", "content": response.text})
        for call in response.tool_calls:
            parts.append(
                {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
            )
        message = {"role": "assistant", "parts": parts, "finish_reason": finish or "stop"}
        attributes["gen_ai.output.messages"] = json.dumps([message], ensure_ascii=False)
    return attributes
