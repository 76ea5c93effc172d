"""An agent's workspace in the tool loop: ``write_output`` and the offloading of long outputs.

Every agent that runs the tool loop (a task's agent, a delegate, a child) has a workspace
(`Workspace`: its own folder, created fresh), made on first use so an agent that never
writes and never gets a long tool output leaves no folder behind. ``write_output`` writes to
its ``outputs/``; a tool output over the offloading thresholds is written there too and the
model gets a preview with the reference instead (`DataOffloader`), recorded as an
``offloaded`` event.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from clearance._agents.offload import DEFAULT_MAX_CHARS, DEFAULT_MAX_LINES, DataOffloader
from clearance._agents.tools import Tool, ToolOutput
from clearance._agents.workspace import Workspace
from clearance._core.errors import ClearanceError, LimitExceeded
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import Recorder

__all__ = ["WRITE_OUTPUT_TOOL", "WorkspaceSlot", "offloaded", "write_output", "write_output_spec"]

WRITE_OUTPUT_TOOL = "write_output"
"""The built-in tool that writes a file to the agent's own workspace ``outputs/``."""


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
) -> tuple[ToolOutput, LimitExceeded | None]:
    """A long tool output of an agent with a workspace: its preview, full text in outputs/.

    The preview (first lines and the reference) is what the model sees and what the ledger
    records as the tool's result; an ``offloaded`` event records the reference and the full
    text's digest and size (see `DataOffloader`).

    Returns:
        The output as it enters the context, and the limit it breached (which fails the
        loop) or ``None``.
    """
    if not slot.available or output.is_error:
        return output, None
    if not _long(output.content):  # no folder for an agent whose outputs all fit
        return output, None
    workspace = slot.get()
    assert workspace is not None
    try:
        kept = DataOffloader(workspace).offload(output.content, label=name)
    except LimitExceeded as exc:
        return ToolOutput(content=f"error: {exc}", is_error=True), exc
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
    if not isinstance(name, str) or not isinstance(content, str):
        return ToolOutput(content="error: write_output needs 'name' and 'content' (text)",
                          is_error=True), None  # fmt: skip
    try:
        workspace = slot.get()
        if workspace is None:
            return ToolOutput(content="error: this agent has no workspace", is_error=True), None
        workspace.write_output(name, content)
    except LimitExceeded as exc:
        return ToolOutput(content=f"error: {exc}", is_error=True), exc
    except ClearanceError as exc:
        return ToolOutput(content=f"error: {exc}", is_error=True), None
    size = len(content.encode("utf-8"))
    return ToolOutput(content=f"wrote outputs/{name} ({size} bytes)"), None


def write_output_spec() -> Tool:
    """The ``write_output(name, content)`` tool as offered to the model."""

    def write_output(name: str, content: str) -> str:  # pragma: no cover - run by the loop
        raise AssertionError

    spec = Tool.from_function(write_output, name=WRITE_OUTPUT_TOOL)
    return Tool(
        name=WRITE_OUTPUT_TOOL,
        description="Write a text file to your own outputs folder (name: a relative path).",
        parameters=spec.parameters,
        run=spec.run,
    )
