"""`RunHooks`: typed hooks for library users around a run, its tasks, model and tool calls.

A hook observes; it cannot change what a model sees behind the builder's back. It gets
frozen records (ids, names, the finished `Prompt`, usage, results) after the
`ContextBuilder` made the prompt, and what those methods return is ignored. The one way a
hook adds to a prompt is `RunHooks.task_context`: the items it returns enter the task's
prompt through the `ContextBuilder`, admitted by the task's clearance with their own origin
(``hook:<hook name>/<n>``), recorded (event ``hook_context``) and checked by ``clearance
verify`` like every other item. The shape follows
pydantic-ai's capabilities (``before_`` and ``after_`` around the run, model requests and
tool calls) and open-multi-agent's ``beforeRun``/``afterRun``.

Every method may be a plain function or a coroutine function. Hooks run in the order given,
in the run's event loop: a slow hook slows the run. An exception raised by a hook is not
swallowed: raised around a task or a call, it fails that task like any error of the task;
raised around the run, it stops the run (recorded ``interrupted``, resumable); a
``SystemExit``, ``GeneratorExit`` or ``CancelledError`` of the hook's own too. A coroutine
method has a deadline, the hook's `RunHooks.timeout_s` (a minute by default): one that has
not returned by then is cancelled and fails like a hook that raised (`LimitExceeded`,
naming the hook and the method). A plain function cannot be interrupted: one that blocks
blocks the run, so a hook that waits on anything should be a coroutine.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from clearance._core.errors import ConfigError, LimitExceeded
from clearance._core.names import check_label, check_seconds, check_utf8

if TYPE_CHECKING:
    from clearance._core.prompt import Prompt

__all__ = [
    "HOOK_TIMEOUT_S",
    "MAX_HOOK_CONTEXT_CHARS",
    "MAX_HOOK_ITEMS",
    "MAX_HOOK_TIMEOUT_S",
    "HookRunner",
    "ModelCallInfo",
    "RunHooks",
    "RunInfo",
    "TaskInfo",
    "ToolCallInfo",
    "check_hook_timeouts",
]

MAX_HOOK_ITEMS = 100
"""Most items one hook may offer one task (`RunHooks.task_context`)."""

MAX_HOOK_CONTEXT_CHARS = 1_000_000
"""Most characters (titles and texts together) one hook may offer one task; more fails the
task (`LimitExceeded` ``max_hook_context_chars``, naming the hook), the text is never cut."""

HOOK_TIMEOUT_S = 60.0
"""Default `RunHooks.timeout_s`: most seconds one call of a coroutine hook method may take."""

MAX_HOOK_TIMEOUT_S = 86_400.0
"""Longest `RunHooks.timeout_s` allowed, in seconds (a day)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunInfo:
    """A run, as hooks see it: its id and goal."""

    run_id: str
    goal: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskInfo:
    """A task of a run: its id, its assignee and its run."""

    run_id: str
    task_id: str
    agent: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelCallInfo:
    """A model call: what it serves (``task:<id>``...), for whom, to which model, the prompt.

    ``prompt`` is the call's `Prompt` with copies of its manifest's ``clearance`` and
    ``compression`` (the only parts that are not frozen): editing them changes neither the
    call nor its record.
    """

    run_id: str | None
    subject: str
    agent: str
    model_id: str
    prompt: Prompt

    def __post_init__(self) -> None:
        manifest = self.prompt.manifest
        if manifest.clearance is None and manifest.compression is None:
            return
        copied = dataclasses.replace(
            manifest,
            clearance=copy.deepcopy(manifest.clearance),
            compression=copy.deepcopy(manifest.compression),
        )
        object.__setattr__(self, "prompt", dataclasses.replace(self.prompt, manifest=copied))


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallInfo:
    """A tool call a model asked for: its id, what it serves, for whom, name and arguments."""

    run_id: str
    call_id: str
    subject: str
    agent: str
    name: str
    arguments: Mapping[str, Any]


