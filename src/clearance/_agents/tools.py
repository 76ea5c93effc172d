"""Tools: plain typed Python functions, described to models in the OpenAI function format.

`Tool.from_function` derives a tool's JSON Schema from the function's signature (with
pydantic, so arguments are validated and coerced the same way) and its description from
the docstring's first paragraph. A tool returns text, or any JSON-serializable value (sent
as JSON). The built-in store tools are in `store_tools.py`.

A function tool is the user's code: each call has a deadline (``timeout_s``, `TOOL_TIMEOUT_S`
by default; past it the model is told so and the run goes on), and a plain (not ``async``)
function runs in a daemon thread of its own (`in_daemon_thread`), so a tool that blocks holds
up neither the other tasks nor the end of the run.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import functools
import inspect
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast, get_type_hints

from pydantic import ConfigDict, ValidationError, create_model

from clearance._agents.tool_arguments import (
    MAX_TOOL_NAME_CHARS,
    NOT_UTF8_ARGUMENTS,
    checked_tool_call,
    refused_arguments,
)
from clearance._agents.tool_failures import (
    Raised,
    as_text,
    caught,
    described,
    goes_on,
    tool_error_text,
    utf8_text,
)
from clearance._context.tool_sections import DELEGATE_TOOL, STORE_TOOLS, tool_name
from clearance._core import user_modules
from clearance._core.agent_spec import MAX_TOOL_TIMEOUT_S, TOOL_TIMEOUT_S
from clearance._core.daemon_threads import in_daemon_thread
from clearance._core.errors import ConfigError
from clearance._core.schema_check import schema_errors
from clearance._core.spec import Agent
from clearance._core.user_modules import ImportFailed, import_user_module, split_import_path
from clearance._core.vocabulary import EventKind
from clearance.models._base import ToolCall

if TYPE_CHECKING:  # the ledger and the store (and SQLAlchemy) load only when a run uses them
    from clearance._state.ledger import Recorder
    from clearance._state.store import StoreEntry

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "DELEGATE_TOOL",
    "MAX_TOOL_TIMEOUT_S",
    "NOT_UTF8_ARGUMENTS",
    "SPAWN_TOOL",
    "TOOL_TIMEOUT_S",
    "Tool",
    "ToolOutput",
    "check_arguments",
    "check_function_name",
    "check_tool_timeout",
    "checked_tool_call",
    "import_function",
    "spawn_tool",
    "mark_tool",
    "record_started",
    "tool_caller",
    "tool_marks",
    "tool_name",
]

BUILTIN_TOOL_NAMES = STORE_TOOLS
"""Names of the built-in store tools, bound to the agent's scoped store view."""

SPAWN_TOOL = "spawn"
"""The tool an agent with ``can_spawn`` gets: ``spawn(agent, goal)``."""

_CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "clearance_tool_caller", default=None
)


def tool_caller() -> str | None:
    """The agent whose call of a tool is running (see `Tool.call`), or ``None``.

    MCP tools use it to give each agent its own server folder.
    """
    return _CALLER.get()


def _failed(name: str, exc: BaseException) -> ToolOutput:
    """Tool ``name``'s failure ``exc`` as an error output (`tool_error_text`)."""
    return ToolOutput(content=tool_error_text(name, exc), is_error=True,
                      error_type=type(exc).__name__)  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolOutput:
    """What a tool call produced.

    Attributes:
        content: The text the model will see (an error message when ``is_error``).
        is_error: Whether the call failed (bad arguments, denied access, refused delegation).
        store_reads: Store entries the call read; each enters the next prompt as its own
            item with origin ``store:<namespace>/<key>``.
        source: Where an external tool ran (an MCP call: server, tool, transport, address,
            result size, whether it was cut), recorded in the ledger as an ``mcp_call``
            event; ``None`` for tools that run in this process.
        error_type: The class name of the exception the tool raised, for its span's
            ``error.type``; ``None`` when it raised none.
    """

    content: str
    is_error: bool = False
    store_reads: tuple[StoreEntry, ...] = ()
    source: dict[str, Any] | None = None
    error_type: str | None = None


