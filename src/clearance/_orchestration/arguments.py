"""Checks of what code passes to an `Orchestrator`, so misuse fails with one line up front."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from clearance._agents.tools import Tool
from clearance._context.tool_sections import tool_name
from clearance._core.errors import ConfigError
from clearance._core.names import check_tool_name
from clearance._core.spec import Task, Team, check_coordinator_name
from clearance._core.teamfile_models import MAX_MODEL_ID_CHARS, check_model_id
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
            or a worker takes the built-in coordinator's name (`check_coordinator_name`);
            or a value a team file would refuse: a model id (`check_model_id`; a model
            instance's id over `MAX_MODEL_ID_CHARS`, the ledger's column), a user tool's
            name (`check_tool_name`), or a `Tool` given under another name than its own.
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
    services = services if services is not None else RunServices()
    _check_models(team, model, services)
    for model_id in options.model_options:  # a key no model id names no model: no effect
        _check_model(model_id, field="options.model_options")
    _check_tools(team, tools)
    return options, services


def _check_models(team: Team, model: str | ChatModel, services: RunServices) -> None:
    """Each model id as a team file's is checked; each instance's id within the column."""
    _check_model(model, field="model")
    for key, instance in services.models.items():
        if not isinstance(key, str) or len(key) > MAX_MODEL_ID_CHARS:
            raise _too_long("services.models", key)
        if not isinstance(instance, ChatModel):
            raise _refuse(f"services.models.{key}", "a ChatModel", instance)
        _check_model(instance, field=f"services.models.{key}")
    coordinator = (team.coordinator,) if team.coordinator is not None else ()
    for agent in (*team.agents, *coordinator):
        if agent.model is not None:
            where = "coordinator" if agent is team.coordinator else f"agents.{agent.name}"
            _check_model(agent.model, field=f"{where}.model")


def _check_model(model: str | ChatModel, *, field: str) -> None:
    if isinstance(model, str):
        try:
            check_model_id(model)
        except ValueError as exc:
            raise ConfigError(str(exc), field=field) from exc
        return
    model_id = getattr(model, "model_id", None)
    if not isinstance(model_id, str) or len(model_id) > MAX_MODEL_ID_CHARS:
        raise _too_long(field, model_id)


def _too_long(field: str, model_id: Any) -> ConfigError:
    if not isinstance(model_id, str):
        return _refuse(field, "a model id (a string)", model_id)
    return ConfigError(
        f"model id {model_id[:40]!r}... is {len(model_id)} characters long, at most "
        f"{MAX_MODEL_ID_CHARS} (the ledger records each call's)",
        field=field,
    )


def _check_tools(team: Team, tools: Any) -> None:
    """User tools and agents' tool functions named as a team file's ``tools:`` are.

    A one-shot iterable of tools is left to `Tool` (it is read once, when the tools are
    named); a function an agent lists may take a built-in tool's name here, as
    `graph_check.check_tools` refuses that with its own line when a run starts.
    """
    named: Iterable[tuple[Any, Any]] = ()
    if isinstance(tools, Mapping):
        named = tools.items()
    elif isinstance(tools, Collection):
        named = ((None, t) for t in tools)
    for key, entry in named:
        if not isinstance(entry, Tool) and not callable(entry):
            where = f"tools.{_shown_name(key)}" if key is not None else "tools"
            raise _refuse(where, "a function or a Tool", entry)
        name = key if key is not None else _name_of(entry)
        check_tool_name(name, field=f"tools.{_shown_name(name)}")
        if isinstance(entry, Tool) and entry.name != name:
            raise ConfigError(
                f"the Tool given under this name is named {entry.name!r}: a model calls it "
                "by its own name, so give it under that name",
                field=f"tools.{name}",
            )
    for agent in team.agents:
        for entry in agent.tools:
            if isinstance(entry, str):
                continue
            name = tool_name(entry)
            try:
                check_tool_name(name, field=f"agents.{agent.name}.tools", builtin=False)
            except ConfigError as exc:
                raise ConfigError(
                    f"function {_shown_name(name)}: {exc.message}", field=exc.field
                ) from exc


def _name_of(entry: Any) -> Any:
    """The name a listed tool goes by: a `Tool`'s own, a function's ``__name__``."""
    return entry.name if isinstance(entry, Tool) else getattr(entry, "__name__", None)


def _shown_name(name: Any) -> str:
    """``name`` as an error line may show it: as is when short and printable."""
    if isinstance(name, str) and name.isprintable() and len(name) <= MAX_SHOWN:
        return name
    return _shown(name)


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
