"""`ContextBuilder`: the one place where prompts are made.

Every byte that reaches a model passes through here. The builder admits an item only when
the prompt's `Clearance` allows its origin, renders each item in its own fenced block in the
layout of its kind of prompt (`layout`), and returns a `Prompt` whose `ContextManifest`
lists each item's origin and token count. Budgets are enforced with `LimitExceeded`, never
by silent truncation.

The builders live by audience: `prompts_task` (tasks, delegates, children, conversations),
`prompts_coordinator` (planning, synthesis, clarifications) and `prompts_isolated` (fresh
subagents); `assemble` renders what they admit.
"""

from __future__ import annotations

from clearance._context.assemble import TokenCounter
from clearance._context.layout import SUMMARIES as SUMMARIES_SECTION
from clearance._context.layout import SYNTHESIS_TRAILER, TASK_TRAILER
from clearance._context.prompts_review import ReviewPrompts

__all__ = [
    "SUMMARIES_SECTION",
    "SYNTHESIS_TRAILER",
    "TASK_TRAILER",
    "ContextBuilder",
    "TokenCounter",
]


class ContextBuilder(ReviewPrompts):
    """Builds every prompt of a run, admitting only what each task is cleared to see.

    Task prompt layout (`layout`, kind ``task``): the system message holds the agent's
    instructions. The user message holds, first, what is the same in every prompt of the
    agent (``## Tools you can call``, for a tool-using agent), so two tasks of one agent
    share a byte-identical prefix; then ``# Task`` (the task's own text), ``## Files``,
    ``## Context from prerequisite tasks`` (one block per admitted result, verbatim, in
    graph order), ``## Prerequisite tasks that did not complete``, ``## Messages from team
    members``, ``## From memory``, ``## Results from subagents``, on the repair attempt of a
    structured hand-off ``## Your previous answer was rejected``, and ``## Results of your
    tool calls``; then the closing instruction. Each block is fenced (see `render_block`).
    The task's text is labelled with its title, and each result and failed prerequisite
    with its task's title and assignee (``<title> (by <assignee>)``), on the block's opening
    fence line (``~~~~ <label>``); every other block has a ``###`` heading line.

    Long-term memory records (``memory:<id>``) enter only in a ``## From memory`` section,
    admitted when their scope is in the prompt's clearance (the agent's own, or a declared
    memory group it belongs to).

    A task's result usually enters several prompts (each dependent's, then the synthesis).
    A builder renders it once per way of rendering: use one builder per run and token
    counter; the kept blocks hold about as much text as the results themselves.

    Args:
        count_tokens: Token counter of the target model (see `clearance.tokens`); manifests
            and budgets use it.
        memory_groups: ``{group name: members}`` declared in the team file; ``None`` for none.
    """