ToolFunction = Callable[..., Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Tool:
    """A tool a model may call.

    Attributes:
        name: The name the model calls it by.
        description: What it does, for the model.
        parameters: JSON Schema of its arguments (an object).
        run: Called with the validated arguments; returns a `ToolOutput` (sync or async).
        idempotent: Running a call twice does no more than running it once: a call the
            process may have stopped inside runs again on resume without asking a person.
        replay: ``False`` for a live value (the time, a job's state): on resume the call
            runs again instead of giving back its recorded result.
        timeout_s: Seconds one call may take; past it `call` gives the model an error
            (the run goes on). ``None``: no deadline of the tool's own (the built-in store
            tools; an MCP tool has its server's ``timeout_s``). A function tool's is
            `TOOL_TIMEOUT_S` unless `mark_tool` says otherwise.

    Raises:
        ConfigError: ``name`` is not a function name (`check_function_name`), or
            ``timeout_s`` is not seconds in (0, `MAX_TOOL_TIMEOUT_S`].
    """

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any]], ToolOutput | Awaitable[ToolOutput]] = field(repr=False)
    idempotent: bool = False
    replay: bool = True
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        check_function_name(self.name)
        check_tool_timeout(self.timeout_s, allow_none=True)

    def to_openai(self) -> dict[str, Any]:
        """The tool in the OpenAI function-calling format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    async def call(self, arguments: dict[str, Any], *, agent: str | None = None) -> ToolOutput:
        """Run the tool; an exception becomes an error output (the run goes on).

        Arguments `refused_arguments` refuses (text that is not valid UTF-8, a NaN or
        infinite number, arguments that were no JSON object) are not passed on: the output
        is an error saying so. ``agent`` names the calling agent while
        the tool runs (`tool_caller`).
        """
        if (refusal := refused_arguments(arguments, self.parameters)) is not None:
            return ToolOutput(content=refusal, is_error=True)
        token = _CALLER.set(agent)
        deadline = asyncio.timeout(self.timeout_s)  # None: no deadline
        try:
            async with deadline:
                result = self.run(arguments)
                if inspect.isawaitable(result):
                    result = await result
        except BaseException as exc:  # a tool's failure is reported to the model, not raised
            if goes_on(exc):  # Ctrl-C, or the run's own cancellation: not the tool's failure
                raise
            if isinstance(exc, TimeoutError) and deadline.expired():
                return ToolOutput(
                    content=f"error: the tool {self.name!r} did not return within "
                    f"{self.timeout_s:g} s (its timeout_s); it was abandoned",
                    is_error=True, error_type="TimeoutError",
                )  # fmt: skip
            return _failed(self.name, exc)
        finally:
            _CALLER.reset(token)
        assert isinstance(result, ToolOutput)
        return dataclasses.replace(result, content=utf8_text(result.content))

    @classmethod
    def from_function(cls, function: ToolFunction, *, name: str | None = None) -> Tool:
        """A tool from a typed Python function (sync or async).

        Every parameter needs a type hint; defaults make a parameter optional. Arguments are
        validated by pydantic before the call; invalid ones produce an error output naming
        the problem. A ``str`` result is sent as is, anything else as JSON. The tool is
        idempotent, opts out of replay and has the deadline (``timeout_s``, seconds;
        `TOOL_TIMEOUT_S` by default) that `mark_tool` declared on the function. A plain
        function runs in a daemon thread of its own (the event loop goes on meanwhile); an
        ``async`` one on the run's event loop.

        Args:
            function: The function.
            name: The tool's name; the function's ``__name__`` if ``None``.

        Raises:
            ConfigError: A parameter has no type hint or is ``*args``/``**kwargs``, or the
            signature cannot be read.
        """
        tool_name: str = name or str(getattr(function, "__name__", repr(function)))
        check_function_name(tool_name)
        try:
            signature = inspect.signature(function)
            hints = get_type_hints(function)
        except Exception as exc:  # a built-in without one, or hints that do not resolve
            raise ConfigError(
                f"tool {tool_name!r}: cannot read its parameters and their types: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        fields: dict[str, Any] = {}
        for param in signature.parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {tool_name!r}: *args and **kwargs are not supported")
            if param.name not in hints:
                raise ConfigError(f"tool {tool_name!r}: parameter {param.name!r} has no type hint")
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (hints[param.name], default)
        model = create_model(
            f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
        schema = model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        doc = inspect.getdoc(function) or tool_name
        description = doc.split("\n\n", 1)[0].replace("\n", " ")

        async def run(arguments: dict[str, Any]) -> ToolOutput:
            try:
                values = model.model_validate(arguments)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                    for e in exc.errors()
                )
                return ToolOutput(content=f"error: invalid arguments: {problems}", is_error=True)
            kwargs = {k: getattr(values, k) for k in fields}
            if threaded:  # the user's blocking code: off the event loop, in its own thread
                called = caught(functools.partial(function, **kwargs))
                result = await in_daemon_thread(called, name=f"clearance-tool-{tool_name}")
                if isinstance(result, Raised):  # whatever it raised, never into the loop
                    return _failed(tool_name, result.error)
            else:
                result = function(**kwargs)
            if inspect.isawaitable(result):
                result = await result
            return ToolOutput(content=as_text(result))

        threaded = not inspect.iscoroutinefunction(function)
        return cls(name=tool_name, description=description, parameters=schema, run=run,
                   **tool_marks(function))  # fmt: skip


_FLAGS = "__clearance_tool__"


def tool_marks(function: Callable[..., Any]) -> dict[str, Any]:
    """``function``'s `mark_tool` marks: ``idempotent``, ``replay`` and ``timeout_s``.

    Returns:
        The three, each as marked, or its default (`Tool`'s; `TOOL_TIMEOUT_S`) if unmarked.
    """
    marks = getattr(function, _FLAGS, {})
    return {
        "idempotent": bool(marks.get("idempotent", False)),
        "replay": bool(marks.get("replay", True)),
        "timeout_s": float(marks.get("timeout_s", TOOL_TIMEOUT_S)),
    }


_FUNCTION_NAME = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_TOOL_NAME_CHARS}}}")
"""A name a model may call any tool by (an MCP tool's ``mcp__<server>__<tool>`` is up to 128
characters), within the ledger's ``tool_calls.name`` column; a user tool's name is held to the
stricter rule of a team file's ``tools:`` (`check_tool_name`)."""


def check_function_name(name: object) -> None:
    """Check a tool's name: 1 to `MAX_TOOL_NAME_CHARS` letters, digits, ``_``, ``.`` or ``-``.

    Raises:
        ConfigError: It is not (the message shows the start of it).
    """
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        shown = repr(name)
        shown = shown if len(shown) <= 60 else f"{shown[:60]}..."
        raise ConfigError(
            f"a tool's name is what a model calls: 1-{MAX_TOOL_NAME_CHARS} letters, digits, "
            f"'_', '.' or '-', got {shown}",
            field="name",
        )


def check_tool_timeout(timeout_s: object, *, allow_none: bool = False) -> None:
    """Check a tool's ``timeout_s``: seconds in (0, `MAX_TOOL_TIMEOUT_S`].

    Raises:
        ConfigError: It is not a number in that range (or ``None`` where allowed).
    """
    if timeout_s is None and allow_none:
        return
    ok = isinstance(timeout_s, int | float) and not isinstance(timeout_s, bool)
    if not ok or not (0 < timeout_s <= MAX_TOOL_TIMEOUT_S and math.isfinite(timeout_s)):  # type: ignore[operator,arg-type]
        raise ConfigError(
            f"a tool's timeout_s must be seconds in (0, {MAX_TOOL_TIMEOUT_S:g}], got {timeout_s!r}",
            field="timeout_s",
        )


def mark_tool(
    function: ToolFunction,
    *,
    idempotent: bool = False,
    replay: bool = True,
    timeout_s: float = TOOL_TIMEOUT_S,
) -> None:
    """Declare a function tool's resume behaviour and deadline (read by `Tool.from_function`).

    Args:
        function: The tool's function (its attribute ``__clearance_tool__`` is set).
        idempotent: See `Tool.idempotent`.
        replay: See `Tool.replay`.
        timeout_s: Seconds one call may take (see `Tool.timeout_s`).

    Raises:
        ConfigError: The function takes no attributes (a built-in; see `marked_tool`), or
            ``timeout_s`` is not in (0, `MAX_TOOL_TIMEOUT_S`].
    """
    check_tool_timeout(timeout_s)
    flags = {"idempotent": idempotent, "replay": replay, "timeout_s": float(timeout_s)}
    try:
        setattr(function, _FLAGS, flags)
    except (AttributeError, TypeError) as exc:
        raise ConfigError(f"cannot mark {function!r} as a tool: {exc}") from exc


def marked_tool(
    function: Callable[..., Any],
    *,
    idempotent: bool = False,
    replay: bool = True,
    timeout_s: float = TOOL_TIMEOUT_S,
) -> Callable[..., Any]:
    """A wrapper of ``function`` marked with `mark_tool`, leaving ``function`` itself alone.

    For a team file's ``tools:`` entry with ``idempotent``, ``replay`` or ``timeout_s``: the
    imported function may be a built-in (which takes no attribute) or shared with other code
    (whose marks would change). The wrapper keeps its name, module, signature, type hints and
    whether it is ``async``.
    """
    wrapper: Callable[..., Any]
    if inspect.iscoroutinefunction(function):  # stays async: it runs on the event loop

        @functools.wraps(function)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            return await function(*args, **kwargs)

    else:

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

    # Its own hints (``*args: Any``) are not the function's: a built-in has none to copy.
    wrapper.__annotations__ = dict(getattr(function, "__annotations__", {}))
    mark_tool(wrapper, idempotent=idempotent, replay=replay, timeout_s=timeout_s)
    return wrapper


async def record_started(
    ledger: Recorder, run_id: str, subject: str, *, step: int, call_id: str, call: ToolCall,
    tool: Tool,
) -> None:  # fmt: skip
    """Record that a tool call is about to run, and wait until that is committed.

    The ``tool_started`` event (``tool_call_id``, ``step``, ``name``, ``arguments_sha256``,
    ``idempotent``, ``replay``) without a later tool call record tells a resume that the
    call may have run (see `clearance._agents.replay`).

    Raises:
        StoreError: The event could not be recorded (the tool has not run).
    """
    from clearance._context.verify_approvals import arguments_sha256  # the ledger's reader

    ledger.record_event(run_id, EventKind.TOOL_STARTED, subject, {
        "tool_call_id": call_id, "step": step, "name": call.name,
        "arguments_sha256": arguments_sha256(call.arguments), "idempotent": tool.idempotent,
        "replay": tool.replay,
    })  # fmt: skip
    await ledger.wait_committed()  # on record before the side effect can happen


def import_function(path: str, *, field: str = "tools") -> Callable[..., Any]:
    """The function at an import path ``"package.module:function"``.

    Used for a team file's ``tools:`` entries and the paths a run recorded for its user tools.
    Imports the module: name only modules you trust, as you would in Python code.

    Raises:
        ConfigError: The path is malformed, the module cannot be imported (within
            `IMPORT_TIMEOUT_S`), or it has no such callable (``field`` names the entry).
    """
    module_name, qualname = split_import_path(path, field=field)
    try:  # its module-level code is the user's: in a thread, under a deadline
        target: Any = import_user_module(module_name, timeout_s=user_modules.IMPORT_TIMEOUT_S)
    except (ImportFailed, TimeoutError) as exc:  # any kind (sys.exit too), or too slow
        why = described(exc.error) if isinstance(exc, ImportFailed) else str(exc)
        raise ConfigError(f"cannot import {module_name!r}: {why}", field=field) from exc
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if not callable(target) or inspect.isclass(target):
        raise ConfigError(f"{path!r} is not a function", field=field)
    return cast(Callable[..., Any], target)


def check_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    """Problems of ``arguments`` against a tool's JSON Schema, or ``""`` when there are none.

    The check is `schema_errors`, the one every schema of the project is held with.

    Returns:
        The problems, ``"; "``-separated, each with its JSON path.
    """
    try:
        errors = schema_errors(schema, arguments, subject="the tool's argument schema",
                               value_name="the arguments")  # fmt: skip
    except ValueError as exc:  # one line: a number too large to check, say
        return str(exc)
    return "; ".join(f"{e.json_path}: {e.message}" for e in errors)


def spawn_tool(agent: Agent) -> Tool:
    """The ``spawn(agent, goal)`` tool of an agent with ``can_spawn``."""

    def spawn(agent: str, goal: str) -> str:  # pragma: no cover - run by the loop
        raise AssertionError

    spec = Tool.from_function(spawn, name=SPAWN_TOOL)
    # The agents it may spawn, as an enum: a model held to the schema (grammar-constrained
    # decoding, strict tool calls) can then only name one of them.
    parameters = copy.deepcopy(spec.parameters)
    parameters["properties"]["agent"]["enum"] = list(agent.can_spawn)
    return Tool(
        name=SPAWN_TOOL,
        description=(
            f"Start a child agent ({', '.join(agent.can_spawn)}) on a self-contained goal. "
            "The child sees only the goal. Its result appears under 'Results from subagents'."
        ),
        parameters=parameters,
        run=spec.run,
    )
