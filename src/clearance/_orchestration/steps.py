"""Non-model tasks: a task with ``run:`` calls a Python function instead of a model.

``run: step:<name>`` names a built-in analysis step (`clearance.analysis.STEPS`);
``run: python:<module>:<function>`` imports a function the team file's author provides
(trusted like the team file itself). The function receives a `StepInput` (the task's files,
read through the confined reader, and the admitted results: the same need-to-know view a
model task gets) and returns text, or JSON-ready data that becomes canonical JSON. It runs
in a thread of its own under a deadline; its output is capped. A step past its deadline
fails its task at once; its thread (a Python thread cannot be stopped) is a daemon that
nothing waits for, so the run and the process end on time.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from clearance._context.clearance import Clearance
from clearance._core.daemon_threads import in_daemon_thread
from clearance._core.errors import ClearanceError, ConfigError, LimitExceeded
from clearance._core.prompt import sha256_text
from clearance._core.spec import Task
from clearance._core.step_input import StepInput
from clearance._core.user_modules import import_user_module
from clearance._core.vocabulary import EventKind
from clearance._orchestration.files import read_task_files
from clearance._state.queue import TaskQueue, TaskStatus
from clearance.analysis import STEPS, StepFunction

__all__ = [
    "MAX_STEP_OUTPUT_CHARS",
    "STEP_MAX_FILE_BYTES",
    "STEP_MAX_TOTAL_BYTES",
    "STEP_TIMEOUT_S",
    "EventRecorder",
    "StepError",
    "resolve_step",
    "run_step",
    "run_task_step",
]

STEP_TIMEOUT_S = 300.0
"""Deadline of one step, in seconds."""
MAX_STEP_OUTPUT_CHARS = 1_000_000
"""Most characters a step's output may hold."""
STEP_MAX_FILE_BYTES = 4 * 1024 * 1024
"""Largest file a step is given (a step reads facts from a file, it does not prompt a model)."""
STEP_MAX_TOTAL_BYTES = 64 * 1024 * 1024
"""Most bytes of all the files one step is given together."""


class StepError(ClearanceError):
    """A non-model task's function failed or returned something unusable."""


def step_target(task: Task) -> StepFunction | tuple[str, str]:
    """What a task's ``run`` names, without importing anything.

    A built-in step's function, or the ``(module, function)`` of a ``python:`` step.

    Raises:
        ConfigError: The task has no ``run``, or names an unknown ``step:``.
    """
    spec = task.run
    where = f"tasks.{task.id}.run"
    if spec is None:
        raise ConfigError("the task has no run", field=where)
    if spec.startswith("step:"):
        name = spec.removeprefix("step:")
        if name not in STEPS:
            raise ConfigError(
                f"unknown step {name!r} (steps: {', '.join(sorted(STEPS))})", field=where
            )
        return STEPS[name]
    module_name, _, function = spec.removeprefix("python:").rpartition(":")
    return module_name, function


def resolve_step(task: Task) -> StepFunction:
    """The function a task's ``run`` names.

    Raises:
        ConfigError: Unknown step, module that cannot be imported, or no such callable.
    """
    target = step_target(task)
    if not isinstance(target, tuple):
        return target
    module_name, function = target
    where = f"tasks.{task.id}.run"
    try:
        module = import_user_module(module_name)
    except (Exception, SystemExit) as exc:  # an import runs code: any failure is bad config
        raise ConfigError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}", field=where
        ) from None
    found = getattr(module, function, None)
    if not callable(found):
        raise ConfigError(f"{module_name!r} has no function {function!r}", field=where)
    if inspect.iscoroutinefunction(found) or inspect.isasyncgenfunction(found):
        raise ConfigError(
            f"'{module_name}:{function}' is an async function: a step is a plain function "
            "(it runs in a thread of its own)",
            field=where,
        )
    return found  # type: ignore[no-any-return]


def _as_text(task_id: str, value: Any) -> str:
    if inspect.isawaitable(value):
        if inspect.iscoroutine(value):
            value.close()  # never run: no "never awaited" warning on the terminal
        raise StepError(
            f"task {task_id!r}: the step returned a {type(value).__name__}: a step is a plain "
            "function that returns text or JSON-ready data"
        )
    if isinstance(value, str):
        text = str.__str__(value)  # a plain copy: a subclass's strip or len could lie
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise StepError(
                f"task {task_id!r}: the step returned neither text nor JSON-ready data: "
                f"{_described(exc)}"
            ) from None
    if len(text) > MAX_STEP_OUTPUT_CHARS:
        raise LimitExceeded(
            "max_step_output_chars", value=len(text), maximum=MAX_STEP_OUTPUT_CHARS,
            subject=f"task:{task_id}",
        )  # fmt: skip
    if not text.strip():
        raise StepError(f"task {task_id!r}: the step returned an empty result")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StepError(
            f"task {task_id!r}: the step returned text that is not valid Unicode "
            f"({exc.reason} at position {exc.start})"
        ) from None
    return text


@dataclass(frozen=True, slots=True)
class _Raised:
    """What a step's thread raised, handed back as a value (see `_called`)."""

    error: BaseException


