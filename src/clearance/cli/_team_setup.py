"""Loading a team file for a command: its graph, files, ``--model`` and model settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from clearance._agents.files import confined_path
from clearance._core.errors import ConfigError, GraphError
from clearance._core.spec import Team
from clearance._core.teamfile import LoadedTeam, load_team_file
from clearance._state.graph import TaskGraph
from clearance.models._base import ChatModel, split_model_id
from clearance.models._llama_cpp import CONTEXT_RANGE
from clearance.models._registry import DEFAULT_MODEL_ID, get_model

__all__ = [
    "LLAMA_SETTINGS",
    "WINDOWED_PROVIDERS",
    "configured_models",
    "load_checked",
    "team_model_options",
    "team_with_model_reset",
    "with_model",
]


def load_checked(team_file: Path, input_dir: str | None) -> tuple[LoadedTeam, TaskGraph | None]:
    """Load a team file and validate its task graph; graph errors name the file."""
    loaded = load_team_file(team_file, input_dir=input_dir)
    if not loaded.tasks:
        return loaded, None
    _check_files(loaded)
    try:
        return loaded, TaskGraph(loaded.tasks)
    except GraphError as exc:
        raise ConfigError(str(exc), source=str(team_file)) from exc


def _check_files(loaded: LoadedTeam) -> None:
    """Refuse, before anything runs, a task file that is absolute or escapes the input folder.

    Raises:
        ConfigError: A task lists files but there is no input folder.
        PathEscapeError: A listed file is absolute, has a ``..`` part, or resolves (through
            symlinks) outside the input folder.
    """
    root = loaded.input_root.resolve() if loaded.input_root is not None else None
    for task in loaded.tasks:
        for rel in task.files:
            if root is None:
                raise ConfigError(
                    f"task {task.id!r} lists files but there is no input folder "
                    "(input.default or --input)",
                    source=loaded.source,
                )
            confined_path(root, rel)


def with_model(loaded: LoadedTeam, model: str | None) -> tuple[LoadedTeam, str]:
    """Apply ``--model``: it replaces every agent's model, coordinator included."""
    if model is None:
        return loaded, loaded.spec.model or DEFAULT_MODEL_ID
    team = loaded.team
    agents = tuple(dataclasses.replace(a, model=None) for a in team.agents)
    coordinator = dataclasses.replace(team.coordinator, model=None) if team.coordinator else None
    team = dataclasses.replace(team, agents=agents, coordinator=coordinator)
    return dataclasses.replace(loaded, team=team), model


WINDOWED_PROVIDERS = ("openai", "anthropic")
"""Providers whose context window comes from the team file or ``--context-window``."""

LLAMA_SETTINGS = {
    "threads": "n_threads",
    "threads_batch": "n_threads_batch",
    "batch_size": "n_batch",
}
"""``model_options`` keys that only ``llama-cpp:`` models take, and their `LlamaCppModel` names."""


def team_model_options(
    loaded: LoadedTeam, default_id: str, **overrides: int | None
) -> dict[str, dict[str, int]]:
    """The `get_model` settings of the team's models, by model id (only models with settings).

    ``overrides`` (``context_window``, ``threads``, ``threads_batch``, ``batch_size``, from
    the command line) win over the team file's ``model_options``. ``context_window`` goes to
    ``openai:`` and ``anthropic:`` models as ``context_window`` and to ``llama-cpp:`` models as
    ``n_ctx``; the others go to ``llama-cpp:`` models only.

    Raises:
        ConfigError: A ``llama-cpp:`` setting is given but no agent uses a ``llama-cpp:``
            model (it would have no effect), or a ``llama-cpp:`` model's context window is
            outside 128 to 131072 tokens.
    """
    spec = loaded.spec.model_options
    values: dict[str, tuple[int, str]] = {}  # key -> (value, where it was given)
    for key in ("context_window", *LLAMA_SETTINGS):
        override = overrides.get(key)
        if override is not None:
            values[key] = (override, "--" + key.replace("_", "-"))
        elif (configured := getattr(spec, key)) is not None:
            values[key] = (configured, f"model_options.{key}")
    team = loaded.team
    agents = (*team.agents, *((team.coordinator,) if team.coordinator else ()))
    ids = sorted({default_id} | {a.model for a in agents if a.model})
    embedded = [i for i in ids if split_model_id(i)[0] == "llama-cpp"]
    if not embedded:
        for key in LLAMA_SETTINGS:
            if key in values:
                raise ConfigError(
                    "applies to llama-cpp: models only, and no agent uses one",
                    source=loaded.source,
                    field=values[key][1],
                )
    options: dict[str, dict[str, int]] = {}
    window = values.get("context_window")
    for model_id in ids:
        provider = split_model_id(model_id)[0]
        if provider in WINDOWED_PROVIDERS and window is not None:
            options[model_id] = {"context_window": window[0]}
        elif provider == "llama-cpp":
            low, high = CONTEXT_RANGE
            if window is not None and not low <= window[0] <= high:
                raise ConfigError(
                    f"must be {low} to {high} tokens for a llama-cpp: model, got {window[0]}",
                    source=loaded.source,
                    field=window[1],
                )
            settings = {"n_ctx": window[0]} if window is not None else {}
            settings |= {
                LLAMA_SETTINGS[k]: v for k, (v, _) in values.items() if k != "context_window"
            }
            if settings:
                options[model_id] = settings
    return options


def configured_models(
    options: dict[str, dict[str, int]],
) -> dict[str, ChatModel]:
    """The models that have settings, made with them (weights load lazily).

    Raises:
        ConfigError: A model cannot be made (no API key, a malformed id, a setting out of
            range...).
    """
    return {model_id: get_model(model_id, **settings) for model_id, settings in options.items()}


def team_with_model_reset(team: Team) -> Team:
    """``team`` with every agent's model (coordinator's too) left to the default model."""
    agents = tuple(dataclasses.replace(a, model=None) for a in team.agents)
    coordinator = dataclasses.replace(team.coordinator, model=None) if team.coordinator else None
    return dataclasses.replace(team, agents=agents, coordinator=coordinator)
