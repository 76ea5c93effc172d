"""What a run records of its configuration, and reading it back for `Orchestrator.from_run`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from clearance._agents.files import FileCaps
from clearance._agents.tools import Tool, tool_name
from clearance._core.budget import RunBudget
from clearance._core.errors import ConfigError
from clearance._core.spec import Agent, Team
from clearance._orchestration.resume import (
    load_recorded_run,
    process_identity,
    restore_messages,
    restore_resources,
)
from clearance._orchestration.run import RunSettings
from clearance._orchestration.run_budget import recorded_budget
from clearance._orchestration.run_memory import RunMemory, absolute_url
from clearance._state.ledger import RunLedger
from clearance._state.store import ContextStore
from clearance.models._registry import DEFAULT_MODEL_ID

__all__ = [
    "MODEL_OPTION_KEYS",
    "agent_config",
    "checked_model_options",
    "import_path",
    "named_tools",
    "recorded_arguments",
    "recorded_config",
    "recorded_model_options",
    "recorded_subagent_settings",
]


def agent_config(agent: Agent) -> dict[str, Any]:
    """An agent's spec as JSON-ready data, recorded so that a run can be resumed."""
    return {
        "name": agent.name,
        "model": agent.model,
        "instructions": agent.instructions,
        "role": agent.role,
        "limits": dataclasses.asdict(agent.limits),
        "tools": [tool_name(t) for t in agent.tools],
        "can_delegate_to": list(agent.can_delegate_to),
        "can_spawn": list(agent.can_spawn),
        "store_grants": dict(agent.store_grants),
        # Memory hook: memory settings and store-read extension, restored by `resume`.
        "memory": agent.memory.to_dict() if agent.memory else None,
        "store_read_extends_ttl_s": agent.store_read_extends_ttl_s,
    }


def named_tools(
    tools: Mapping[str, Tool | Callable[..., Any]] | Iterable[Tool | Callable[..., Any]],
) -> tuple[dict[str, Tool], dict[str, str | None]]:
    """User tools by name, and the import path of each (``None`` if it has none).

    ``tools`` is a mapping by name, or a list named by each tool's own name (a function's
    ``__name__``).
    """
    named = tools.items() if isinstance(tools, Mapping) else ((None, t) for t in tools)
    by_name: dict[str, Tool] = {}
    paths: dict[str, str | None] = {}
    for key, entry in named:
        tool = entry if isinstance(entry, Tool) else Tool.from_function(entry, name=key)
        by_name[key or tool.name] = tool
        paths[key or tool.name] = import_path(entry)
    return by_name, paths


