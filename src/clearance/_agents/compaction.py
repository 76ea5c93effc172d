"""`StepCompactor`: an agent's own history, bounded, for its next prompt.

The most recent steps are kept verbatim; older successful steps are folded into one line per
kind (how many, which step numbers); older failed steps are kept, one line each, so the agent
never forgets what went wrong. Follows the "keep recent turns, summarize the rest, keep the
errors in" advice of context engineering (Manus, "Context Engineering for AI Agents", 2025).

In runs, an agent whose ``limits.compact_tool_steps`` is set has its tool loop compacted the
same way (`CompactingPrompts`): the latest tool steps stay verbatim, each older one becomes
one line (`compacted_result`) under its own ``tool:<call id>`` origin, and when a prompt
would overflow ``max_prompt_tokens`` fewer steps are kept verbatim (down to none) before the
loop fails with `LimitExceeded`. Each compaction is recorded as a ``compacted`` event (the
call ids compacted, why), and ``clearance verify`` recomputes each compacted line from the
recorded tool call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from clearance._agents.session import Step
from clearance._context.render import one_line
from clearance._context.tool_sections import ToolStep, compacted_result
from clearance._core.errors import LimitExceeded
from clearance._core.names import check_count
from clearance._core.prompt import Prompt
from clearance._core.vocabulary import EventKind
from clearance._state.ledger import Recorder

__all__ = ["CompactingPrompts", "StepCompactor"]


PromptFactory = Callable[[tuple[dict[str, Any], ...], list[ToolStep]], Prompt]


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
        line_chars: Longest summary or failure line (at least 3: a cut line ends in
            ``...``).

    Raises:
        ConfigError: A value that is not an integer, or below its least (1; 3 for
            ``line_chars``).
    """

    def __init__(self, *, keep_recent: int = 5, max_step_chars: int = 2000, line_chars: int = 200):
        check_count("keep_recent", keep_recent, least=1)
        check_count("max_step_chars", max_step_chars, least=1)
        check_count("line_chars", line_chars, least=3)
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

    def compact_tool_steps(self, steps: Sequence[ToolStep]) -> list[ToolStep]:
        """A tool loop's steps with all but the latest ``keep_recent`` folded to one line each.

        A folded step keeps its call id, tool name and arguments; its text becomes
        `compacted_result` (failures stay marked) and its store entries are dropped.
        """
        older = len(steps) - self.keep_recent
        return [
            dataclasses.replace(
                step, store_reads=(),
                content=compacted_result(step.name, step.content, is_error=step.is_error),
            ) if i < older else step
            for i, step in enumerate(steps)
        ]  # fmt: skip


class CompactingPrompts:
    """Wraps a tool loop's prompt factory with the agent's compaction policy.

    Args:
        build: The loop's prompt factory (through the `ContextBuilder`).
        keep_recent: ``limits.compact_tool_steps``: tool steps kept verbatim; ``None`` for
            no compaction (``build`` is used as is).
        ledger: Where ``compacted`` events are recorded.
        run_id: The run.
        subject: The loop's subject.
    """

    def __init__(
        self,
        build: PromptFactory,
        *,
        keep_recent: int | None,
        ledger: Recorder,
        run_id: str,
        subject: str,
    ) -> None:
        self._build = build
        self.keep_recent = keep_recent
        self._ledger = ledger
        self._run_id = run_id
        self._subject = subject
        self._compacted: set[str] = set()

    def __call__(self, specs: tuple[dict[str, Any], ...], steps: list[ToolStep]) -> Prompt:
        """Build the step's prompt, compacting older steps (and more on overflow).

        Raises:
            LimitExceeded: The prompt overflows even with every step compacted (or there is
                no policy).
        """
        if self.keep_recent is None:
            return self._build(specs, steps)
        keep = min(self.keep_recent, len(steps))
        while True:
            shown = self._fold(steps, keep)
            try:
                prompt = self._build(specs, shown)
            except LimitExceeded as exc:
                if exc.limit != "max_prompt_tokens" or keep == 0:
                    raise
                keep -= 1
                continue
            reason = "overflow" if keep < min(self.keep_recent, len(steps)) else "policy"
            self._record(steps[: len(steps) - keep], reason, keep)
            return prompt

    def _fold(self, steps: list[ToolStep], keep: int) -> list[ToolStep]:
        if keep >= len(steps):
            return steps
        if keep == 0:
            return [dataclasses.replace(s, store_reads=(), content=compacted_result(
                s.name, s.content, is_error=s.is_error)) for s in steps]  # fmt: skip
        return StepCompactor(keep_recent=keep).compact_tool_steps(steps)

    def _record(self, folded: Sequence[ToolStep], reason: str, keep: int) -> None:
        new = [s.call_id for s in folded if s.call_id not in self._compacted]
        if not new:
            return
        self._compacted.update(new)
        self._ledger.record_event(self._run_id, EventKind.COMPACTED, self._subject, {
            "tool_call_ids": new, "reason": reason, "keep_recent": keep,
        })  # fmt: skip
