"""Model ids to providers: ``"provider:name"`` → a `ChatModel`.

Providers are named in one table by where their class lives (``"module:Class"``) and imported
only when a model of that provider is asked for, the way a plugin entry point is. The table
names classes, it does not import them: the ``fake`` provider lives in `clearance.testing`,
a layer above this one, and this module never imports it.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, cast

from clearance._core.errors import ConfigError
from clearance.models._base import ChatModel, split_model_id

__all__ = ["DEFAULT_MODEL_ID", "PROVIDERS", "get_model"]

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
"""The provider names a model id may start with."""


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
            that answers with digests of the prompt; for tests only).
        **options: Passed to the provider's constructor.

    Raises:
        ConfigError: The id is malformed or names an unknown provider or model, or the
            provider's optional package is not installed.
    """
    provider, name = split_model_id(model_id)
    target = _PROVIDER_CLASSES.get(provider)
    if target is None:
        raise ConfigError(
            f"unknown model provider {provider!r} in {model_id!r} (known: {', '.join(PROVIDERS)})",
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
    return cast("ChatModel", model_class(name, **options))