class RunHooks:
    """Base class of hooks: override the methods you need; each is a no-op here.

    Give instances to ``Orchestrator(team, services=RunServices(hooks=(...)))``. See the
    module docstring for what a hook can and cannot do.

    Attributes:
        timeout_s: Most seconds one call of a coroutine method may take (above 0, at most
            `MAX_HOOK_TIMEOUT_S`; `HOOK_TIMEOUT_S` by default). Past it the call is
            cancelled and raises `LimitExceeded`.
    """

    timeout_s: float = HOOK_TIMEOUT_S

    def before_run(self, run: RunInfo) -> Any:
        """Before a run (or a resumed session of one) runs its first task."""

    def after_run(self, run: RunInfo, *, status: str, error: str | None) -> Any:
        """After a run finished.

        ``status`` is ``completed``, ``failed`` or ``awaiting_approval``; ``error`` says why
        it did not complete, or ``None``.
        """

    @property
    def name(self) -> str:
        """The hook's name in origins (``hook:<name>/<n>``); its class name by default."""
        return type(self).__name__

    def before_task(self, task: TaskInfo) -> Any:
        """Before a task runs (after its approval, if it needs one)."""

    def task_context(self, task: TaskInfo) -> Any:
        """Items to add to the task's prompt: ``(title, text)`` pairs, or ``None``.

        They are rendered under ``## From hooks``, one block each, with the origin
        ``hook:<name>/<n>`` (``n`` from 1), admitted and recorded like any item. At most
        `MAX_HOOK_ITEMS` items and `MAX_HOOK_CONTEXT_CHARS` characters: more fails the task.
        """

    def after_task(self, task: TaskInfo, *, result: str | None, error: str | None) -> Any:
        """After a task: its result, or (``result`` ``None``) why it failed."""

    def before_model_call(self, call: ModelCallInfo) -> Any:
        """Before a model call is sent (its prompt already built and admitted)."""

    def after_model_call(
        self, call: ModelCallInfo, *, text: str | None, usage: Any, error: str | None
    ) -> Any:
        """After a model call: its text and `Usage`, or (``text`` ``None``) why it failed."""

    def before_tool_call(self, call: ToolCallInfo) -> Any:
        """Before a tool call of a tool loop runs."""

    def after_tool_call(self, call: ToolCallInfo, *, result: str, is_error: bool) -> Any:
        """After a tool call ran: what the model is given back, and whether it is an error."""


def _checked_items(name: str, offered: Any) -> list[tuple[str, str, str]]:
    """One hook's offer as ``(ref, title, text)`` items (see `HookRunner.context`)."""
    if offered is None:
        return []
    if isinstance(offered, str | bytes | Mapping) or not isinstance(offered, Iterable):
        raise ConfigError(f"hook {name!r} offered {type(offered).__name__}: give a list of "
                          "(title, text) pairs of strings", field="hooks")  # fmt: skip
    items: list[tuple[str, str, str]] = []
    chars = 0
    for n, pair in enumerate(offered, 1):  # a generator is read no further than the caps
        if n > MAX_HOOK_ITEMS:
            raise ConfigError(f"hook {name!r} offered more than {MAX_HOOK_ITEMS} items",
                              field="hooks")  # fmt: skip
        parts = tuple(pair) if isinstance(pair, tuple) else ()  # read once: no second look
        if not (len(parts) == 2 and all(isinstance(p, str) for p in parts)):
            raise ConfigError(
                f"hook {name!r} offered {pair!r:.200}: give (title, text) pairs of strings",
                field="hooks",
            )
        # Plain copies: a subclass's own __str__, __format__ or methods could show the
        # model other text than the one checked here and recorded.
        title, text = (str.__str__(p) for p in parts)
        chars += len(title) + len(text)
        if chars > MAX_HOOK_CONTEXT_CHARS:
            raise LimitExceeded(
                "max_hook_context_chars", value=chars, maximum=MAX_HOOK_CONTEXT_CHARS,
                subject=f"hook {name}.task_context",
                hint="offer less text, or a reference the task can read",
            )  # fmt: skip
        check_label(f"hooks.{name}.{n}.title", title)
        check_utf8(f"hooks.{name}.{n}", title, text)
        items.append((f"{name}/{n}", title, text))
    return items


def check_hook_timeouts(hooks: Iterable[object]) -> list[float]:
    """Each hook's ``timeout_s`` in seconds (`HOOK_TIMEOUT_S` for a hook without one).

    Raises:
        ConfigError: One is not a number of seconds above 0 and at most `MAX_HOOK_TIMEOUT_S`
            (the message names ``hooks.<name>.timeout_s``).
    """
    return [
        check_seconds(f"hooks.{_name(hook)}.timeout_s",
                      getattr(hook, "timeout_s", HOOK_TIMEOUT_S), most=MAX_HOOK_TIMEOUT_S)
        for hook in hooks
    ]  # fmt: skip


def _name(hook: object) -> str:
    """A hook's name (`RunHooks.name`, else its class name), as a plain ``str``."""
    return str.__str__(str(getattr(hook, "name", type(hook).__name__)))