def _called(task: Task, step: StepInput) -> str | _Raised:
    """The task's function called on ``step``, as text (`_as_text`), in the step's thread.

    The function is found (`resolve_step`: a ``python:`` module imported, running its
    module-level code) in the thread too, so an import that hangs is held to the step's
    deadline instead of stopping the event loop. Whatever either raises is returned, never
    raised: a `StopIteration` cannot be set on a future (the step would wait for its
    deadline), and a `SystemExit` or `KeyboardInterrupt` raised into the event loop would
    stop the whole run.
    """
    try:
        return _as_text(step.task_id, resolve_step(task)(step))
    except BaseException as exc:  # every kind: turned into the task's failure by `run_step`
        return _Raised(exc)


def _described(exc: BaseException) -> str:
    """``Type: message`` of an exception whose ``__str__`` may itself fail."""
    try:
        message = str(exc)
    except Exception:  # a step's own exception class: its name is all there is
        message = "(its message cannot be shown)"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


async def run_step(
    task: Task,
    *,
    files: Mapping[str, str],
    results: Mapping[str, str],
    failed: Mapping[str, str],
    input_name: str,
    timeout_s: float | None = None,
) -> str:
    """Run a task's ``run`` function in a thread of its own and return its result text.

    ``timeout_s`` is the deadline in seconds; ``None`` means `STEP_TIMEOUT_S`.

    Returns:
        The function's text, or its JSON-ready value as canonical JSON (sorted keys,
        indent 2).

    Raises:
        ConfigError: The function cannot be found (see `resolve_step`).
        LimitExceeded: ``timeout_s`` passed, or the output is over `MAX_STEP_OUTPUT_CHARS`.
        StepError: The function raised (any exception: `StopIteration`, `SystemExit` and
            `KeyboardInterrupt` fail the task too, not the run), or returned nothing usable
            (not text or JSON-ready data, empty, not valid Unicode).
    """
    step = StepInput(
        task_id=task.id, title=task.title, description=task.description, files=dict(files),
        results=dict(results), failed=dict(failed), input_name=input_name,
    )  # fmt: skip
    if timeout_s is None:
        timeout_s = STEP_TIMEOUT_S
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            value = await in_daemon_thread(_called, task, step, name=f"clearance-step-{task.id}")
    except TimeoutError:
        raise LimitExceeded(
            "step_timeout_s", value=timeout_s, maximum=timeout_s, subject=f"task:{task.id}"
        ) from None
    if isinstance(value, str):
        return value
    error = value.error  # a `_Raised`
    if isinstance(error, ClearanceError):
        raise error
    raise StepError(f"task {task.id!r}: {task.run} raised {_described(error)}") from error


async def run_task_step(
    task: Task,
    *,
    queue: TaskQueue,
    input_root: Path | None,
    recorder: EventRecorder,
    run_id: str,
) -> str:
    """Run a ``run:`` task of a run: read its files, gather its admitted results, call it.

    The files are read through the confined reader (at most `STEP_MAX_FILE_BYTES` each,
    `STEP_MAX_TOTAL_BYTES` together);
    the results are those its clearance admits (`Clearance.for_task`), failed or skipped
    ones by their reason only. One ``step`` event records the function and the SHA-256 of
    every input and of the output.

    Raises:
        ConfigError, LimitExceeded, StepError, PathEscapeError: See `run_step` and
            `read_task_files`.
    """
    files: dict[str, str] = {}
    total = 0
    for path in dict.fromkeys(task.files):  # one at a time: the total is capped as it grows
        assert input_root is not None  # checked before the run started
        files.update(read_task_files(input_root, [path], max_file_bytes=STEP_MAX_FILE_BYTES))
        total += len(files[path].encode("utf-8"))
        if total > STEP_MAX_TOTAL_BYTES:
            raise LimitExceeded(
                "step_max_total_bytes", value=total, maximum=STEP_MAX_TOTAL_BYTES,
                subject=f"task:{task.id}",
            )  # fmt: skip
    admitted = Clearance.for_task(queue.graph, task.id).result_task_ids
    results: dict[str, str] = {}
    failed: dict[str, str] = {}
    for tid in sorted(admitted, key=queue.graph.position):
        state = queue.get(tid)
        if state.status is TaskStatus.COMPLETED:
            results[tid] = state.result or ""
        elif state.status in (TaskStatus.FAILED, TaskStatus.SKIPPED):
            failed[tid] = state.error or str(state.status)
    text = await run_step(
        task, files=files, results=results, failed=failed,
        input_name=input_root.name if input_root is not None else "",
    )  # fmt: skip
    recorder.record_event(run_id, EventKind.STEP, f"task:{task.id}", {
        "run": task.run,
        "files": {p: sha256_text(c) for p, c in files.items()},
        "results": {t: sha256_text(r) for t, r in results.items()},
        "failed": sorted(failed),
        "sha256": sha256_text(text),
    })  # fmt: skip
    return text


class EventRecorder(Protocol):
    """Where a step's event is recorded (`RunLedger`)."""

    def record_event(self, run_id: str, kind: EventKind, subject: str, data: dict[str, Any]) -> str:
        """Record one event; return its id."""
        ...
