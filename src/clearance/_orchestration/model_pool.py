"""`ModelPool`: each agent's model, made once per model id and answered where the run says."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from clearance._core.errors import ConfigError
from clearance._core.spec import Agent
from clearance._orchestration.executor import ModelExecutor
from clearance._orchestration.run_config import checked_model_options
from clearance.models._base import ChatModel, split_model_id
from clearance.models._registry import PROVIDERS, get_model

__all__ = ["ModelPool"]


class ModelPool:
    """The models of an orchestrator's agents.

    A model id is made into a model once (with its ``model_options``) and reused by every
    agent that names it; an agent without a model uses the default. With an executor, the
    model returned is the executor's stand-in for it (see `ModelExecutor.model`).

    Args:
        default: Model id or instance for agents whose ``model`` is ``None``.
        models: Model instances by id, used instead of making models from their ids.
        options: Settings models are made with, by model id (validated with
            `checked_model_options`).
        executor: Where model calls are answered; ``None`` in this process.

    Raises:
        ConfigError: ``options`` has an unknown setting or a value that is not an integer.
    """

    def __init__(
        self,
        default: str | ChatModel,
        *,
        models: Mapping[str, ChatModel] | None = None,
        options: Mapping[str, Mapping[str, int]] | None = None,
        executor: ModelExecutor | None = None,
    ) -> None:
        self.default = default
        self.options = checked_model_options(options or {})
        self.executor = executor
        self._models: dict[str, ChatModel] = dict(models or {})

    @property
    def default_id(self) -> str:
        """The default model's id."""
        return self.default if isinstance(self.default, str) else self.default.model_id

    def for_agent(self, agent: Agent) -> ChatModel:
        """The model ``agent`` calls, made on first use.

        Raises:
            ConfigError: The model id names an unknown provider or bad settings.
        """
        key = agent.model
        if key is None:
            if not isinstance(self.default, str):
                return self._answered(self.default.model_id, self.default)
            key = self.default
        if key not in self._models:
            self._models[key] = get_model(key, **self.options.get(key, {}))
        return self._answered(key, self._models[key])

    def context_window(self, agent: Agent) -> int | None:
        """The context window (tokens) of the model ``agent`` calls; ``None`` when unknown.

        A built-in provider's window given in its settings (``context_window``; ``n_ctx``
        for ``llama-cpp:``) is the model's, and is answered without making the model, so a
        served model needs no API key for it; otherwise the model is made (`for_agent`),
        which refuses a window an installed provider's model would not keep.

        Raises:
            ConfigError: As `for_agent`.
        """
        key = agent.model or self.default
        if isinstance(key, str) and key not in self._models and split_model_id(key)[0] in PROVIDERS:
            settings = self.options.get(key, {})
            given = settings.get("context_window", settings.get("n_ctx"))
            if given is not None:
                return given
        return self.for_agent(agent).context_window

    def resolve(self, agents: Iterable[Agent]) -> None:
        """Make every agent's model now, so a bad model id fails before a run starts.

        Raises:
            ConfigError: A model id names an unknown provider or bad settings, or a model's
                context window leaves an agent without ``max_prompt_tokens`` no room for a
                prompt next to its ``max_output_tokens`` (its every call would be refused).
        """
        for agent in agents:
            model = self.for_agent(agent)
            if model.context_window is not None and agent.limits.max_prompt_tokens is None:
                check_room_for_prompt(agent, model.context_window, field="context_window")

    def _answered(self, key: str, model: ChatModel) -> ChatModel:
        """``model`` as the executor answers it (itself without an executor)."""
        if self.executor is None:
            return model
        return self.executor.model(key, model, self.options.get(key, {}))


def check_room_for_prompt(agent: Agent, window: int, *, field: str) -> int:
    """The agent's ``max_output_tokens``, checked to leave room for a prompt in ``window``.

    Raises:
        ConfigError: The window (tokens) is not larger than ``max_output_tokens``; ``field``
            names the setting that gave it.
    """
    reserved = agent.limits.max_output_tokens
    if window <= reserved:
        raise ConfigError(
            f"a context window of {window} tokens leaves no room for a prompt next to the "
            f"max_output_tokens ({reserved}) of agent {agent.name!r}",
            field=field,
        )
    return reserved
