"""An agent's workspace in the tool loop: ``write_output``, ``read_output`` and offloading.

Every agent that runs the tool loop (a task's agent, a delegate, a child) has a workspace
(`Workspace`: its own folder, created fresh), made on first use so an agent that never
writes and never gets a long tool output leaves no folder behind. ``write_output`` writes to
its ``outputs/``; a tool output over the offloading thresholds is written there too and the
model gets a preview with the reference instead (`DataOffloader`), recorded as an
``offloaded`` event. ``read_output`` reads a file of the agent's own ``outputs/`` back, a
page of lines at a time (an offloaded output's full text, or a file it wrote): never
another agent's folder, which is not beneath its own. A page is at most
`READ_OUTPUT_MAX_CHARS`, so what it returns is never offloaded again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from clearance._agents.offload import DEFAULT_MAX_CHARS, DEFAULT_MAX_LINES, DataOffloader
from clearance._agents.tools import NOT_UTF8_ARGUMENTS, Tool, ToolOutput
from clearance._agents.workspace import Workspace
from clearance._context.tool_sections import READ_OUTPUT_TOOL, WORKSPACE_TOOLS, WRITE_OUTPUT_TOOL
from clearance._core.errors import ClearanceError, LimitExceeded
from clearance._core.vocabulary import EventKind

if TYPE_CHECKING:  # the ledger (and SQLAlchemy) load only when a run records
    from clearance._state.ledger import Recorder

__all__ = [
    "READ_OUTPUT_TOOL",
    "WORKSPACE_TOOLS",
    "WRITE_OUTPUT_TOOL",
    "WorkspaceSlot",
    "offloaded",
    "read_output",
    "workspace_tool_spec",
    "write_output",
]


READ_OUTPUT_LINES = 200
"""Lines a ``read_output`` page holds unless the model asks for fewer."""
READ_OUTPUT_MAX_CHARS = DEFAULT_MAX_CHARS * 8
"""Most characters of one page (a longer line is cut, and the page says so)."""


class WorkspaceSlot:
    """One agent's workspace, made on first use.

    Args:
        workspace: A workspace made already (a child's session), or ``None``.
        make: Makes the workspace on first use; ``None`` (with no ``workspace``) for an
            agent that has none.
    """

    def __init__(
        self, workspace: Workspace | None = None, make: Callable[[], Workspace] | None = None
    ) -> None:
        self._workspace = workspace
        self._make = make

    @property
    def available(self) -> bool:
        """Whether the agent has (or can get) a workspace."""
        return self._workspace is not None or self._make is not None

    @property
    def made(self) -> Workspace | None:
        """The workspace if it was made already (never makes it)."""
        return self._workspace

    def get(self) -> Workspace | None:
        """The workspace (made now if it was not yet), or ``None`` when the agent has none.

        Raises:
            ConfigError: Its folder could not be made fresh.
        """
        if self._workspace is None and self._make is not None:
            self._workspace = self._make()
        return self._workspace


def offloaded(
    slot: WorkspaceSlot,
    output: ToolOutput,
    *,
    ledger: Recorder,
    run_id: str,
    subject: str,
    call_id: str,
    name: str,
    readable: bool = False,
) -> tuple[ToolOutput, LimitExceeded | None]:
    """A long tool output of an agent with a workspace: its preview, full text in outputs/.

    The preview (first lines and the reference) is what the model sees and what the ledger
    records as the tool's result; an ``offloaded`` event records the reference and the full
    text's digest and size (see `DataOffloader`). ``readable``: the agent has
    ``read_output``, and the reference says so. An output that could not be kept (its name
    held by a folder the agent made there, a full disk) is a tool error saying so.

    Returns:
        The output as it enters the context, and the limit it breached (which fails the
        loop) or ``None``.
    """
    if not slot.available or output.is_error:
        return output, None
    if not _long(output.content):  # no folder for an agent whose outputs all fit
        return output, None
    try:
        workspace = slot.get()  # its folder may not be makeable (a file at the root's name)
        assert workspace is not None
        reader = READ_OUTPUT_TOOL if readable else None
        kept = DataOffloader(workspace).offload(output.content, label=name, reader=reader)
    except LimitExceeded as exc:
        return ToolOutput(content=f"error: {exc}", is_error=True), exc
    except ClearanceError as exc:  # its name held by what the agent wrote there, a full disk
        size, why = len(output.content), _said(exc, slot.made)
        return _error(f"{name}'s output ({size} characters) was too long to show and could "
                      f"not be kept in your outputs folder: {why}"), None  # fmt: skip
    if not kept.offloaded:
        return output, None
    ledger.record_event(run_id, EventKind.OFFLOADED, subject, {
        "tool_call_id": call_id, "reference": kept.reference, "sha256": kept.sha256,
        "chars": kept.chars, "lines": kept.lines,
    })  # fmt: skip
    return dataclasses.replace(output, content=kept.text), None  # its store reads, its source


def _long(text: str) -> bool:
    """Whether `DataOffloader`'s default thresholds would offload ``text``."""
    return len(text) > DEFAULT_MAX_CHARS or len(text.splitlines()) > DEFAULT_MAX_LINES


def write_output(
    slot: WorkspaceSlot, arguments: dict[str, Any]
) -> tuple[ToolOutput, LimitExceeded | None]:
    """Run ``write_output``: a bad request is a tool error; a breached limit fails the loop."""
    name, content = arguments.get("name"), arguments.get("content")
    if NOT_UTF8_ARGUMENTS in arguments:  # see `checked_tool_call`
        return _error("write_output's arguments hold text that is not valid UTF-8 (a lone "
                      "surrogate such as \\ud800); call again with valid text"), None  # fmt: skip
    if not isinstance(name, str) or not isinstance(content, str):
        return ToolOutput(content="error: write_output needs 'name' and 'content' (text)",
                          is_error=True), None  # fmt: skip
    try:
        workspace = slot.get()
        if workspace is None:
            return ToolOutput(content="error: this agent has no workspace", is_error=True), None
        workspace.write_output(name, content)
    except LimitExceeded as exc:
        return _error(_said(exc, slot.made)), exc
    except ClearanceError as exc:
        return _error(_said(exc, slot.made)), None
    size = len(content.encode("utf-8"))
    return ToolOutput(content=f"wrote outputs/{name} ({size} bytes)"), None


def read_output(slot: WorkspaceSlot, arguments: dict[str, Any]) -> ToolOutput:
    """Run ``read_output``: a page of lines of ``outputs/<name>``; a bad request is an error.

    ``name`` may carry the ``outputs/`` prefix an offloaded output's reference shows.
    ``start_line`` (1-based, default 1) and ``max_lines`` (1 to `READ_OUTPUT_LINES`, the
    default) choose the page; its first line says which lines of how many it holds and
    where the next page starts.
    """
    name, start, count = (arguments.get(k) for k in ("name", "start_line", "max_lines"))
    start = 1 if start is None else start
    count = READ_OUTPUT_LINES if count is None else count
    if not isinstance(name, str) or not name:
        return _error("read_output needs 'name' (text): a file of your outputs folder")
    for label, value, most in (
        ("start_line", start, None),
        ("max_lines", count, READ_OUTPUT_LINES),
    ):
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < 1
            or (most is not None and value > most)
        ):
            bound = f"1 to {most}" if most else "1 or more"
            return _error(f"read_output's {label} must be a whole number, {bound}")
    workspace = slot.made
    name = name.removeprefix("outputs/")
    if workspace is None:
        return _error(f"no file outputs/{name}: your outputs folder is empty")
    try:
        text = workspace.read_text(f"outputs/{name}")
    except ClearanceError as exc:
        return _error(_said(exc, workspace))
    lines = text.splitlines(keepends=True)
    if start > max(len(lines), 1):
        return _error(f"outputs/{name} has {len(lines)} lines; start_line {start} is past its end")
    page: list[str] = []
    size, cut = 0, False
    for line in lines[start - 1 : start - 1 + count]:
        if size + len(line) > READ_OUTPUT_MAX_CHARS:
            if not page:  # one line longer than a page: its start, said to be cut
                page.append(line[:READ_OUTPUT_MAX_CHARS])
                cut = True
            break
        page.append(line)
        size += len(line)
    end = start + len(page) - 1
    head = f"outputs/{name}: lines {start}-{end} of {len(lines)}"
    if cut:
        head += f" (line {start} cut at {READ_OUTPUT_MAX_CHARS} characters)"
    if end < len(lines):
        head += f"; the next page starts at start_line={end + 1}"
    return ToolOutput(content=f"{head}\n{''.join(page)}")


