"""What a tool-using agent's prompt adds: its tools, and the results of its tool calls.

Tool results reach the next prompt only as fenced blocks built here and admitted by the
`ContextBuilder`: one block per call (origin ``tool:<call id>``, the text the tool returned)
and one per store entry the call read (origin ``store:<namespace>/<key>``, the value).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clearance._context import layout as L
from clearance._context.layout import TOOL_TRAILER
from clearance._core.mcp_spec import mcp_model_name
from clearance._core.origins import Origin
from clearance._core.vocabulary import OriginKind

if TYPE_CHECKING:  # the store (and SQLAlchemy) load only when a run has one
    from clearance._state.store import StoreEntry

__all__ = [
    "DELEGATED_SECTION",
    "DELEGATE_TOOL",
    "TOOL_RESULTS_SECTION",
    "TOOL_TRAILER",
    "TOOLS_SECTION",
    "WORKSPACE_TOOLS",
    "STORE_TOOLS",
    "WRITE_OUTPUT_TOOL",
    "READ_OUTPUT_TOOL",
    "ToolStep",
    "compacted_result",
    "store_heading",
    "store_title",
    "tool_heading",
    "tool_name",
    "tool_spec_text",
]

DELEGATE_TOOL = "delegate"
"""Name of the delegation tool, given to agents that declare ``can_delegate_to``."""
WRITE_OUTPUT_TOOL = "write_output"
"""The built-in tool that writes a file to the agent's own workspace ``outputs/``."""
READ_OUTPUT_TOOL = "read_output"
"""The built-in tool that reads a file of the agent's own ``outputs/`` back, by pages."""
WORKSPACE_TOOLS = (WRITE_OUTPUT_TOOL, READ_OUTPUT_TOOL)
"""The built-in tools of an agent's workspace."""
STORE_TOOLS = (
    "store_get",
    "store_set",
    "store_query",
    "store_set_with_extension",
    "store_touch",
    "store_get_structured",
    "store_search",
)
"""Names of the built-in store tools, bound to the agent's scoped store view."""


def tool_name(tool: str | Callable[..., Any]) -> str:
    """The name a model calls an agent's tool entry by.

    The string itself, the function's name, or for an MCP entry ``mcp:<server>/<tool>`` the
    function name ``mcp__<server>__<tool>`` (see `clearance._core.mcp_spec`).
    """
    if not isinstance(tool, str):
        return tool.__name__
    return mcp_model_name(tool) or tool


TOOLS_SECTION, TOOL_RESULTS_SECTION, DELEGATED_SECTION = L.TOOLS, L.TOOL_RESULTS, L.DELEGATED


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolStep:
    """One finished tool call, as the next prompt shows it.

    Attributes:
        call_id: The call's id (origin ``tool:<call_id>``).
        name: The tool called.
        arguments: Its arguments.
        content: The text the tool returned (an error message if it failed), or for an
            older step compacted under the agent's ``compact_tool_steps`` policy, its one line
            (`compacted_result`).
        store_reads: Store entries the call read (none once compacted).
        is_error: Whether the call failed (compaction keeps failures visible).
    """

    call_id: str
    name: str
    arguments: dict[str, Any]
    content: str
    store_reads: tuple[StoreEntry, ...] = ()
    is_error: bool = False


COMPACTED_LINE_CHARS = 200
"""Longest line an older tool step is compacted to."""


def compacted_result(name: str, content: str, *, is_error: bool) -> str:
    """The one line an older tool step's result is compacted to, in place of its text.

    The rule of `StepCompactor` (recent steps verbatim, older ones folded to one line that
    keeps failures readable), per step so each line keeps its ``tool:<call id>`` origin;
    ``clearance verify`` recomputes it from the recorded result.

    Returns:
        At most `COMPACTED_LINE_CHARS` characters.
    """
    status = "FAILED" if is_error else "ok"
    flat = " ".join(content.split())
    text = f"[compacted earlier step: {name} {status}, {len(content)} chars] {flat}"
    if len(text) <= COMPACTED_LINE_CHARS:
        return text
    return text[: COMPACTED_LINE_CHARS - 3] + "..."


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def tool_heading(step: ToolStep) -> str:
    """The heading of a tool result block: ``<name>(<arguments JSON>) [call <id>]``."""
    return f"{step.name}({_compact(step.arguments)}) [call {step.call_id}]"


def store_heading(entry: StoreEntry) -> str:
    """The heading of a store entry block (`store_title` of the entry and its writer)."""
    return store_title(f"{entry.namespace}/{entry.key}", entry.agent)


def store_title(ref: str, writer: str) -> str:
    """``Store entry <namespace>/<key> (written by <writer>)``: ``ref`` is ``<namespace>/<key>``."""
    return f"Store entry {ref} (written by {writer})"


def tool_spec_text(spec: dict[str, Any]) -> str:
    """The text describing one tool (OpenAI function format) in a prompt."""
    function = spec["function"]
    return f"{function['description']}\nArguments (JSON Schema): {_compact(function['parameters'])}"


def origins_of(steps: Sequence[ToolStep]) -> list[str]:
    """The origins tool steps add to a prompt, in order."""
    out: list[str] = []
    for step in steps:
        out.append(str(Origin(OriginKind.TOOL, step.call_id)))
        out.extend(
            str(Origin(OriginKind.STORE, f"{e.namespace}/{e.key}")) for e in step.store_reads
        )
    return out
