"""What a tool is never called with, whatever its schema admits: checks before any tool runs.

A model's arguments reach a tool only when they are a JSON object of valid UTF-8 text with
finite numbers. Providers hand on arguments that were no JSON object (text that does not
parse, a list, an object nested too deep) as ``{"_raw": ...}`` (`clearance.models._base.
checked_arguments`); text that is not UTF-8 is replaced by `NOT_UTF8_ARGUMENTS`
(`checked_tool_call`). `refused_arguments` answers each with an error for the model, so a
tool whose schema admits any object (an MCP server's ``{"type": "object"}``) does not run
on what the model never meant as its arguments.

A tool's name is the model's text too: one longer than the ledger's ``tool_calls.name``
column, or holding a NUL (which PostgreSQL text cannot hold), is recorded and shown as
`bounded_tool_name` makes it, so the call gets the usual ``unknown tool`` error and the run
goes on on every database.
"""

from __future__ import annotations

import json
import math
from typing import Any

from clearance._core.shown_text import shown
from clearance.models._base import ToolCall

__all__ = [
    "MAX_TOOL_NAME_CHARS",
    "NOT_UTF8_ARGUMENTS",
    "RAW_ARGUMENTS",
    "bounded_tool_name",
    "checked_tool_call",
    "refused_arguments",
]

MAX_TOOL_NAME_CHARS = 128
"""Most characters of a recorded tool name (the ledger's ``tool_calls.name`` column)."""

RAW_ARGUMENTS = "_raw"
"""The only argument of a tool call whose arguments were no JSON object (what was sent)."""

_RAW_SHOWN = 200
"""Characters of what was sent that the error quotes back."""

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

    Its name is `bounded_tool_name`'s: a name no tool has (over `MAX_TOOL_NAME_CHARS`
    characters, or holding a NUL) is kept short and printable, for the ``unknown tool``
    error, the ledger and the next prompt alike.

    Returns:
        ``call`` itself when its arguments encode as UTF-8 and its name is bounded, else
        the replacement.
    """
    name = bounded_tool_name(call.name)
    if _encodes(call.arguments):
        return call if name is call.name else ToolCall(id=call.id, name=name,
                                                       arguments=call.arguments)  # fmt: skip
    escaped = json.dumps(call.arguments, default=repr)
    return ToolCall(id=call.id, name=name, arguments={NOT_UTF8_ARGUMENTS: escaped})


def bounded_tool_name(name: str) -> str:
    r"""``name`` as recorded: itself when it fits the ledger, else short, printable and cut.

    A name of at most `MAX_TOOL_NAME_CHARS` characters without a NUL (every tool's: a
    team file's are at most 64, a ``mcp__<server>__<tool>`` function name too) is kept as
    it is. Any other was invented by the model: its control characters become escapes
    (`shown`: a NUL as ``\x00``), and past `MAX_TOOL_NAME_CHARS` characters it is cut,
    ending ``...``, which no tool's name holds, so it names no tool.
    """
    if len(name) <= MAX_TOOL_NAME_CHARS and "\x00" not in name:
        return name
    # Cut before escaping (a megabyte is not escaped whole), then cut again after.
    text = shown(name[: 4 * MAX_TOOL_NAME_CHARS])
    if len(text) <= MAX_TOOL_NAME_CHARS and len(name) <= 4 * MAX_TOOL_NAME_CHARS:
        return text
    return text[: MAX_TOOL_NAME_CHARS - 3] + "..."


def _encodes(arguments: dict[str, Any]) -> bool:
    """Whether ``arguments`` (keys and values, at any depth) encode as UTF-8."""
    try:
        json.dumps(arguments, ensure_ascii=False, default=repr).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _not_finite(arguments: dict[str, Any]) -> str | None:
    """The path (``n``, ``xs[1]``) of the first NaN or infinite number in ``arguments``."""
    stack: list[tuple[str, Any]] = [(str(k), v) for k, v in arguments.items()]
    while stack:
        path, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return path
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}", v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
    return None


def refused_arguments(arguments: dict[str, Any], parameters: dict[str, Any]) -> str | None:
    """The error a tool call with ``arguments`` gets instead of running, or ``None``.

    Refused: text that is not valid UTF-8 (`checked_tool_call`), a NaN or infinite number
    (which no JSON schema's ``number`` admits), and arguments that were no JSON object
    (``{"_raw": ...}`` alone, unless the tool's schema ``parameters`` names a ``_raw``
    property).
    """
    if NOT_UTF8_ARGUMENTS in arguments or not _encodes(arguments):
        return _NOT_UTF8_ERROR
    if (where := _not_finite(arguments)) is not None:  # no JSON number is NaN or infinite
        text = f"{where} is not a finite number (NaN or infinity); call again with a number"
        return f"error: invalid arguments: {text}"
    if arguments.keys() == {RAW_ARGUMENTS} and not _declares_raw(parameters):
        sent = arguments[RAW_ARGUMENTS]
        if isinstance(sent, str) and sent.startswith("(") and sent.endswith(")"):
            what = sent  # a provider's description of what was sent
        else:
            quoted = json.dumps(sent if isinstance(sent, str) else repr(sent))  # escaped
            cut = " (cut)" if len(quoted) > _RAW_SHOWN else ""
            what = f"(sent: {quoted[:_RAW_SHOWN]}{cut})"
        return (
            f"error: invalid arguments: they are not a JSON object {what}; call again with "
            "an object of the tool's parameters"
        )
    return None


def _declares_raw(parameters: dict[str, Any]) -> bool:
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    return isinstance(properties, dict) and RAW_ARGUMENTS in properties
