"""The layout of every kind of prompt, in one table: sections, what they hold, the trailer.

A user message is its sections in table order (empty ones left out), then the trailer (see
`render`). Each `Row` names a section's heading, the kinds of item (origin kinds) it may
hold, whether it is the same in every prompt of one agent (``stable``: rendered first, so two
prompts of one agent share a byte-identical prefix a server-side prompt cache can reuse) and
how its blocks carry their titles: on a ``### <title>`` line before the fence, on the
opening fence line (``~~~~ <title>``: ``on_fence``), or not at all (``bare``: the fence
only; the item's title stays in the manifest).

The labels of items (a task's own text, the results, failures, summaries and children's
results it is shown) are written once, in `labels`, and re-exported here. A task prompt puts
its labels on the fence line: the least text that still ties a label to its block (see
``docs/isolation.md``).

`ContextBuilder` renders from the current `Layout` of each prompt kind; ``clearance verify``
checks a recorded prompt against the layouts of its kind, the current one first and then
the earlier ones (`LAYOUTS`), so runs recorded before a layout change still verify. A new
kind of item is one row here, one admission case in `Clearance.admits` and one provenance
check in verify.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from clearance._context.labels import (
    child_result_label,
    fixed_title,
    legacy_child_label,
    legacy_summary_label,
    legacy_task_label,
    result_label,
    status_label,
    summary_label,
    task_label,
)
from clearance._core.origins import Subject
from clearance._core.vocabulary import OriginKind, PromptKind

__all__ = [
    "LAYOUTS",
    "Layout",
    "Row",
    "child_result_label",
    "current",
    "fixed_title",
    "item_kinds",
    "layout_kind",
    "legacy_child_label",
    "legacy_summary_label",
    "legacy_task_label",
    "plan_example",
    "result_label",
    "status_label",
    "summary_label",
    "task_label",
]

# -- section headings --------------------------------------------------------------------------

TASK = "# Task"
FILES = "## Files"
RESULTS = "## Context from prerequisite tasks"
FAILED_PREREQUISITES = "## Prerequisite tasks that did not complete"
MESSAGES = "## Messages from team members"
MEMORY = "## From memory"
CHILDREN = "## Results from subagents"
REPAIR = "## Your previous answer was rejected"
REVIEW_FINDINGS = "## Review findings to address"
HOOKS = "## From hooks"
CANDIDATE = "## Result to review"
TOOLS = "## Tools you can call"
TOOL_RESULTS = "## Results of your tool calls"
DELEGATED = "# Delegated task"
CHILD_GOAL = "# Your goal"
GOAL = "# Goal"
COMPLETED = "## Completed tasks"
FAILED = "## Failed tasks"
SKIPPED = "## Skipped tasks"
SHARED_MEMORY = "## Shared memory"
SUMMARIES = "## Summaries of completed tasks"
TEAM = "## Team members"
PLAN_REJECTED = "## Your previous plan was rejected"
ARCH = "## Project architecture"
CONSTRAINTS = "## Constraints"
CLARIFICATIONS = "## Clarifications"
HISTORY = "## Your earlier steps"
QUESTION = "## Question from the subagent"
TURNS = "## Conversation so far"

# -- labels (`labels`) -----------------------------------------------------------------------

# -- closing instructions ----------------------------------------------------------------------

TASK_TRAILER = "Reply with your result only."
"""The closing instruction of task, delegated and child prompts (without tools)."""
TOOL_TRAILER = (
    "Complete the task above. To use a tool, call it; when you have what you need, reply "
    "with your result only."
)
"""The closing instruction of a tool-using agent's prompts."""
TASK_TRAILER_V1 = "Complete the task above. Reply with your result only."
"""`TASK_TRAILER` of layout version 1 (runs recorded before the trimmed framing)."""
SYNTHESIS_TRAILER = (
    "Write the final answer to the goal, using the task results above. Say which results "
    "you relied on, and mention any failed or skipped task whose result is missing."
)
SYNTHESIS_MAP_TRAILER = (
    "Summarize the material above for the final answer to the goal. Keep every fact, figure "
    "and conclusion the goal needs, say which task each comes from, and leave out the rest."
)
SYNTHESIS_REDUCE_TRAILER = (
    "Write the final answer to the goal, using the summaries of the task results above. Say "
    "which tasks you relied on, and mention any failed or skipped task whose result is missing."
)
PLAN_INSTRUCTIONS = (
    "You are planning work for a team. Break the goal into a small number of tasks, each "
    "assigned to one team member by name. A task lists the ids of the tasks whose results it "
    "needs in depends_on; tasks without dependencies run in parallel. Reply with JSON only, "
    'of the form {"tasks": [{"id": "...", "title": "...", "description": "...", '
    '"assignee": "...", "depends_on": ["..."]}]}.'
)
"""The start of the planning prompt's closing instruction (an example plan follows)."""


