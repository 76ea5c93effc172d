"""Model ids to providers: ``"provider:name"`` → a `ChatModel`."""

from __future__ import annotations

import importlib.util
from typing import Any

from clearance._core.errors import ConfigError
from clearance.models._base import ChatModel, split_model_id

__all__ = ["DEFAULT_MODEL_ID", "PROVIDERS", "get_model"]

DEFAULT_MODEL_ID = "llama-cpp:smollm2"
"""The embedded model, used when nothing else is configured."""

PROVIDERS = ("llama-cpp", "openai", "anthropic", "fake")


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
    if provider == "llama-cpp":
        from clearance.models._llama_cpp import LlamaCppModel

        return LlamaCppModel(name, **options)
    if provider == "openai":
        from clearance.models._openai import OpenAIModel

        return OpenAIModel(name, **options)
    if provider == "anthropic":
        if importlib.util.find_spec("anthropic") is None:
            raise ConfigError(
                f"{model_id!r} needs the anthropic package: pip install 'clearance[anthropic]'",
                field="model",
            )
        from clearance.models._anthropic import AnthropicModel

        return AnthropicModel(name, **options)
    if provider == "fake":
        from clearance.testing._fake import FakeModel

        return FakeModel(name, **options)
    raise ConfigError(
        f"unknown model provider {provider!r} in {model_id!r} (known: {', '.join(PROVIDERS)})",
        field="model",
    )
