"""`IsolatedContext`: everything one fresh subagent is given, and nothing else.

One task's id and full text, the project's architectural context, the contents (not paths)
of the files it needs, its constraints and the controller's clarifications. It holds nothing
about other tasks: no other ids, no results, not even how many tasks exist.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

from clearance._context import layout as L
from clearance._context.architecture import ArchitecturalContext
from clearance._context.layout import ISOLATED_TRAILER
from clearance._context.render import Block, Section, render_user_message

__all__ = [
    "ISOLATED_TRAILER",
    "MAX_QUESTION_CHARS",
    "NO_ANSWER",
    "STATUSES",
    "DispatchStatus",
    "IsolatedContext",
    "IsolatedPart",
    "file_request",
    "parse_status",
    "question_too_long",
    "recorded_question",
    "project_heading",
    "status_word",
    "subagent_result",
]


def project_heading(project: str) -> str:
    """The heading of an isolated prompt's architectural context: ``Project <name>``."""
    return f"Project {project}"


DispatchStatus = Literal["done", "done_with_concerns", "needs_context", "blocked"]
"""How a subagent ended its answer (its ``STATUS:`` line)."""

_STATUS_HEAD = re.compile(r"\W*status", re.IGNORECASE)
_WORD_CHAR = re.compile(r"\w")
_STATUS_WORDS = re.compile(r"[a-z_ ]+", re.IGNORECASE)
_QUESTION = re.compile(r"^\W*question\W*:\s*(.*)$", re.IGNORECASE)
# ``FILE: <path>`` on a line of its own (the path may start on the next line). The path is
# the rest of its line: no lazy group nor a non-word run that crosses lines, so a question
# of many lines or spaces is read in linear time, not quadratic.
_FILE_REQUEST = re.compile(r"^[^\w\n]*file\W*:\s*(\S.*)", re.IGNORECASE | re.MULTILINE)

MAX_QUESTION_CHARS = 4_000
"""Most characters of a subagent's question (or file request) that is answered."""
NO_ANSWER = "(no answer was given)"
"""The clarification a subagent gets when its question got an empty answer, or none in time."""


STATUSES = ("done", "done_with_concerns", "needs_context", "blocked")
"""The statuses a subagent ends its answer with (``STATUS: <status>``)."""

SECTION_ARCH, SECTION_TASK, SECTION_FILES = L.ARCH, L.TASK, L.FILES
SECTION_CONSTRAINTS, SECTION_CLARIFICATIONS = L.CONSTRAINTS, L.CLARIFICATIONS
SECTION_CHILDREN, SECTION_HISTORY = L.CHILDREN, L.HISTORY


@dataclass(frozen=True, kw_only=True, slots=True)
class IsolatedPart:
    """One part of an isolated prompt: where it goes and where it came from.

    Attributes:
        section: The section heading it is rendered under.
        origin: Its provenance: ``arch``, ``task:<id>``, ``file:<path>``,
            ``constraint:<n>``, ``clarification:<n>`` (``n`` from 1), ``child_result:<id>``,
            ``history``.
        heading: Its block heading.
        content: Its text.
    """

    section: str
    origin: str
    heading: str
    content: str