def plan_example(assignee: str | None) -> str:
    """What follows `PLAN_INSTRUCTIONS`: an example plan of one task for ``assignee``.

    Args:
        assignee: The first agent of the roster; ``None`` for an empty roster (``"..."``).
    """
    example = {"tasks": [{"id": "t1", "title": "...", "description": "...",
                          "assignee": "..." if assignee is None else assignee,
                          "depends_on": []}]}  # fmt: skip
    return f" Example: {json.dumps(example)}"


CLARIFICATION_TRAILER = (
    "A subagent working on the task above asked the question above. Answer it from the "
    "material above, briefly and precisely. If the material does not hold the answer, say so."
)
ISOLATED_TRAILER = (
    "Complete the task above using only the material given. End your answer with one line "
    "'STATUS: done', 'STATUS: done_with_concerns' (then say what worries you), "
    "'STATUS: needs_context' (then, on the next line, 'QUESTION: <your question>' or "
    "'FILE: <path of a project file you need>') or 'STATUS: blocked' (then say why)."
)
CONVERSATION_TRAILER = "Reply to the last message of the conversation above."
REVIEW_TRAILER = (
    "Review the result above against the task above. Reply with JSON only: "
    '{"verdict": "accept" or "revise", "findings": "what must change, or why it is fine"}.'
)
SUMMARY_PROMPT = (
    "Summarize the conversation above in a few sentences. Keep names, numbers, decisions and "
    "open questions. Reply with the summary only."
)


@dataclass(frozen=True, slots=True)
class Row:
    """One section of a prompt layout.

    Attributes:
        heading: The section's heading line (``# Task``, ``## Files`` ...).
        kinds: Origin kinds its blocks may hold.
        stable: The section is the same in every prompt of one agent (tools, architecture);
            stable sections come before every per-task section.
        bare: Its blocks are rendered as a fence without a heading line.
        on_fence: Its blocks carry their titles on the opening fence line.
    """

    heading: str
    kinds: frozenset[str]
    stable: bool = False
    bare: bool = False
    on_fence: bool = False


def _row(
    heading: str, *kinds: str, stable: bool = False, bare: bool = False, on_fence: bool = False
) -> Row:
    return Row(heading, frozenset(kinds), stable, bare, on_fence)


@dataclass(frozen=True, slots=True)
class Layout:
    """The layout of one kind of prompt, in one version.

    Attributes:
        kind: The prompt kind (`layout_kind`).
        version: 1 for the first layout; each change of the rendered text adds one.
        rows: Its sections, in the order they are rendered.
        trailers: Its closing instructions by name (``"default"``, ``"tools"``).
        trailer_is_prefix: The trailer is the named text followed by a suffix the prompt's
            items decide (the planning prompt's example plan: `plan_example`).
    """

    kind: str
    version: int
    rows: tuple[Row, ...]
    trailers: Mapping[str, str]
    trailer_is_prefix: bool = False

    def row(self, heading: str) -> Row:
        """The row with this heading.

        Raises:
            KeyError: The layout has no such section.
        """
        for row in self.rows:
            if row.heading == heading:
                return row
        raise KeyError(heading)

    def accepts_trailer(self, trailer: str, *, suffix: str = "") -> bool:
        """Whether ``trailer`` is one of this layout's closing instructions.

        Args:
            trailer: The prompt's closing instruction.
            suffix: For a layout whose trailer has a suffix (``trailer_is_prefix``), the one
                its items give; ignored otherwise.
        """
        if self.trailer_is_prefix:
            return any(trailer == t + suffix for t in self.trailers.values())
        return trailer in self.trailers.values()


_TOOL_ROWS = (
    _row(TOOLS, OriginKind.TOOL_SPEC, stable=True),
    _row(TOOL_RESULTS, OriginKind.TOOL, OriginKind.STORE),
)
_TASK_TRAILERS = {"default": TASK_TRAILER, "tools": TOOL_TRAILER}
_TASK_TRAILERS_V1 = {"default": TASK_TRAILER_V1, "tools": TOOL_TRAILER}