def import_path(entry: Tool | Callable[..., Any]) -> str | None:
    """``module:qualname`` of a plain module-level function (so `resume` can import it)."""
    if isinstance(entry, Tool):
        return None
    module, qualname = getattr(entry, "__module__", None), getattr(entry, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        return None
    return f"{module}:{qualname}"


def recorded_config(
    settings: RunSettings,
    *,
    coordinator: Agent,
    default_model: str,
    tool_paths: Mapping[str, str | None],
    model_options: Mapping[str, Mapping[str, int]],
    budget: RunBudget | None = None,
) -> dict[str, Any]:
    """A run's configuration as JSON-ready data, recorded when it starts.

    `Orchestrator.from_run` rebuilds the orchestrator from it, and ``verify`` reads where the
    run's memory and store live (their URLs with passwords masked).

    Args:
        settings: What the orchestrator fixes for the run.
        coordinator: The team's coordinator (or the default one).
        default_model: The id of the model of agents whose ``model`` is ``None``.
        tool_paths: Each user tool's import path (``None`` for one that cannot be imported).
        model_options: The settings models are made with, by model id.
        budget: The run's budget, or ``None``.
    """
    memory, store, team = settings.memory, settings.store, settings.team
    return {
        "default_model": default_model,
        "max_concurrency": settings.max_concurrency,
        "input_root": str(settings.input_root) if settings.input_root else None,
        "agents": [agent_config(a) for a in team.agents],
        "coordinator": agent_config(coordinator),
        "memory_groups": {g: sorted(m) for g, m in settings.memory_groups.items()},
        "project_root": str(settings.project_root) if settings.project_root else None,
        "workspace_root": str(settings.workspace_root),
        "file_caps": dataclasses.asdict(settings.file_caps),
        "clarification_rounds": settings.clarification_rounds,
        # Where memory and store live (passwords masked), for `verify` and `resume`;
        # the full memory groups (shared conversations too) and the user tools' import paths.
        "memory": memory.config() if memory else None,
        "store": {"url": absolute_url(store.url)} if store else None,
        "memory_group_specs": [dataclasses.asdict(g) for g in team.memory_groups],
        "tool_paths": dict(tool_paths),
        "synthesis_from": list(settings.synthesis_from) if settings.synthesis_from else None,
        "model_options": model_options,
        "approval_tools": sorted(settings.approval_tools),
        "budget": budget.to_dict() if budget is not None else None,
        "process": process_identity(),  # `resume` refuses a run whose process is alive
    }


MODEL_OPTION_KEYS = frozenset(
    {"context_window", "n_ctx", "n_threads", "n_threads_batch", "n_batch"}
)
"""The `get_model` keyword arguments ``model_options`` may hold (all integers)."""


def checked_model_options(
    options: Mapping[str, Mapping[str, int]],
) -> dict[str, dict[str, int]]:
    """``options`` as plain dicts, once every key is known and every value an integer.

    The values' ranges are checked by the model that receives them.

    Raises:
        ConfigError: A model id is not a string, a setting is not in `MODEL_OPTION_KEYS`, or
            a value is not an integer.
    """
    checked: dict[str, dict[str, int]] = {}
    for model_id, settings in options.items():
        if not isinstance(model_id, str) or not isinstance(settings, Mapping):
            raise ConfigError(
                f"not a model id and its settings: {model_id!r}", field="model_options"
            )
        for key, value in settings.items():
            if key not in MODEL_OPTION_KEYS:
                raise ConfigError(f"unknown model setting {key!r}", field="model_options")
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{key} must be an integer, got {value!r}", field="model_options")
        checked[model_id] = dict(settings)
    return checked


def recorded_model_options(config: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """The ``model_options`` a run recorded (``{}`` for a run recorded without them).

    Raises:
        ConfigError: The recorded options are damaged.
    """
    recorded = config.get("model_options")
    if recorded is None:
        return {}
    if not isinstance(recorded, Mapping):
        raise ConfigError("the run's recorded model_options are damaged", field="model_options")
    return checked_model_options(recorded)


def recorded_subagent_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The isolated-task and workspace settings a run recorded, as `Orchestrator` arguments."""
    settings: dict[str, Any] = {}
    if isinstance(config.get("project_root"), str):
        settings["project_root"] = config["project_root"]
    if isinstance(config.get("workspace_root"), str):
        settings["workspace_root"] = config["workspace_root"]
    if isinstance(config.get("file_caps"), dict):
        settings["file_caps"] = FileCaps(**config["file_caps"])
    approval = config.get("approval_tools")
    if isinstance(approval, list) and all(isinstance(n, str) for n in approval):
        settings["approval_tools"] = approval
    rounds = config.get("clarification_rounds")
    if isinstance(rounds, int) and not isinstance(rounds, bool):
        settings["clarification_rounds"] = rounds
    return settings


def recorded_arguments(
    ledger: RunLedger,
    run_id: str,
    *,
    store: ContextStore | None,
    memory: RunMemory | None,
    tools: Mapping[str, Tool | Callable[..., Any]],
) -> tuple[Team, dict[str, Any]]:
    """The team and the `Orchestrator` keyword arguments a recorded run was started with.

    The arguments are the default model, model options, concurrency, input folder, messages,
    subagent settings, budget, store, memory and user tools (see `restore_resources`; what is given
    wins).

    Raises:
        StoreError: No run (or several) match ``run_id``, or the database failed.
        ConfigError: The run was recorded without its team's specs (an older version of
            Clearance), or its record is damaged.
    """
    recorded = load_recorded_run(ledger, run_id)
    if recorded.team is None:
        raise ConfigError(
            f"run {recorded.record.run_id} was recorded without its agents' specs; resume it "
            "with Orchestrator(team, ...).resume(run_id)",
            field="run",
        )
    config = recorded.record.config
    store, memory, restored = restore_resources(
        recorded.record, store=store, memory=memory, tools=tools
    )
    return recorded.team, {
        "store": store,
        "memory": memory,
        "tools": restored,
        "model": recorded.default_model or DEFAULT_MODEL_ID,
        "model_options": recorded_model_options(config),
        "max_concurrency": recorded.max_concurrency or 4,
        "input_root": recorded.input_root,
        "messages": restore_messages(recorded.messages),
        **recorded_subagent_settings(config),
        **recorded_budget(config),
    }
