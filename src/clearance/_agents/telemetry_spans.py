"""OpenTelemetry spans of a whole run and of its tool calls, per the GenAI conventions.

One run is one trace. `traced_run` wraps an orchestrator's run (``run_tasks``, ``run_team``,
``plan``, ``resume``) in a root span ``invoke_workflow {team name}``; every span of the run
(each task's ``invoke_agent``, the plan, the synthesis and review calls, the tool calls) is
under it. The run's id is named on it when the run starts (`note_run`) and its outcome when
it ends (`note_run_outcome`). A resumed run is a new trace whose root carries the same
``clearance.run_id`` and ``clearance.resumed`` (true), so every session of a run is found by
its id.

`tool_span` is the ``execute_tool {tool name}`` span of one tool call, whatever the tool:
user, store, MCP, ``write_output``, ``delegate`` (the delegate's spans are its children) or
``spawn`` (`traced_spawns`: the spawn calls of one model turn run together, so each span
covers the batch, and each child's ``invoke_agent`` span is under the caller's agent span).
The tool loop asks `tracing_configured` once per run of the loop and, without tracing, uses
`NO_TOOL_SPAN`, a shared no-op: no span object and no generator per tool call.

Tool call arguments and results go on a span only with ``CLEARANCE_OTEL_CAPTURE_CONTENT=1``;
the call id, and the name of a tool the agent does not have (a model's invention), appear as
digests otherwise (`span_id`), like every id a model may have chosen.

Sources: OpenTelemetry semantic conventions for GenAI agent spans ("Invoke workflow span")
and GenAI spans ("Execute tool span"), semantic-conventions v1.41 as carried on in
https://github.com/open-telemetry/semantic-conventions-genai (docs/gen-ai/gen-ai-agent-spans.md,
docs/gen-ai/gen-ai-spans.md). Its first release (v0.1.0) folds the workflow span into the
internal ``invoke_agent`` span, keeping ``gen_ai.operation.name`` ``invoke_workflow`` and
naming the workflow by ``gen_ai.agent.name`` instead of ``gen_ai.workflow.name``: the root
span carries both names.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Container, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from types import ModuleType
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from clearance._agents.telemetry import (
    TRACER_NAME,
    capture_content,
    mark_failed,
    span_id,
    tracing,
    tracing_for_run,
)
from clearance._agents.tools import BUILTIN_TOOL_NAMES, SPAWN_TOOL, ToolOutput
from clearance._core.spec import Team
from clearance.models._base import ToolCall

__all__ = [
    "NO_TOOL_SPAN",
    "ToolOutcome",
    "note_run",
    "note_run_outcome",
    "tool_span",
    "traced_run",
    "traced_spawns",
]

ToolOutcome = Callable[[ToolOutput], None]
"""Called with a tool call's output once it has one: records its error or (captured) result."""

_P = ParamSpec("_P")
_R = TypeVar("_R")

# The root span of the run going on in this context, with the orchestrator that opened it.
_RUN: ContextVar[tuple[object, Any] | None] = ContextVar("clearance_run_span", default=None)

_COUNTED = ("completed", "failed", "skipped")
"""Task statuses always counted on the root span (0 when no task has them)."""


class _Runs(Protocol):
    @property
    def team(self) -> Team: ...


_O = TypeVar("_O", bound=_Runs)


