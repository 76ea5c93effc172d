"""`StepCompactor`: an agent's own history, bounded, for its next prompt.

The most recent steps are kept verbatim; older successful steps are folded into one line per
kind (how many, which step numbers); older failed steps are kept, one line each, so the agent
never forgets what went wrong. Follows the "keep recent turns, summarize the rest, keep the
errors in" advice of context engineering (Manus, "Context Engineering for AI Agents", 2025).
"""

from __future__ import annotations

from collections.abc import Sequence

from clearance._agents.session import Step
from clearance._context.render import one_line
from clearance._core.errors import ConfigError

__all__ = ["StepCompactor"]


def _ranges(numbers: Sequence[int]) -> str:
    spans: list[str] = []
    start = prev = numbers[0]
    for n in numbers[1:]:
        if n == prev + 1:
            prev = n
            continue
        spans.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = n
    spans.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(spans)


class StepCompactor:
    """Compacts a step history into bounded text.

    Bound: at most ``keep_recent`` steps of at most ``max_step_chars`` characters each,
    plus one line (at most ``line_chars``) per step kind and one per older failure.

    Args:
        keep_recent: How many of the latest steps stay verbatim.
        max_step_chars: Longest content kept for a recent step (longer content is cut with
            a visible ``[... N more chars]`` marker; offload large outputs first).
        line_chars: Longest summary or failure line.

    Raises:
        ConfigError: A value below 1.
    """

    def __init__(self, *, keep_recent: int = 5, max_step_chars: int = 2000, line_chars: int = 200):
        if min(keep_recent, max_step_chars, line_chars) < 1:
            raise ConfigError("compaction limits must be at least 1", field="compaction")
        self.keep_recent = keep_recent
        self.max_step_chars = max_step_chars
        self.line_chars = line_chars

    def bound(self, kinds: int, failures: int) -> int:
        """Most characters `compact` returns for ``kinds`` step kinds and older ``failures``."""
        per_recent = self.max_step_chars + 80
        return self.keep_recent * per_recent + (kinds + failures + 2) * (self.line_chars + 1)

    def compact(self, steps: Sequence[Step]) -> str:
        """The history as text: ``Earlier steps`` summary lines, then recent steps verbatim.

        Returns:
            ``""`` for no steps.
        """
        if not steps:
            return ""
        older = steps[: max(0, len(steps) - self.keep_recent)]
        recent = steps[len(older) :]
        lines: list[str] = []
        if older:
            lines.append(f"Earlier steps (1-{older[-1].index}, summarized):")
            by_kind: dict[str, list[int]] = {}
            for step in older:
                if step.ok:
                    by_kind.setdefault(step.kind, []).append(step.index)
            for kind, numbers in by_kind.items():
                lines.append(self._line(f"- {len(numbers)} {kind} step(s): {_ranges(numbers)}"))
            for step in older:
                if not step.ok:
                    lines.append(self._line(f"- FAILED step {step.index} ({step.kind}): "
                                            f"{one_line(step.content)}"))  # fmt: skip
        lines.append("Recent steps:")
        for step in recent:
            content = step.content
            if len(content) > self.max_step_chars:
                cut = len(content) - self.max_step_chars
                content = content[: self.max_step_chars] + f"[... {cut} more chars]"
            status = "" if step.ok else " FAILED"
            lines.append(f"Step {step.index} ({step.kind}{status}):\n{content}")
        return "\n".join(lines)

    def _line(self, text: str) -> str:
        return text if len(text) <= self.line_chars else text[: self.line_chars - 3] + "..."
