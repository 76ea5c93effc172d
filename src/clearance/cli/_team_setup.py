"""Loading a team file for a command: its graph, files and model settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clearance import LoadedTeam, TaskGraph
    from clearance.models import ChatModel


__all__ = ["configured_models", "load_checked", "team_model_options"]


def load_checked(team_file: Path, input_dir: str | None) -> tuple[LoadedTeam, TaskGraph | None]:
    """Load a team file (``--input`` applied) and check its graph and task files."""
    from clearance import RunSpec
    from clearance.runs import checked_run

    spec = RunSpec.from_file(team_file)
    if input_dir is not None:
        spec = spec.model_copy(
            update={"input": spec.input.model_copy(update={"default": input_dir})}
        )
    return checked_run(spec, source=str(team_file))


def team_model_options(
    loaded: LoadedTeam, default_id: str, **overrides: int | None
) -> dict[str, dict[str, int]]:
    """The `get_model` settings of the team's models with ``default_id`` as default model.

    ``overrides`` (``context_window``, ``threads``, ``threads_batch``, ``batch_size``, as
    the command line gives them) win over the team file's ``model_options``; see
    `model_settings`.

    Raises:
        ConfigError: As `model_settings`, naming the option a bad value was given with.
    """
    from clearance.runs import model_settings

    given = {k: v for k, v in overrides.items() if v is not None}
    spec = loaded.spec.model_copy(
        update={
            "model": default_id,
            "model_options": loaded.spec.model_options.model_copy(update=given),
        }
    )
    return model_settings(spec, given_as={k: "--" + k.replace("_", "-") for k in given})


def configured_models(options: dict[str, dict[str, int]]) -> dict[str, ChatModel]:
    """The models that have settings, made with them (weights load lazily).

    Raises:
        ConfigError: A model cannot be made (no API key, a malformed id, a setting out of
            range...).
    """
    from clearance.models import get_model

    return {model_id: get_model(model_id, **settings) for model_id, settings in options.items()}
