"""`DataOffloader`: large tool outputs go to the workspace, a preview goes in the context.

Outputs over a size or line threshold are written to the workspace's ``outputs/`` under
their SHA-256 (content-addressed, so identical outputs are stored once) and replaced in the
agent's context by their first lines and a reference the agent can read back through its
workspace. Follows the "offload to the file system" pattern of context engineering
(Manus, "Context Engineering for AI Agents", 2025). Writes go through
`Workspace.write_output`, the confined writer (no link followed, no folder reused).
"""

from __future__ import annotations

from dataclasses import dataclass

from clearance._agents.workspace import Workspace
from clearance._core.names import check_count
from clearance._core.prompt import sha256_text

__all__ = ["DEFAULT_MAX_CHARS", "DEFAULT_MAX_LINES", "DataOffloader", "OffloadedOutput"]

DEFAULT_MAX_CHARS = 2000
"""Outputs longer than this many characters are offloaded by default."""

DEFAULT_MAX_LINES = 40
"""Outputs with more lines than this are offloaded by default."""


@dataclass(frozen=True, kw_only=True, slots=True)
class OffloadedOutput:
    """A tool output as it enters the context.

    Attributes:
        text: What goes in the context: the output itself, or its preview and reference.
        reference: ``outputs/<sha256>.txt`` when offloaded, else ``None``.
        sha256: Hash of the full output.
        chars: Characters of the full output.
        lines: Lines of the full output.
    """

    text: str
    reference: str | None
    sha256: str
    chars: int
    lines: int

    @property
    def offloaded(self) -> bool:
        """Whether the full output lives in the workspace instead of the context."""
        return self.reference is not None


class DataOffloader:
    """Keeps large outputs out of an agent's context.

    Args:
        workspace: Where offloaded outputs are written (its ``outputs/``; the agent's output
            limits apply).
        max_chars: Outputs longer than this are offloaded.
        max_lines: Outputs with more lines than this are offloaded.
        preview_lines: Lines of an offloaded output kept in the context.
        preview_chars: Most characters of the preview.

    Raises:
        ConfigError: A threshold that is not an integer of at least 1.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_chars: int = DEFAULT_MAX_CHARS,
        max_lines: int = DEFAULT_MAX_LINES,
        preview_lines: int = 10,
        preview_chars: int = 800,
    ) -> None:
        for name, value in (
            ("max_chars", max_chars),
            ("max_lines", max_lines),
            ("preview_lines", preview_lines),
            ("preview_chars", preview_chars),
        ):
            check_count(name, value, least=1)
        self._workspace = workspace
        self.max_chars = max_chars
        self.max_lines = max_lines
        self.preview_lines = preview_lines
        self.preview_chars = preview_chars

    @property
    def max_context_chars(self) -> int:
        """Most characters `offload` ever puts in the context for one output."""
        return max(self.max_chars, self.preview_chars + 200)

    def offload(
        self, output: str, *, label: str = "output", reader: str | None = None
    ) -> OffloadedOutput:
        """Return the output as it should enter the context, writing it out if large.

        Args:
            output: The tool output.
            label: What produced it, named in the reference line.
            reader: The tool the agent reads the full text with, named in the reference
                line (``None``: it has none).

        Raises:
            LimitExceeded: Writing it would exceed the agent's output limits.
            ClearanceError: It could not be written (see `Workspace.write_output`: its name
                held by a folder or a link, text that is not UTF-8, a full disk).
        """
        digest = sha256_text(output)
        lines = output.splitlines()
        if len(output) <= self.max_chars and len(lines) <= self.max_lines:
            return OffloadedOutput(text=output, reference=None, sha256=digest,
                                   chars=len(output), lines=len(lines))  # fmt: skip
        name = f"{digest}.txt"
        # Written each time, never trusted by name: the agent may have written that name.
        self._workspace.write_output(name, output)
        preview = "\n".join(lines[: self.preview_lines])[: self.preview_chars]
        reference = f"outputs/{name}"
        how = f"; read it with {reader}" if reader else ""
        text = (f"{preview}\n[{label}: {len(output)} chars, {len(lines)} lines; preview of the "
                f"first lines above; full text in {reference}{how}]")  # fmt: skip
        return OffloadedOutput(text=text, reference=reference, sha256=digest,
                               chars=len(output), lines=len(lines))  # fmt: skip
