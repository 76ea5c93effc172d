"""The coordinator's plan answer read as a `TaskGraph`: one reader for the run and ``verify``.

A plan is model output. `parse_plan` reads it strictly (`loads_strict`: no key given twice,
no ``NaN``, bounded nesting), keeps only the keys a plan has (``id``, ``title``,
``description``, ``assignee``, ``depends_on``: a plan never grants tools, store grants,
spawning, approvals or conditions), bounds every field, and says why in one bounded
paragraph fit to send back for repair. A plan is also text a person reviews (``clearance
plan`` writes it into a team file to edit): its titles and descriptions hold no
bidirectional override (text shown in another order than it reads) and no C1 control (a
next-line character reads back from YAML as a space), and no two titles look alike
(compared by NFKC, ignoring case and invisible format characters). ``clearance verify``
reads a planned run's last plan answer with it and checks that the run's recorded tasks
are that plan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clearance._core.errors import ClearanceError, ConfigError
from clearance._core.json_answer import loads_strict
from clearance._core.names import check_label, title_key
from clearance._core.reasons import bounded_reason
from clearance._core.spec import Task
from clearance._state.graph import TaskGraph

__all__ = ["MAX_PLAN_CHARS", "MAX_PLAN_TASKS", "MAX_PLAN_VALUES", "PLAN_SCHEMA", "parse_plan"]

MAX_PLAN_TASKS = 20
"""Most tasks a coordinator's plan may hold."""

MAX_PLAN_CHARS = 2_000_000
"""Most characters of a plan's JSON (20 tasks of the longest fields, escaped, fit easily)."""

MAX_PLAN_VALUES = 10_000
"""Most JSON values (objects, lists, strings, numbers...) a plan's JSON may hold."""

_MAX_FIELD_CHARS = 8000
_MAX_ID_CHARS = 128

_Id = Annotated[str, Field(min_length=1, max_length=_MAX_ID_CHARS)]


class _PlannedTask(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)

    id: _Id
    title: str = Field(min_length=1, max_length=300)
    description: str = Field(min_length=1, max_length=_MAX_FIELD_CHARS)
    assignee: str = Field(min_length=1, max_length=_MAX_ID_CHARS)
    depends_on: list[_Id] = Field(default_factory=list, max_length=MAX_PLAN_TASKS)


class _Plan(BaseModel):
    model_config = ConfigDict(extra="ignore")

    tasks: list[_PlannedTask] = Field(min_length=1, max_length=MAX_PLAN_TASKS)


PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tasks": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_PLAN_TASKS,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "title": {"type": "string"},
                    "description": {"type": "string"},
                    "assignee": {"type": "string"},
                    "depends_on": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["id", "title", "description", "assignee", "depends_on"],
            },
        }
    },
    "required": ["tasks"],
}
"""JSON Schema of a plan, sent to providers that support structured output."""

_HIDING = re.compile("[\x80-\x9f\u202a-\u202e\u2066-\u2069]")
"""C1 controls (NEL among them) and the bidirectional overrides and isolates."""


def _check_shown(index: int, planned: _PlannedTask) -> None:
    """Refuse a title or description holding a character that hides what it says."""
    for name in ("title", "description"):
        if (found := _HIDING.search(getattr(planned, name))) is not None:
            raise ValueError(
                f"tasks.{index}.{name}: holds the character {found.group()!a}, which shows "
                "text otherwise than it reads: write plain text"
            )


_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _extract_json(text: str) -> str:
    """The JSON object in ``text``: a fenced code block's body, else first ``{`` to last ``}``."""
    match = _FENCED.search(text)
    if match:
        text = match.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end < start:
        raise ValueError("the answer holds no JSON object")
    return text[start : end + 1]


