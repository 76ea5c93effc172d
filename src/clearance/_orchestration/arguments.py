"""Checks of what code passes to an `Orchestrator`, so misuse fails with one line up front."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from clearance._core.errors import ConfigError
from clearance._core.spec import Task, Team, check_coordinator_name
from clearance._orchestration.run import RunOptions, RunServices
from clearance._state.ledger import Recorder
from clearance.models._base import ChatModel

__all__ = ["checked_arguments", "checked_tasks"]

MAX_SHOWN = 60
"""Characters of a bad value's ``repr`` an error shows."""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[:MAX_SHOWN]}..."


def _refuse(field: str, wanted: str, value: Any) -> ConfigError:
    kind = type(value).__name__
    return ConfigError(f"must be {wanted}, got {kind} {_shown(value)}", field=field)


def checked_arguments(
    team: Any, model: Any, ledger: Any, options: Any, services: Any, tools: Any = ()
) -> tuple[RunOptions, RunServices]:
    """Check an `Orchestrator`'s arguments; return its options and services (defaults for ``None``).

    Raises:
        ConfigError: An argument is not of its type; the message names it and what it got;
            or a worker takes the built-in coordinator's name (`check_coordinator_name`).
    """
    if not isinstance(team, Team):
        raise _refuse("team", "a Team", team)
    check_coordinator_name(team)
    if not isinstance(model, str | ChatModel):
        raise _refuse("model", 'a model id such as "openai:gpt-4o-mini" or a ChatModel', model)
    if ledger is not None and not isinstance(ledger, Recorder):
        raise _refuse("ledger", "a RunLedger (open a URL with RunLedger(url)) or None", ledger)
    if isinstance(tools, str | bytes):
        raise _refuse("tools", "a list of functions or Tools, or a mapping of them by name", tools)
    if options is not None and not isinstance(options, RunOptions):
        raise _refuse("options", "a RunOptions or None", options)
    if services is not None and not isinstance(services, RunServices):
        raise _refuse("services", "a RunServices or None", services)
    options = options if options is not None else RunOptions()
    return options, services if services is not None else RunServices()


def checked_tasks(tasks: Any) -> list[Task]:
    """The tasks of a run, refused unless ``tasks`` is an iterable of `Task` (not a string).

    Raises:
        ConfigError: ``tasks`` is a string, a mapping or not iterable, or holds a non-`Task`.
    """
    if isinstance(tasks, str | bytes | dict) or not isinstance(tasks, Iterable):
        raise _refuse("tasks", "a list of Task", tasks)
    checked = list(tasks)
    for i, task in enumerate(checked):
        if not isinstance(task, Task):
            raise _refuse(f"tasks[{i}]", "a Task (build it with Task(id=..., ...))", task)
    return checked