@dataclass(frozen=True, kw_only=True, slots=True)
class IsolatedContext:
    """Everything one fresh subagent receives for one task.

    Attributes:
        task_id: The task's id.
        task_description: The task's full text.
        architectural_context: The project context (shared by every subagent of a
            controller), or ``None``.
        file_contents: Path → file contents (already confined, checked and capped).
        constraints: Rules the result must follow.
        clarifications: Answers the controller gave to the subagent's questions, in order.
        child_results: For a parent that spawned children: child id → its final result
            (combined by an aggregator), never the children's steps.
        child_labels: The label of each child's result (child id → `child_result_label`:
            its agent and goal); a child without one is labelled with its id.
        history: The subagent's own earlier steps, compacted (see ``StepCompactor``);
            ``""`` for a fresh subagent.
    """

    task_id: str
    task_description: str
    architectural_context: ArchitecturalContext | None = None
    file_contents: Mapping[str, str] = field(default_factory=dict)
    constraints: tuple[str, ...] = ()
    clarifications: tuple[str, ...] = ()
    child_results: Mapping[str, str] = field(default_factory=dict)
    child_labels: Mapping[str, str] = field(default_factory=dict)
    history: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "file_contents", MappingProxyType(dict(self.file_contents)))
        object.__setattr__(self, "child_results", MappingProxyType(dict(self.child_results)))
        object.__setattr__(self, "child_labels", MappingProxyType(dict(self.child_labels)))
        object.__setattr__(self, "constraints", tuple(self.constraints))
        object.__setattr__(self, "clarifications", tuple(self.clarifications))

    def with_clarification(self, text: str) -> IsolatedContext:
        """A copy with ``text`` appended to ``clarifications``."""
        return replace(self, clarifications=(*self.clarifications, text))

    def with_file(self, path: str, content: str) -> IsolatedContext:
        """A copy with ``path`` → ``content`` added to (or replaced in) ``file_contents``."""
        return replace(self, file_contents={**self.file_contents, path: content})

    def parts(self) -> tuple[IsolatedPart, ...]:
        """The prompt's parts, in order, exactly as the builder renders them.

        Architecture, task, files, constraints, clarifications, child results, history.
        """
        parts: list[IsolatedPart] = []
        if self.architectural_context is not None:
            arch = self.architectural_context
            parts.append(
                IsolatedPart(
                    section=SECTION_ARCH,
                    origin="arch",
                    heading=project_heading(arch.project),
                    content=arch.to_text(),
                )
            )
        parts.append(
            IsolatedPart(
                section=SECTION_TASK,
                origin=f"task:{self.task_id}",
                heading=f"Task {self.task_id}",
                content=self.task_description,
            )
        )
        parts.extend(
            IsolatedPart(section=SECTION_FILES, origin=f"file:{path}", heading=path,
                         content=content)
            for path, content in self.file_contents.items()
        )  # fmt: skip
        parts.extend(
            IsolatedPart(section=SECTION_CONSTRAINTS, origin=f"constraint:{n}",
                         heading=f"Constraint {n}", content=text)
            for n, text in enumerate(self.constraints, start=1)
        )  # fmt: skip
        parts.extend(
            IsolatedPart(section=SECTION_CLARIFICATIONS, origin=f"clarification:{n}",
                         heading=f"Clarification {n}", content=text)
            for n, text in enumerate(self.clarifications, start=1)
        )  # fmt: skip
        parts.extend(
            IsolatedPart(section=SECTION_CHILDREN, origin=f"child_result:{child}",
                         heading=self.child_labels.get(child) or L.legacy_child_label(child),
                         content=text)
            for child, text in self.child_results.items()
        )  # fmt: skip
        if self.history:
            parts.append(
                IsolatedPart(
                    section=SECTION_HISTORY,
                    origin="history",
                    heading="Your earlier steps",
                    content=self.history,
                )
            )
        return tuple(parts)

    def to_prompt(self) -> str:
        """The user message a subagent receives for this context.

        The same text `ContextBuilder.build_isolated_prompt` renders (the system message,
        the agent's instructions, comes on top): fenced blocks under ``## Project
        architecture``, ``# Task``, ``## Files`` (one block per path, headed with the path),
        ``## Constraints``, ``## Clarifications``, then the closing instruction asking for a
        ``STATUS:`` line.
        """
        sections: dict[str, list[Block]] = {}
        for part in self.parts():
            sections.setdefault(part.section, []).append(
                Block(heading=part.heading, content=part.content)
            )
        return render_user_message(
            [Section(heading, tuple(blocks)) for heading, blocks in sections.items()],
            ISOLATED_TRAILER,
        )


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*(?:\r\n|\r|\n))+")


def status_word(line: str) -> str:
    """The status a ``STATUS: <status>`` line names, lower-cased (``""`` if it is not one).

    The line is ``status`` after any non-word characters, then words of letters and ``_``
    separated by spaces, with any non-word characters around them (``**Status:** DONE``,
    ``STATUS = needs context``). Read in linear time, with no backtracking: a line of
    thousands of spaces costs no more than its length (the regular expression this replaces
    took time to the fourth power of it).
    """
    head = _STATUS_HEAD.match(line)
    if head is None:
        return ""
    rest = line[head.end() :]
    first = _WORD_CHAR.search(rest)
    if first is None:
        return ""
    last = _WORD_CHAR.search(rest[::-1])
    assert last is not None  # there is a word character
    words = rest[first.start() : len(rest) - last.start()]
    if _STATUS_WORDS.fullmatch(words) is None:
        return ""
    return words.lower().replace(" ", "_")