def parse_plan(text: str, *, agents: Collection[str]) -> TaskGraph:
    """Validate the coordinator's answer as a task graph.

    Dependency edges are kept exactly as planned.

    Args:
        text: The coordinator's answer: a JSON object ``{"tasks": [...]}``, optionally inside
            a fenced code block.
        agents: Names the tasks may be assigned to.

    Returns:
        The validated graph.

    Raises:
        ValueError: With a one-paragraph reason fit to send back to the coordinator for
            repair (invalid JSON, or JSON that reads two ways: a key given twice in one
            object, ``NaN``; JSON over `MAX_PLAN_CHARS` characters or `MAX_PLAN_VALUES`
            values; wrong shape; a title that is not one line of text, or that
            another task has too, ignoring case, Unicode normalization and invisible
            characters; a title or description holding a C1 control or a bidirectional
            override; unknown assignee; invalid graph), of at most
            `MAX_FAILURE_CHARS` characters and a note of the cut.
    """
    try:
        return _parsed(text, agents)
    except ValueError as exc:
        raise ValueError(bounded_reason(str(exc))) from exc


def _check_size(body: str) -> None:
    """Refuse, before the strict (and slower) read, JSON bigger than any plan can be.

    A plan holds at most `MAX_PLAN_TASKS` tasks of bounded fields: `MAX_PLAN_CHARS`
    characters and `MAX_PLAN_VALUES` JSON values are far more than one needs. The values are
    counted on the standard library's fast read, stopping at the cap, so a million empty
    objects are refused in a fraction of a second instead of read for seconds.
    """
    if len(body) > MAX_PLAN_CHARS:
        raise ValueError(
            f"the plan's JSON is {len(body):,} characters, over the {MAX_PLAN_CHARS:,} a plan "
            f"of at most {MAX_PLAN_TASKS} tasks can need"
        )
    try:
        value = json.loads(body, strict=False)
    except ValueError:
        return  # not JSON: the strict read says why
    stack, count = [value], 0
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_PLAN_VALUES:
            raise ValueError(
                f"the plan's JSON holds over {MAX_PLAN_VALUES:,} values; a plan has at most "
                f"{MAX_PLAN_TASKS} tasks of five fields"
            )
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _parsed(text: str, agents: Collection[str]) -> TaskGraph:
    try:
        body = _extract_json(text)
        _check_size(body)
        data = loads_strict(body)
    except RecursionError as exc:
        raise ValueError("invalid JSON: it is nested too deeply") from exc
    except ValueError as exc:  # a key given twice, NaN, or not JSON at all
        if str(exc).startswith(("the answer holds no JSON object", "the plan's JSON")):
            raise
        raise ValueError(f"invalid JSON: {exc}") from exc
    try:
        plan = _Plan.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'plan'}: {err['msg']}"
            for err in exc.errors()[:5]
        )
        raise ValueError(f"the plan does not have the required shape: {problems}") from exc
    known = set(agents)
    tasks = []
    titles: dict[str, tuple[str, str]] = {}  # what a title looks like: (id, title)
    for index, planned in enumerate(plan.tasks):
        try:  # a title is one line, as in a team file (where `clearance plan` writes it)
            check_label(f"tasks.{index}.title", planned.title)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        _check_shown(index, planned)
        # A result is labelled by its title (and assignee) where others read it (dependents,
        # the synthesis): two tasks of one title would be results no one can tell apart.
        # Titles that only look alike (another normalization form, a zero-width space) are
        # as hard to tell apart as one title twice.
        key = title_key(planned.title)
        other, first = titles.setdefault(key, (planned.id, planned.title))
        if other != planned.id:
            same = first.casefold() == planned.title.casefold()
            shown = (
                f"title {planned.title!r}" if same else f"titles {first!a} and {planned.title!a}"
            )
            raise ValueError(
                f"tasks {other!r} and {planned.id!r} have the same {shown}: "
                "give each task a title of its own"
            )
        if planned.assignee not in known:
            raise ValueError(
                f"task {planned.id!r} is assigned to unknown agent {planned.assignee!r}; "
                f"choose one of: {', '.join(sorted(known))}"
            )
        try:
            tasks.append(
                Task(
                    id=planned.id,
                    title=planned.title,
                    description=planned.description,
                    assignee=planned.assignee,
                    depends_on=tuple(planned.depends_on),
                )
            )
        except ClearanceError as exc:
            raise ValueError(str(exc)) from exc
    try:
        return TaskGraph(tasks)
    except ClearanceError as exc:
        raise ValueError(str(exc)) from exc
