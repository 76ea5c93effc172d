"""The coordinator's plan answer read as a `TaskGraph`: one reader for the run and ``verify``.

A plan is model output. `parse_plan` reads it strictly (`loads_strict`: no key given twice,
no ``NaN``, bounded nesting), keeps only the keys a plan has (``id``, ``title``,
``description``, ``assignee``, ``depends_on``: a plan never grants tools, store grants,
spawning, approvals or conditions), bounds every field, and says why in one bounded
paragraph fit to send back for repair. ``clearance verify`` reads a planned run's last plan
answer with it and checks that the run's recorded tasks are that plan.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from clearance._core.errors import ClearanceError, ConfigError
from clearance._core.json_answer import loads_strict
from clearance._core.names import check_label
from clearance._core.reasons import bounded_reason
from clearance._core.spec import Task
from clearance._state.graph import TaskGraph

__all__ = ["MAX_PLAN_TASKS", "PLAN_SCHEMA", "parse_plan"]

MAX_PLAN_TASKS = 20
"""Most tasks a coordinator's plan may hold."""

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
            object, ``NaN``; wrong shape; a title that is not one line of text, or that
            another task has too, ignoring case; unknown assignee; invalid graph), of at most
            `MAX_FAILURE_CHARS` characters and a note of the cut.
    """
    try:
        return _parsed(text, agents)
    except ValueError as exc:
        raise ValueError(bounded_reason(str(exc))) from exc


def _parsed(text: str, agents: Collection[str]) -> TaskGraph:
    try:
        data = loads_strict(_extract_json(text))
    except RecursionError as exc:
        raise ValueError("invalid JSON: it is nested too deeply") from exc
    except ValueError as exc:  # a key given twice, NaN, or not JSON at all
        if str(exc) == "the answer holds no JSON object":
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
    titles: dict[str, str] = {}
    for index, planned in enumerate(plan.tasks):
        try:  # a title is one line, as in a team file (where `clearance plan` writes it)
            check_label(f"tasks.{index}.title", planned.title)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        # A result is labelled by its title (and assignee) where others read it (dependents,
        # the synthesis): two tasks of one title would be results no one can tell apart.
        if (other := titles.setdefault(planned.title.casefold(), planned.id)) != planned.id:
            raise ValueError(
                f"tasks {other!r} and {planned.id!r} have the same title {planned.title!r}: "
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
