"""Model ids to providers: ``"provider:name"`` → a `ChatModel`.

Providers are named in one table by where their class lives (``"module:Class"``) and imported
only when a model of that provider is asked for, the way a plugin entry point is. The table
names classes, it does not import them: the ``fake`` provider lives in `clearance.testing`,
a layer above this one, and this module never imports it.

Providers beyond the built-ins come from installed packages, through the entry-point group
``clearance.models`` (`ENTRY_POINT_GROUP`): an entry point's name is the provider name and its
object is a `ChatModel` class (or any callable) taking ``(name, **options)``. A package
declares one in its ``pyproject.toml``::

    [project.entry-points."clearance.models"]
    myprov = "myprov_clearance:MyProvModel"

and ``--model myprov:some-model`` (or ``model: myprov:some-model`` in a team file) reaches
``MyProvModel("some-model")``. Only installed distributions are consulted, never a module
named in the model id, and a built-in provider's name cannot be taken over.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
from typing import Any, cast

from clearance._core.errors import ConfigError
from clearance.models._base import ChatModel, split_model_id

__all__ = ["DEFAULT_MODEL_ID", "ENTRY_POINT_GROUP", "PROVIDERS", "get_model", "installed_providers"]

DEFAULT_MODEL_ID = "llama-cpp:smollm2"
"""The embedded model, used when nothing else is configured."""

_PROVIDER_CLASSES: dict[str, str] = {
    "llama-cpp": "clearance.models._llama_cpp:LlamaCppModel",
    "openai": "clearance.models._openai:OpenAIModel",
    "anthropic": "clearance.models._anthropic:AnthropicModel",
    "fake": "clearance.testing._fake:FakeModel",
}
"""Provider name → ``"module:Class"`` of its `ChatModel`, imported on first use."""

_EXTRA_PACKAGES: dict[str, str] = {"anthropic": "anthropic"}
"""Provider name → the optional package (and ``pip`` extra) it needs."""

PROVIDERS = tuple(_PROVIDER_CLASSES)
"""The built-in provider names (installed packages may add more: `installed_providers`)."""

ENTRY_POINT_GROUP = "clearance.models"
"""The entry-point group through which installed packages add model providers."""


def installed_providers() -> dict[str, importlib.metadata.EntryPoint]:
    """The providers installed packages add: name → entry point (not loaded).

    A name the built-ins already hold is left out (the built-in wins).
    """
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name: ep for ep in found if ep.name not in _PROVIDER_CLASSES}


def get_model(model_id: str, **options: Any) -> ChatModel:
    """Create the model named by ``model_id``.

    Args:
        model_id: ``"llama-cpp:smollm2"`` (embedded, in-process) or ``"openai:<model>"``
            (any OpenAI-compatible server; base URL and key from ``options`` or the
            ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` environment variables), or
            ``"anthropic:<model>"`` (the Anthropic Messages API through the ``anthropic`` SDK,
            an optional extra; base URL and key from ``options`` or ``ANTHROPIC_BASE_URL`` /
            ``ANTHROPIC_API_KEY``), or
            ``"fake:<name>"`` (`clearance.testing.FakeModel`, a deterministic test double
            that answers with digests of the prompt; for tests only), or
            ``"<provider>:<name>"`` of a provider an installed package registers in the
            ``clearance.models`` entry-point group.
        **options: Passed to the provider's constructor.

    Raises:
        ConfigError: The id is malformed or names an unknown provider or model, the
            provider's optional package is not installed, ``options`` names a setting a
            built-in provider does not take, or an installed provider's entry point cannot be
            loaded or does not give a `ChatModel`, or is given a ``context_window`` its
            model does not keep (it would have no effect).
    """
    provider, name = split_model_id(model_id)
    target = _PROVIDER_CLASSES.get(provider)
    if target is None:
        installed = installed_providers()
        if provider in installed:
            return _from_entry_point(installed[provider], model_id, name, options)
        known = ", ".join([*PROVIDERS, *sorted(installed)])
        raise ConfigError(
            f"unknown model provider {provider!r} in {model_id!r} (known: {known}; packages "
            f"add providers through the {ENTRY_POINT_GROUP!r} entry-point group)",
            field="model",
        )
    extra = _EXTRA_PACKAGES.get(provider)
    if extra is not None and importlib.util.find_spec(extra) is None:
        raise ConfigError(
            f"{model_id!r} needs the {extra} package: pip install 'clearance[{extra}]'",
            field="model",
        )
    module_name, _, class_name = target.partition(":")
    model_class = getattr(importlib.import_module(module_name), class_name)
    _check_settings(model_id, model_class, options)
    return cast("ChatModel", model_class(name, **options))


def _check_settings(model_id: str, model_class: Any, options: dict[str, Any]) -> None:
    """Refuse a setting a built-in provider does not take, before its constructor sees it.

    ``model_options.by_model: {llama-cpp:smollm2: {context_window: 4096}}`` reached
    ``LlamaCppModel(context_window=...)`` and stopped the command with a ``TypeError`` and a
    traceback.

    Raises:
        ConfigError: ``options`` names a keyword the constructor has no parameter for (the
            message lists the ones it has).
    """
    parameters = list(inspect.signature(model_class).parameters.values())[1:]  # after `name`
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    taken = [p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = sorted(set(options) - set(taken))
    if unknown:
        raise ConfigError(
            f"{model_id!r} takes no setting {unknown[0]!r} (its settings: {', '.join(taken)})",
            field="model",
        )


def _from_entry_point(
    entry: importlib.metadata.EntryPoint, model_id: str, name: str, options: dict[str, Any]
) -> ChatModel:
    where = f"{entry.value} (entry point {entry.name!r} of {ENTRY_POINT_GROUP!r})"
    try:
        factory = entry.load()
    except Exception as exc:  # a third-party package: any import failure is its own
        raise ConfigError(
            f"cannot load model provider {where}: {type(exc).__name__}: {exc}", field="model"
        ) from exc
    try:
        model = factory(name, **options)
    except ConfigError:
        raise
    except Exception as exc:  # the provider's own constructor refused the name or options
        raise ConfigError(
            f"{where} cannot create {model_id!r}: {type(exc).__name__}: {exc}", field="model"
        ) from exc
    if not isinstance(model, ChatModel):
        raise ConfigError(
            f"{where} gave {type(model).__name__} for {model_id!r}, not a ChatModel "
            "(an async request(ModelRequest) -> ModelResponse, model_id, context_window)",
            field="model",
        )
    given = options.get("context_window")
    if given is not None and model.context_window != given:  # taken by **options, unused
        raise ConfigError(
            f"has no effect: {model_id!r} was given a context_window of {given} and keeps "
            f"its own ({model.context_window}); its provider {where} does not take one",
            field="context_window",
        )
    return model