async def _call(
    hook: object,
    method: str,
    timeout_s: float,
    function: Callable[..., Any],
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """What a hook's ``method`` (``function``) returns for ``args``, bounded by `_bounded`.

    A ``SystemExit``, ``GeneratorExit`` or ``CancelledError`` the hook raises itself (the
    task it runs in is not being cancelled) would stop the run, or the event loop: it
    fails like any other error the hook raises.

    Raises:
        RuntimeError: The hook raised one of those (``hook <name>.<method> raised <class>``).
    """
    try:
        return await _bounded(hook, method, timeout_s, function(*args, **kwargs))
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # the run is cancelled: let it stop
            raise
        raise RuntimeError(f"hook {_name(hook)}.{method} raised CancelledError") from exc
    except (SystemExit, GeneratorExit) as exc:
        raise RuntimeError(f"hook {_name(hook)}.{method} raised {type(exc).__name__}") from exc


async def _bounded(hook: object, method: str, timeout_s: float, outcome: Any) -> Any:
    """``outcome`` of a hook's ``method``, awaited within ``timeout_s`` if it is awaitable.

    Raises:
        LimitExceeded: It did not finish in time (it is cancelled).
    """
    if not inspect.isawaitable(outcome):
        return outcome
    started = time.monotonic()
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            return await outcome
    except TimeoutError:
        if not deadline.expired():  # the hook's own failure, not its deadline
            raise
        raise LimitExceeded(
            "timeout_s", value=round(time.monotonic() - started, 3), maximum=timeout_s,
            subject=f"hook {_name(hook)}.{method}", hint="the hook did not return in time",
        ) from None  # fmt: skip


class _Output(Protocol):
    @property
    def content(self) -> str: ...

    @property
    def is_error(self) -> bool: ...


_O = TypeVar("_O", bound=_Output)


class HookRunner:
    """Calls every hook's method in order, awaiting those that are coroutines.

    Args:
        hooks: The hooks (`RunHooks` instances, or objects with some of its methods; one
            without ``timeout_s`` has `HOOK_TIMEOUT_S`).

    Raises:
        ConfigError: A hook's ``timeout_s`` is not a number of seconds above 0 and at most
            `MAX_HOOK_TIMEOUT_S` (the message names ``hooks.<name>.timeout_s``).
    """

    def __init__(self, hooks: Iterable[RunHooks] = ()) -> None:
        self.hooks = tuple(hooks)
        self._timeouts = check_hook_timeouts(self.hooks)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Call ``method`` of every hook that has it; what they return is ignored.

        Raises:
            LimitExceeded: A coroutine method did not return within its hook's ``timeout_s``.
            Exception: What a hook raised (see the module docstring).
        """
        for hook, timeout_s in zip(self.hooks, self._timeouts, strict=True):
            function = getattr(hook, method, None)
            if function is None:
                continue
            await _call(hook, method, timeout_s, function, *args, **kwargs)

    async def context(self, info: TaskInfo) -> list[tuple[str, str, str]]:
        """Every hook's `RunHooks.task_context` items as ``(ref, title, text)``.

        ``ref`` is ``<hook name>/<n>``.

        Raises:
            LimitExceeded: A coroutine ``task_context`` did not return within its hook's
                ``timeout_s``.
            ConfigError: Two hooks share a name (or one is not one line, or holds ``/``), a
                hook offers something else than an iterable of ``(title, text)`` pairs of
                strings, a title that is not one line, or more than `MAX_HOOK_ITEMS` items.
            LimitExceeded: A hook offers more than `MAX_HOOK_CONTEXT_CHARS` characters
                (``max_hook_context_chars``; the task fails, nothing is cut).
        """
        items: list[tuple[str, str, str]] = []
        names: set[str] = set()
        for hook, timeout_s in zip(self.hooks, self._timeouts, strict=True):
            function = getattr(hook, "task_context", None)
            if function is None:
                continue
            name = _name(hook)
            check_label("hooks", name)
            if name in names or "/" in name:
                raise ConfigError(f"hook names must be unique, without '/': {name!r}",
                                  field="hooks")  # fmt: skip
            names.add(name)
            offered = await _call(hook, "task_context", timeout_s, function, info)
            items.extend(_checked_items(name, offered))
        return items

    async def run_tool(
        self, tool: Any, call: Any, *, run_id: str, call_id: str, subject: str, agent: str
    ) -> Any:
        """Run a tool loop's ``tool`` for ``call`` (name, arguments) as `agent`, hooked."""
        info = ToolCallInfo(run_id=run_id, call_id=call_id, subject=subject, agent=agent,
                            name=call.name, arguments=call.arguments)  # fmt: skip
        return await self.tool_call(info, lambda: tool.call(call.arguments, agent=agent))

    async def tool_call(self, info: ToolCallInfo, run: Callable[[], Awaitable[_O]]) -> _O:
        """Run a tool call (``run``) with ``before_tool_call`` and ``after_tool_call`` around."""
        if not self.hooks:
            return await run()
        info = ToolCallInfo(
            run_id=info.run_id,
            call_id=info.call_id,
            subject=info.subject,
            agent=info.agent,
            name=info.name,
            arguments=copy.deepcopy(dict(info.arguments)),
        )  # a deep copy: no hook can edit what the tool runs with, nested values included
        await self("before_tool_call", info)
        output = await run()
        await self("after_tool_call", info, result=output.content, is_error=output.is_error)
        return output
