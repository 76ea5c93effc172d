"""Tools: plain typed Python functions, described to models in the OpenAI function format.

`Tool.from_function` derives a tool's JSON Schema from the function's signature (with
pydantic, so arguments are validated and coerced the same way) and its description from
the docstring's first paragraph. A tool returns text, or any JSON-serializable value (sent
as JSON). The built-in store tools (`store_tools`) are bound to one agent's `StoreView`.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast, get_type_hints

from pydantic import ConfigDict, ValidationError, create_model

from clearance._context.tool_sections import DELEGATE_TOOL, tool_name
from clearance._context.verify_approvals import arguments_sha256
from clearance._core.errors import ConfigError
from clearance._core.spec import Agent
from clearance._core.user_modules import import_user_module, split_import_path
from clearance._core.vocabulary import EventKind
from clearance._state.grants import StoreView
from clearance._state.ledger import Recorder
from clearance._state.store import StoreEntry
from clearance.models._base import ToolCall

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "DELEGATE_TOOL",
    "NOT_UTF8_ARGUMENTS",
    "SPAWN_TOOL",
    "Tool",
    "ToolOutput",
    "check_arguments",
    "checked_tool_call",
    "import_function",
    "spawn_tool",
    "mark_tool",
    "record_started",
    "store_tools",
    "tool_caller",
    "tool_name",
]

BUILTIN_TOOL_NAMES = (
    "store_get",
    "store_set",
    "store_query",
    "store_set_with_extension",
    "store_touch",
    "store_get_structured",
    "store_search",
)
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


NOT_UTF8_ARGUMENTS = "_not_utf8"
"""The only argument of a tool call whose arguments held text that is not valid UTF-8."""

_NOT_UTF8_ERROR = (
    "error: invalid arguments: they hold text that is not valid UTF-8 (a lone surrogate "
    "such as \\ud800); call again with valid text"
)


def checked_tool_call(call: ToolCall) -> ToolCall:
    r"""``call``, or a copy that no later step will choke on if its arguments are not UTF-8.

    A model's JSON may hold an escape such as ``"\ud800"``, which decodes to a lone
    surrogate: text that no UTF-8 encoder (database drivers, token counters, hashes)
    accepts. Such arguments are replaced by one `NOT_UTF8_ARGUMENTS` argument holding them
    as ASCII JSON (escapes kept), and `Tool.call` answers it with an error for the model.

    Args:
        call: A tool call as a model returned it.

    Returns:
        ``call`` itself when its arguments encode as UTF-8, else the replacement.
    """
    if _encodes(call.arguments):
        return call
    escaped = json.dumps(call.arguments, default=repr)
    return ToolCall(id=call.id, name=call.name, arguments={NOT_UTF8_ARGUMENTS: escaped})


def _encodes(arguments: dict[str, Any]) -> bool:
    """Whether ``arguments`` (keys and values, at any depth) encode as UTF-8."""
    try:
        json.dumps(arguments, ensure_ascii=False, default=repr).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    """

    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any]], ToolOutput | Awaitable[ToolOutput]] = field(repr=False)
    idempotent: bool = False
    replay: bool = True

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

        Arguments holding text that is not valid UTF-8 (see `checked_tool_call`) are not
        passed on: the output is an error saying so. ``agent`` names the calling agent while
        the tool runs (`tool_caller`).
        """
        if NOT_UTF8_ARGUMENTS in arguments or not _encodes(arguments):
            return ToolOutput(content=_NOT_UTF8_ERROR, is_error=True)
        token = _CALLER.set(agent)
        try:
            result = self.run(arguments)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # a tool's failure is reported to the model, not raised
            return ToolOutput(content=f"error: {exc}", is_error=True, error_type=type(exc).__name__)
        finally:
            _CALLER.reset(token)
        assert isinstance(result, ToolOutput)
        return result

    @classmethod
    def from_function(cls, function: ToolFunction, *, name: str | None = None) -> Tool:
        """A tool from a typed Python function (sync or async).

        Every parameter needs a type hint; defaults make a parameter optional. Arguments are
        validated by pydantic before the call; invalid ones produce an error output naming
        the problem. A ``str`` result is sent as is, anything else as JSON. The tool is
        idempotent or opts out of replay as `mark_tool` declared on the function.

        Args:
            function: The function.
            name: The tool's name; the function's ``__name__`` if ``None``.

        Raises:
            ConfigError: A parameter has no type hint or is ``*args``/``**kwargs``, or the
            signature cannot be read.
        """
        tool_name: str = name or str(getattr(function, "__name__", repr(function)))
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
            result = function(**{k: getattr(values, k) for k in fields})
            if inspect.isawaitable(result):
                result = await result
            text = result if isinstance(result, str) else json.dumps(result, default=str)
            return ToolOutput(content=text)

        flags = getattr(function, _FLAGS, {})
        return cls(
            name=tool_name, description=description, parameters=schema, run=run,
            idempotent=bool(flags.get("idempotent", False)), replay=bool(flags.get("replay", True)),
        )  # fmt: skip


_FLAGS = "__clearance_tool__"


def mark_tool(function: ToolFunction, *, idempotent: bool = False, replay: bool = True) -> None:
    """Declare how a function tool behaves on resume (read by `Tool.from_function`).

    Args:
        function: The tool's function (its attribute ``__clearance_tool__`` is set).
        idempotent: See `Tool.idempotent`.
        replay: See `Tool.replay`.

    Raises:
        ConfigError: The function takes no attributes (a built-in); see `marked_tool`.
    """
    try:
        setattr(function, _FLAGS, {"idempotent": idempotent, "replay": replay})
    except (AttributeError, TypeError) as exc:
        raise ConfigError(f"cannot mark {function!r} as a tool: {exc}") from exc


def marked_tool(
    function: Callable[..., Any], *, idempotent: bool = False, replay: bool = True
) -> Callable[..., Any]:
    """A wrapper of ``function`` marked with `mark_tool`, leaving ``function`` itself alone.

    For a team file's ``tools:`` entry with ``idempotent`` or ``replay``: the imported
    function may be a built-in (which takes no attribute) or shared with other code (whose
    marks would change). The wrapper keeps its name, module, signature and type hints.
    """

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    # Its own hints (``*args: Any``) are not the function's: a built-in has none to copy.
    wrapper.__annotations__ = dict(getattr(function, "__annotations__", {}))
    mark_tool(wrapper, idempotent=idempotent, replay=replay)
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
        ConfigError: The path is malformed, the module cannot be imported, or it has no such
            callable (``field`` names the entry).
    """
    module_name, qualname = split_import_path(path, field=field)
    try:
        target: Any = import_user_module(module_name)
    except Exception as exc:  # any failure of the imported module's own code
        raise ConfigError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {exc}", field=field
        ) from exc
    for part in qualname.split("."):
        target = getattr(target, part, None)
    if not callable(target) or inspect.isclass(target):
        raise ConfigError(f"{path!r} is not a function", field=field)
    return cast(Callable[..., Any], target)