def _lines(text: str) -> list[tuple[int, int, str]]:
    r"""``(start, end, line)`` for each line of ``text``; ``end`` is past its line break.

    Only ``\n``, ``\r\n`` and ``\r`` end a line: other separators (U+2028, form
    feed...) are content, kept where they are.
    """
    lines: list[tuple[int, int, str]] = []
    start = 0
    for match in _LINE_BREAK.finditer(text):
        lines.append((start, match.end(), text[start : match.start()]))
        start = match.end()
    if start < len(text):
        lines.append((start, len(text), text[start:]))
    return lines


def _trim(text: str) -> str:
    """``text`` less its leading blank lines and trailing whitespace; nothing else changes."""
    return _LEADING_BLANK_LINES.sub("", text).rstrip()


def parse_status(text: str) -> tuple[DispatchStatus, str, str | None, str | None]:
    """Split an answer into ``(status, result, question, concerns)``.

    The last line of the form ``STATUS: <status>`` decides; it is the protocol, and the
    only line taken out. For ``done`` the result is the answer less that line, every other
    character kept (a ``QUESTION:`` line, a form feed, a U+2028 are content); for the other
    statuses it is the text before the line, and the text after it is the question
    (``needs_context``: the ``QUESTION:`` lines if any, their prefix dropped) or the
    concerns. Leading blank lines and trailing whitespace are trimmed from each part. An
    answer with no valid status line is ``done_with_concerns``, its result the whole answer,
    with a concern saying so: a missing status is never read as a clean ``done``.
    """
    lines = _lines(text)
    for start, end, line in reversed(lines):
        word = status_word(line)
        if word not in STATUSES:
            continue
        status: DispatchStatus = word  # type: ignore[assignment]
        before, after = _trim(text[:start]), _trim(text[end:])
        if status == "done":
            return status, _trim(text[:start] + text[end:]), None, None
        if status == "needs_context":
            asked = [m.group(1) for *_, ln in lines if (m := _QUESTION.match(ln))]
            question = " ".join(asked).strip() or after or before
            return status, before, question, None
        return status, before, None, after or None
    return "done_with_concerns", _trim(text), None, "the answer has no STATUS line"


def subagent_result(text: str) -> str | None:
    """An isolated task's result from its subagent's answer, or ``None`` if it has none.

    For ``done`` the answer without its status line; for ``done_with_concerns`` the same
    followed by a blank line and ``Concerns: <concerns>``. ``None`` for ``needs_context`` and
    ``blocked``. The orchestrator keeps exactly this as the task's result, and
    ``clearance verify`` recomputes it from the recorded response.
    """
    status, result, _question, concerns = parse_status(text)
    if status not in ("done", "done_with_concerns"):
        return None
    return f"{result}\n\nConcerns: {concerns}" if concerns else result


def file_request(question: str) -> str | None:
    """The path a ``needs_context`` question asks for (``FILE: <path>``), or ``None``.

    The first ``FILE:`` line decides; the path is the rest of it, stripped of whitespace
    and of quotes or backticks around it.
    """
    match = _FILE_REQUEST.search(question)
    return None if match is None else match.group(1).strip().strip("'\"`")


def question_too_long(question: str) -> str | None:
    """The answer to a question over `MAX_QUESTION_CHARS`, or ``None`` for one within it.

    Such a question is never sent on (to the coordinator, a person or the file reader): the
    subagent is told to ask a shorter one, and the round counts.
    """
    if len(question) <= MAX_QUESTION_CHARS:
        return None
    return (
        f"Your question is {len(question):,} characters long, over the "
        f"{MAX_QUESTION_CHARS:,} a question may hold, so it was not answered: ask a shorter one."
    )


def recorded_question(question: str) -> str:
    """``question`` as a clarification event records it: cut, visibly, past the cap."""
    if len(question) <= MAX_QUESTION_CHARS:
        return question
    return (
        f"{question[:MAX_QUESTION_CHARS]} [clearance: cut at {MAX_QUESTION_CHARS:,} of "
        f"{len(question):,} characters]"
    )