_TASK_BODY = (
    _row(FILES, OriginKind.FILE),
    _row(RESULTS, OriginKind.TASK_RESULT, on_fence=True),
    _row(FAILED_PREREQUISITES, OriginKind.TASK_STATUS, on_fence=True),
    _row(MESSAGES, OriginKind.MESSAGE),
    _row(MEMORY, OriginKind.MEMORY),
    _row(CHILDREN, OriginKind.CHILD_RESULT),
    _row(REPAIR, OriginKind.REPAIR),
)
_TASK_V3 = Layout(
    PromptKind.TASK,
    3,
    (
        _TOOL_ROWS[0],
        _row(TASK, OriginKind.TASK, on_fence=True),
        *_TASK_BODY,
        _row(HOOKS, OriginKind.HOOK),
        _row(REVIEW_FINDINGS, OriginKind.REVIEW),
        _TOOL_ROWS[1],
    ),
    _TASK_TRAILERS,
)
"""Labelled: the task's text and each result or failure labelled on its fence line."""
_HEADED_BODY = tuple(Row(r.heading, r.kinds) for r in _TASK_BODY)
_TASK_V2 = Layout(
    PromptKind.TASK,
    2,
    (
        _TOOL_ROWS[0],
        _row(TASK, OriginKind.TASK, bare=True),
        *(_row(r.heading, *r.kinds, bare=r.heading == RESULTS) for r in _HEADED_BODY),
        _TOOL_ROWS[1],
    ),
    _TASK_TRAILERS,
)
"""The trimmed framing: task text and results bare (runs recorded before labels came back)."""
_TASK_V1 = Layout(
    PromptKind.TASK, 1, (_row(TASK, OriginKind.TASK), *_HEADED_BODY, *_TOOL_ROWS), _TASK_TRAILERS_V1
)
_DELEGATION_V2 = Layout(
    PromptKind.DELEGATION,
    2,
    (_TOOL_ROWS[0], _row(DELEGATED, OriginKind.DELEGATION, bare=True), _TOOL_ROWS[1]),
    _TASK_TRAILERS,
)
_DELEGATION_V1 = Layout(
    PromptKind.DELEGATION,
    1,
    (_row(DELEGATED, OriginKind.DELEGATION), *_TOOL_ROWS),
    _TASK_TRAILERS_V1,
)
_CHILD_V2 = Layout(
    PromptKind.CHILD,
    2,
    (_TOOL_ROWS[0], _row(CHILD_GOAL, OriginKind.CHILD_GOAL, bare=True), _TOOL_ROWS[1]),
    _TASK_TRAILERS,
)
_CHILD_V1 = Layout(
    PromptKind.CHILD, 1, (_row(CHILD_GOAL, OriginKind.CHILD_GOAL), *_TOOL_ROWS), _TASK_TRAILERS_V1
)