def store_tools(view: StoreView) -> dict[str, Tool]:
    """The built-in store tools bound to one agent's scoped view.

    - ``store_get(namespace, key)``: the value, or a note that there is none;
    - ``store_set(namespace, key, value, ttl_s=None)``: write (as the view's agent);
    - ``store_query(namespace, prefix="", limit=10)``: live entries, newest first;
    - ``store_set_with_extension(namespace, key, value, ttl_s=None)``: write, pushing expiry
      forward (never earlier; an entry that never expires keeps none);
    - ``store_touch(namespace, key, ttl_s=None)``: push a live entry's expiry forward;
    - ``store_get_structured(namespace, key)``: read a value that must be valid JSON;
    - ``store_search(text, limit=10)``: entries whose key or value holds ``text``, across
      every namespace the agent may read (and no other), newest first.

    ``limit`` is clamped to 1..50. A denied namespace gives an error output naming the
    agent, namespace and operation. Entries read enter the next prompt as ``store:`` items.
    """

    def store_get(namespace: str, key: str) -> ToolOutput:
        entry = view.get_entry(namespace, key)
        if entry is None:
            return ToolOutput(content=f"no entry {namespace}/{key}")
        return ToolOutput(content=f"entry {namespace}/{key} read", store_reads=(entry,))

    def store_set(namespace: str, key: str, value: str, ttl_s: float | None = None) -> ToolOutput:
        view.set(namespace, key, value, ttl_s)
        return ToolOutput(content=f"stored {namespace}/{key}")

    def store_query(namespace: str, prefix: str = "", limit: int = 10) -> ToolOutput:
        entries = view.query_by_prefix(namespace, prefix, min(max(limit, 1), 50))
        keys = ", ".join(e.key for e in entries) or "none"
        return ToolOutput(content=f"{len(entries)} entries: {keys}", store_reads=tuple(entries))

    def store_set_with_extension(
        namespace: str, key: str, value: str, ttl_s: float | None = None
    ) -> ToolOutput:
        view.set_with_extension(namespace, key, value, ttl_s)
        return ToolOutput(content=f"stored {namespace}/{key}; its expiry only moved forward")

    def store_touch(namespace: str, key: str, ttl_s: float | None = None) -> ToolOutput:
        if view.touch(namespace, key, ttl_s):
            return ToolOutput(content=f"expiry of {namespace}/{key} pushed forward")
        return ToolOutput(content=f"no entry {namespace}/{key}")

    def store_get_structured(namespace: str, key: str) -> ToolOutput:
        entry = view.get_entry(namespace, key)
        if entry is None:
            return ToolOutput(content=f"no entry {namespace}/{key}")
        try:
            json.loads(entry.value)
        except ValueError as exc:
            return ToolOutput(
                content=f"error: the value of {namespace}/{key} is not valid JSON: {exc}",
                is_error=True,
            )
        return ToolOutput(content=f"JSON entry {namespace}/{key} read", store_reads=(entry,))

    def store_search(text: str, limit: int = 10) -> ToolOutput:
        entries = view.search(text, min(max(limit, 1), 50))
        found = ", ".join(f"{e.namespace}/{e.key}" for e in entries) or "none"
        return ToolOutput(content=f"{len(entries)} entries: {found}", store_reads=tuple(entries))

    docs = {
        "store_get": "Read the value stored under a key in a namespace of the shared store.",
        "store_set": "Write a text value under a key in a namespace of the shared store.",
        "store_query": "List entries of a namespace whose key starts with a prefix, newest first.",
        "store_set_with_extension": "Write a text value under a key and push its expiry "
        "forward (it never moves earlier).",
        "store_touch": "Push the expiry of an entry forward without changing its value.",
        "store_get_structured": "Read a JSON value stored under a key in a namespace.",
        "store_search": "Find entries whose key or value contains a text, in every namespace "
        "you may read, newest first.",
    }
    functions: dict[str, Callable[..., ToolOutput]] = {
        "store_get": store_get,
        "store_set": store_set,
        "store_query": store_query,
        "store_set_with_extension": store_set_with_extension,
        "store_touch": store_touch,
        "store_get_structured": store_get_structured,
        "store_search": store_search,
    }
    tools = {}
    for name, function in functions.items():
        function.__doc__ = docs[name]
        base = Tool.from_function(function, name=name)
        tools[name] = Tool(
            name=name, description=base.description, parameters=base.parameters,
            run=_raw_output(base, function),
        )  # fmt: skip
    return tools


def _raw_output(
    base: Tool, function: Callable[..., ToolOutput]
) -> Callable[[dict[str, Any]], ToolOutput]:
    """Run ``function`` with arguments checked against ``base``'s schema, keeping its output."""

    def run(arguments: dict[str, Any]) -> ToolOutput:
        problems = check_arguments(base.parameters, arguments)
        if problems:
            return ToolOutput(content=f"error: invalid arguments: {problems}", is_error=True)
        return function(**arguments)

    return run


def check_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str:
    """Problems of ``arguments`` against a tool's JSON Schema, or ``""`` when there are none.

    Returns:
        The problems, ``"; "``-separated, each with its JSON path.
    """
    from jsonschema.validators import Draft202012Validator

    errors = [
        f"{e.json_path}: {e.message}" for e in Draft202012Validator(schema).iter_errors(arguments)
    ]
    return "; ".join(errors)


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
