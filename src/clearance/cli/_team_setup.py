"""Loading a team file for a command: its graph, files and model settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clearance import ConfigError, LoadedTeam, TaskGraph
    from clearance.models import ChatModel


__all__ = ["configured_models", "load_checked", "model_error", "team_model_options"]


def load_checked(team_file: Path, input_dir: str | None) -> tuple[LoadedTeam, TaskGraph | None]:
    """Load a team file (``--input`` applied) and check it as ``clearance run`` does first.

    The checks are `checked_run`'s (the ones ``run`` and ``plan`` make), then the team file's
    ``report:`` (`report_function`, which ``run`` checks next). No model, ledger, store or
    network is needed and no user code runs: a ``tools:`` or ``python:`` module is only
    looked up, not imported, and MCP servers are not started.

    Raises:
        ConfigError: As `checked_run`, or ``report:`` names an unknown report (the message
            names the file).
    """
    from clearance import ConfigError, RunSpec
    from clearance.runs import checked_run, report_function

    spec = RunSpec.from_file(team_file)
    if input_dir is not None:
        spec = spec.model_copy(
            update={"input": spec.input.model_copy(update={"default": input_dir})}
        )
    try:
        checked = checked_run(spec, source=str(team_file))
    except ConfigError as exc:  # the folder --input gave is named as the option
        if input_dir is None or exc.field != "input.default":
            raise
        raise ConfigError(exc.message, field="--input") from exc
    try:
        report_function(spec.report)
    except ConfigError as exc:
        raise exc.with_source(str(team_file)) from exc
    return checked


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


def model_error(exc: ConfigError, team_file: Path, *, model_option: bool = False) -> ConfigError:
    """A model's error before anything ran (it cannot be made, its window has no room...).

    Said of ``--model`` when the command line gave every agent's model (``model_option``)
    and the error is that model's own (its id, key or URL), else of the team file; an error
    that names its source already is kept.
    """
    if exc.source is not None:
        return exc
    from_option = model_option and exc.field in ("model", "api_key", "base_url")
    return exc.with_source("--model" if from_option else str(team_file))