_ISOLATED = Layout(
    PromptKind.ISOLATED,
    1,
    (
        _row(ARCH, OriginKind.ARCH, stable=True),
        _row(TASK, OriginKind.TASK),
        _row(FILES, OriginKind.FILE),
        _row(RESULTS, OriginKind.TASK_RESULT),
        _row(CONSTRAINTS, OriginKind.CONSTRAINT),
        _row(CLARIFICATIONS, OriginKind.CLARIFICATION),
        _row(CHILDREN, OriginKind.CHILD_RESULT),
        _row(MEMORY, OriginKind.MEMORY),
        _row(HISTORY, OriginKind.HISTORY),
    ),
    {"default": ISOLATED_TRAILER},
)
_CLARIFICATION = Layout(
    PromptKind.CLARIFICATION,
    1,
    (
        _row(TASK, OriginKind.TASK),
        _row(RESULTS, OriginKind.TASK_RESULT),
        _row(QUESTION, OriginKind.QUESTION),
    ),
    {"default": CLARIFICATION_TRAILER},
)
_GOAL = _row(GOAL, OriginKind.GOAL)
_FAILED_ROWS = (
    _row(FAILED, OriginKind.TASK_STATUS),
    _row(SKIPPED, OriginKind.TASK_STATUS),
    _row(SHARED_MEMORY, OriginKind.SHARED_MEMORY),
)
_SYNTHESIS = Layout(
    PromptKind.SYNTHESIS,
    1,
    (_GOAL, _row(COMPLETED, OriginKind.TASK_RESULT), *_FAILED_ROWS),
    {"default": SYNTHESIS_TRAILER},
)
_SYNTHESIS_REDUCE = Layout(
    PromptKind.SYNTHESIS_REDUCE,
    1,
    (_GOAL, _row(SUMMARIES, OriginKind.SUMMARY_OF), *_FAILED_ROWS),
    {"default": SYNTHESIS_REDUCE_TRAILER},
)
_SYNTHESIS_MAP = Layout(
    PromptKind.SYNTHESIS_MAP,
    1,
    (_GOAL, _row(COMPLETED, OriginKind.TASK_RESULT), _row(SUMMARIES, OriginKind.SUMMARY_OF)),
    {"default": SYNTHESIS_MAP_TRAILER},
)
_PLAN = Layout(
    PromptKind.PLAN,
    1,
    (_GOAL, _row(TEAM, OriginKind.AGENT), _row(PLAN_REJECTED, OriginKind.PLAN_FEEDBACK)),
    {"default": PLAN_INSTRUCTIONS},
    trailer_is_prefix=True,
)
_CONVERSATION = Layout(
    PromptKind.CONVERSATION,
    1,
    (_row(TURNS, OriginKind.TURN, OriginKind.SUMMARY), _row(MEMORY, OriginKind.MEMORY)),
    {"default": CONVERSATION_TRAILER},
)
_SUMMARY = Layout(PromptKind.SUMMARY, 1, _CONVERSATION.rows, {"default": SUMMARY_PROMPT})
_REVIEW = Layout(
    PromptKind.REVIEW,
    1,
    (_row(TASK, OriginKind.TASK, on_fence=True), _row(CANDIDATE, OriginKind.CANDIDATE)),
    {"default": REVIEW_TRAILER},
)
"""A reviewer's prompt: the task's text and the candidate result, nothing else."""

LAYOUTS: Mapping[str, tuple[Layout, ...]] = {
    layouts[0].kind: layouts
    for layouts in (
        (_TASK_V3, _TASK_V2, _TASK_V1),
        (_DELEGATION_V2, _DELEGATION_V1),
        (_CHILD_V2, _CHILD_V1),
        (_ISOLATED,),
        (_CLARIFICATION,),
        (_SYNTHESIS,),
        (_SYNTHESIS_REDUCE,),
        (_SYNTHESIS_MAP,),
        (_PLAN,),
        (_CONVERSATION,),
        (_SUMMARY,),
        (_REVIEW,),
    )
}
"""Every prompt kind's layouts, the current one (which the builder renders) first."""


def current(kind: str) -> Layout:
    """The layout the builder renders for a prompt kind."""
    return LAYOUTS[kind][0]


def item_kinds(kind: str) -> frozenset[str]:
    """Every origin kind a prompt of ``kind`` may hold, in any of its layouts (instructions too)."""
    return frozenset({OriginKind.INSTRUCTIONS}).union(
        *(row.kinds for shape in LAYOUTS[kind] for row in shape.rows)
    )


def layout_kind(subject: Subject, *, summaries: bool = False) -> str | None:
    """The prompt kind of a call subject, or ``None`` for an unknown subject.

    Args:
        subject: The call's subject.
        summaries: The prompt holds ``summary_of`` items (a ``synthesis`` that is the reduce
            step of a hierarchical synthesis).
    """
    if subject.kind == PromptKind.SYNTHESIS and subject.ref is None:
        return PromptKind.SYNTHESIS_REDUCE if summaries else PromptKind.SYNTHESIS
    if subject.kind == PromptKind.PLAN and subject.ref is None:
        return PromptKind.PLAN
    if subject.ref is not None and subject.kind in _SUBJECT_KINDS:
        return subject.kind
    return None


_SUBJECT_KINDS = frozenset(
    {
        PromptKind.TASK,
        PromptKind.DELEGATION,
        PromptKind.CHILD,
        PromptKind.ISOLATED,
        PromptKind.CLARIFICATION,
        PromptKind.SYNTHESIS_MAP,
        PromptKind.CONVERSATION,
        PromptKind.SUMMARY,
        PromptKind.REVIEW,
    }
)