def _error(text: str) -> ToolOutput:
    return ToolOutput(content=f"error: {text}", is_error=True)


def _said(exc: Exception, workspace: Workspace | None) -> str:
    """``exc``'s message as the model hears it: the workspace's path on this host left out.

    A refusal names the folder it applies to; the model (and its provider) needs only the
    path inside the workspace, never where the run's folder is on this machine.
    """
    text = str(exc)
    return text if workspace is None else text.replace(str(workspace.root), "<workspace>")


def workspace_tool_spec(name: str) -> Tool:
    """The workspace tool ``name`` (one of `WORKSPACE_TOOLS`) as offered to the model."""

    def write_output(name: str, content: str) -> str:  # pragma: no cover - run by the loop
        raise AssertionError

    def read_output(
        name: str, start_line: int = 1, max_lines: int = READ_OUTPUT_LINES
    ) -> str:  # pragma: no cover - run by the loop
        raise AssertionError

    described: dict[str, tuple[Callable[..., str], str]] = {
        WRITE_OUTPUT_TOOL: (
            write_output,
            "Write a text file to your own outputs folder (name: a relative path).",
        ),
        READ_OUTPUT_TOOL: (
            read_output,
            "Read a text file of your own outputs folder (a long tool output's full text, "
            f"or a file you wrote), a page of at most {READ_OUTPUT_LINES} lines from "
            "start_line (1-based).",
        ),
    }
    function, description = described[name]
    spec = Tool.from_function(function, name=name)
    return Tool(name=name, description=description, parameters=spec.parameters, run=spec.run)