def traced_run(
    method: Callable[Concatenate[_O, _P], Awaitable[_R]],
) -> Callable[Concatenate[_O, _P], Awaitable[_R]]:
    """Run an orchestrator's async ``method`` in the run's root span, when tracing.

    The span is ``invoke_workflow {team name}`` (kind internal). A call made inside the
    root span of the same orchestrator (``run_team`` plans through ``plan``) stays in it;
    an orchestrator run inside another run's tool is a workflow span of its own under it.
    An exception leaving the method sets ``error.type`` (its class name) and the error
    status. Without tracing the method is awaited as it is. Whether the run is traced is
    decided once, as it starts (`tracing_for_run`).
    """

    @functools.wraps(method)
    async def traced(self: _O, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        current = _RUN.get()
        if current is not None and current[0] is self:  # `run_team` plans through `plan`
            return await method(self, *args, **kwargs)
        with tracing_for_run() as trace:  # decided once for every span of the run
            if trace is None:
                return await method(self, *args, **kwargs)
            name = self.team.name
            attributes = {
                "gen_ai.operation.name": "invoke_workflow",
                "gen_ai.workflow.name": name,
                "gen_ai.agent.name": name,  # the workflow's name from semconv-genai v0.1.0 on
            }
            with trace.get_tracer(TRACER_NAME).start_as_current_span(
                f"invoke_workflow {name}",
                attributes=attributes,
                record_exception=False,  # exception messages may quote what a server returned
                set_status_on_exception=False,
            ) as span:
                token = _RUN.set((self, span))
                try:
                    return await method(self, *args, **kwargs)
                except BaseException as exc:
                    mark_failed(trace, span, exc)
                    raise
                finally:
                    _RUN.reset(token)

    return traced


def note_run(run_id: str, *, resumed: bool) -> None:
    """Name the run on its root span, if any: ``clearance.run_id`` and ``clearance.resumed``."""
    current = _RUN.get()
    if current is not None:
        current[1].set_attributes({"clearance.run_id": run_id, "clearance.resumed": resumed})


def note_run_outcome(status: str, statuses: Iterable[str], *, error_type: str | None) -> None:
    """Record how the run ended on its root span, if there is one.

    Args:
        status: The run's status (``completed``, ``failed``, ``awaiting_approval``).
        statuses: The status of each task of the run; counted as ``clearance.tasks.<status>``
            (completed, failed and skipped always) and ``clearance.tasks.total``.
        error_type: Why a failed run failed (``tasks_failed``, ``synthesis_failed``), set as
            ``error.type`` with the error status; ``None`` when it did not fail.
    """
    current = _RUN.get()
    trace = tracing()
    if current is None or trace is None:
        return
    span = current[1]
    counts = Counter(dict.fromkeys(_COUNTED, 0))
    counts.update(str(s) for s in statuses)
    span.set_attributes({f"clearance.tasks.{status}": n for status, n in counts.items()})
    span.set_attributes({"clearance.tasks.total": counts.total(), "clearance.run.status": status})
    if error_type is not None:
        span.set_attribute("error.type", error_type)
        span.set_status(trace.StatusCode.ERROR, error_type)


def _ignore(output: ToolOutput) -> None:
    """The outcome hook when no span records."""


NO_TOOL_SPAN: AbstractContextManager[ToolOutcome] = nullcontext(_ignore)
"""The span of a tool call without tracing: a shared no-op (a `nullcontext` is reusable)."""


def tool_span(
    traced: bool, call: ToolCall, call_id: str, known: Container[str]
) -> AbstractContextManager[ToolOutcome]:
    """The ``execute_tool {tool name}`` span of one tool call (kind internal).

    Args:
        traced: Whether tracing is configured (`tracing_configured`, asked once per loop
            run); ``False`` gives `NO_TOOL_SPAN`.
        call: The model's tool call (name and arguments).
        call_id: The call's id in the run (``gen_ai.tool.call.id``).
        known: The names of the agent's tools: another name is shown as a digest.

    Returns:
        A context manager yielding the `ToolOutcome` hook; an exception leaving the block
        (a limit, an approval awaited, a cancellation) sets ``error.type`` (its class name).
    """
    if not traced:
        return NO_TOOL_SPAN
    return _tool_span(call, call_id, known)


@contextmanager
def _tool_span(call: ToolCall, call_id: str, known: Container[str]) -> Iterator[ToolOutcome]:
    trace = tracing()
    if trace is None:
        yield _ignore
        return
    span = _start_tool_span(trace, call, call_id, known)
    with trace.use_span(
        span, end_on_exit=True, record_exception=False, set_status_on_exception=False
    ):
        try:
            yield functools.partial(_tool_outcome, trace, span)
        except BaseException as exc:
            mark_failed(trace, span, exc)
            raise


async def traced_spawns(
    run: Awaitable[dict[str, ToolOutput]], calls: Sequence[tuple[str, dict[str, Any]]]
) -> dict[str, ToolOutput]:
    """Await the ``spawn`` calls of one model turn (``run``), each in its ``execute_tool`` span.

    The children run together, so each call's span covers the whole batch; the children's
    spans are under the caller's current span (its agent span), as siblings of these.

    Args:
        run: Runs the batch (`SpawnCalls`): each call id to its tool output.
        calls: The batch: ``(call id, arguments)`` of each spawn call.

    Returns:
        What ``run`` returns.
    """
    trace = tracing()
    if trace is None:
        return await run
    spans = {
        call_id: _start_tool_span(
            trace, ToolCall(id=call_id, name=SPAWN_TOOL, arguments=arguments), call_id,
            (SPAWN_TOOL,),
        )
        for call_id, arguments in calls
    }  # fmt: skip
    try:
        outputs = await run
        for call_id, span in spans.items():
            if call_id in outputs:
                _tool_outcome(trace, span, outputs[call_id])
        return outputs
    except BaseException as exc:
        for span in spans.values():
            mark_failed(trace, span, exc)
        raise
    finally:
        for span in spans.values():
            span.end()


def _start_tool_span(trace: ModuleType, call: ToolCall, call_id: str, known: Container[str]) -> Any:
    """Start (without making it current) the span of one tool call, its request attributes set."""
    name = call.name if call.name in known else span_id(call.name)
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": span_id(call_id),
        "gen_ai.tool.type": "datastore" if call.name in BUILTIN_TOOL_NAMES else "function",
    }
    if capture_content():
        attributes["gen_ai.tool.call.arguments"] = json.dumps(
            call.arguments, ensure_ascii=False, default=str
        )
    return trace.get_tracer(TRACER_NAME).start_span(
        f"execute_tool {name}", attributes=attributes, record_exception=False,
        set_status_on_exception=False,
    )  # fmt: skip


def _tool_outcome(trace: ModuleType, span: Any, output: ToolOutput) -> None:
    """Record a tool call's output: an MCP tool's type, the error, or the captured result."""
    if not span.is_recording():
        return
    if output.source is not None:  # it ran on an MCP server
        span.set_attribute("gen_ai.tool.type", "extension")
    if output.is_error:
        error_type = output.error_type or "tool_error"
        span.set_attribute("error.type", error_type)
        span.set_status(trace.StatusCode.ERROR, error_type)
    elif capture_content():
        span.set_attribute("gen_ai.tool.call.result", output.content)
