"""The provider protocol: one request object, one async method."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from clearance._core.errors import ConfigError, ModelError
from clearance._core.prompt import Prompt, canonical_json, sha256_text
from clearance.tokens import heuristic_tokens

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "MAX_REPORTED_TOKENS",
    "RESPONSE_CHARS_PER_TOKEN",
    "arguments_size",
    "check_response_size",
    "ChatModel",
    "ModelRequest",
    "ModelResponse",
    "TextSink",
    "ToolCall",
    "Usage",
    "checked_arguments",
    "decoded_arguments",
    "framing_tokens",
    "estimate_tokens",
    "kind_of",
    "max_response_chars",
    "nested_deeper_than",
    "split_model_id",
    "validated_usage",
]

MAX_REPORTED_TOKENS = 10**9
"""Most tokens one model call may report for its prompt or its completion; a larger count is
not a real call's usage but a broken or hostile server's."""

RESPONSE_CHARS_PER_TOKEN = 32
"""Most characters one generated token may stand for, in `max_response_chars`: far above any
real tokenizer's (about 4 for English text; a long run of spaces or dashes can be one token)."""

MAX_ARGUMENT_DEPTH = 64
"""Most levels of nesting (objects and lists) a tool call's arguments may have; deeper
arguments are not run but answered with a tool error (`checked_arguments`). No tool takes
arguments this deep, and decoding or encoding them again could exhaust the stack."""


def max_response_chars(max_tokens: int) -> int:
    """Most characters an answer to a request for at most ``max_tokens`` tokens may hold.

    The completion text plus every tool call's name and arguments (as JSON text):
    ``RESPONSE_CHARS_PER_TOKEN * max_tokens + 65536``. An answer over it is not an honest
    server's (a server ignoring ``max_tokens``, or sending megabytes of text): providers and
    `ModelCaller` refuse it with a `ModelError` naming the cap, before it is recorded or
    becomes a task's result.

    Args:
        max_tokens: The request's ``max_tokens`` (tokens).

    Returns:
        The cap, in characters (Unicode code points).
    """
    return RESPONSE_CHARS_PER_TOKEN * max_tokens + 65_536


def check_response_size(
    size: int, max_tokens: int, *, model_id: str, who: str = "the server's answer"
) -> None:
    """Refuse an answer of ``size`` characters over `max_response_chars` (``max_tokens``).

    Raises:
        ModelError: Naming the size, the cap and ``max_tokens``.
    """
    cap = max_response_chars(max_tokens)
    if size > cap:
        raise ModelError(
            f"{who} holds {size:,} characters, over the cap of {cap:,} for "
            f"max_tokens={max_tokens} (max_response_chars): refused",
            model_id=model_id,
        )


def kind_of(value: object) -> str:
    """The JSON kind of ``value`` for an error message: ``"an int"``, ``"null"``, ``"a list"``..."""
    if value is None:
        return "null"
    name = type(value).__name__
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def nested_deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` (dicts and lists, at any depth) nests more than ``limit`` levels.

    Walks iteratively, so a value nested far deeper than the interpreter's recursion limit
    is measured without exhausting the stack.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def checked_arguments(value: object, *, raw: str | None = None) -> dict[str, Any]:
    """A tool call's arguments as a provider may hand them on, or ``{"_raw": ...}``.

    Arguments a tool cannot take (not an object, nested deeper than `MAX_ARGUMENT_DEPTH`)
    become ``{"_raw": <what was sent>}``: the call is answered with a tool error for the
    model (no tool takes a ``_raw`` argument), not raised.

    Args:
        value: The decoded arguments (``None``: none were given, ``{}``).
        raw: The JSON text they were decoded from, if any; kept as ``_raw`` when they are
            refused (else a short description of what was sent).

    Returns:
        ``value`` when it is an object nested at most `MAX_ARGUMENT_DEPTH` levels, else
        ``{"_raw": text}``.
    """
    if value is None:
        return {}
    if isinstance(value, dict) and not nested_deeper_than(value, MAX_ARGUMENT_DEPTH):
        return value
    if raw is not None:
        return {"_raw": raw}
    if isinstance(value, dict):
        return {"_raw": f"(arguments nested deeper than {MAX_ARGUMENT_DEPTH} levels)"}
    if isinstance(value, str | int | float | bool):
        return {"_raw": value}
    return {"_raw": f"(arguments that are {kind_of(value)}, not an object)"}


def decoded_arguments(text: object) -> dict[str, Any]:
    """A tool call's arguments from the JSON text a server sent, checked (`checked_arguments`).

    ``None`` or ``""`` is no arguments (``{}``); text that is not JSON, nests too deep for
    the decoder, or is not an object becomes ``{"_raw": text}``. A server that sends the
    arguments as an object instead of text has them checked as they are.
    """
    if text is None or text == "":
        return {}
    if not isinstance(text, str):
        return checked_arguments(text)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        return {"_raw": text}
    return checked_arguments(value, raw=text)


def arguments_size(raw: object) -> int:
    """Characters of a tool call's arguments as sent: their text, or an object's JSON (or repr)."""
    if raw is None or isinstance(raw, str):
        return len(raw or "")
    try:
        return len(json.dumps(raw, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError):
        return len(repr(raw))


def split_model_id(model_id: str) -> tuple[str, str]:
    """Split ``"provider:name"`` into ``("provider", "name")``.

    Raises:
        ConfigError: If the id has no provider or no name.
    """
    provider, sep, name = model_id.partition(":")
    if not sep or not provider or not name:
        raise ConfigError(
            f"model id {model_id!r} must look like 'provider:name' "
            "(for example 'llama-cpp:smollm2' or 'openai:gpt-4o-mini')",
            field="model",
        )
    return provider, name


def estimate_tokens(text: str) -> int:
    """Rough token count for models without a tokenizer: one token per 4 UTF-8 bytes.

    Kept for compatibility: the same as `clearance.tokens.heuristic_tokens`, where token
    counting lives. Used only when a provider has no tokenizer of its own.
    """
    return heuristic_tokens(text)


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Token usage of one or more model calls.

    Attributes:
        requests: Number of model calls.
        prompt_tokens: Tokens sent.
        completion_tokens: Tokens generated.
        cached_prompt_tokens: Of ``prompt_tokens``, those the server reused from its prompt
            cache instead of evaluating them again; ``None`` when no call reported it (not
            0: "not reported" and "no reuse" are different facts). In a sum, the total over
            the calls that reported it.
        counted: True when the server reported no usage and Clearance counted the prompt
            and completion tokens itself (`clearance.tokens`, the model's counter), so limits
            never see 0 for a call that sent and generated text. In a sum: true when any
            call's tokens were counted.
    """

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int | None = None
    counted: bool = False

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            requests=self.requests + other.requests,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_prompt_tokens=_sum_known(self.cached_prompt_tokens, other.cached_prompt_tokens),
            counted=self.counted or other.counted,
        )

    def to_dict(self) -> dict[str, int | None]:
        """JSON-ready form (``cached_prompt_tokens`` is ``None`` when not reported).

        ``"counted": 1`` is added when the tokens were counted, not reported.
        """
        out: dict[str, int | None] = {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
        }
        if self.counted:
            out["counted"] = 1
        return out


def _sum_known(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else a + b


def validated_usage(
    prompt_tokens: object,
    completion_tokens: object,
    *,
    model_id: str,
    cached_prompt_tokens: object = None,
) -> Usage:
    """The `Usage` of one call from the token counts a provider reported, checked.

    Counts come from outside (a model server, a native library) and are validated at the
    provider boundary, so nothing downstream (run totals, budgets, the ledger) sees them.

    Args:
        prompt_tokens: The reported prompt tokens; ``None`` (not reported) counts as 0.
        completion_tokens: The reported completion tokens; ``None`` counts as 0.
        model_id: The ``"provider:name"`` id, for the error.
        cached_prompt_tokens: The reported prompt tokens the server reused from its prompt
            cache; ``None`` (not reported) stays ``None``.

    Returns:
        ``Usage(requests=1, ...)`` with the counts.

    Raises:
        ModelError: A count is not an integer (booleans, floats and strings included), is
            negative, or is over `MAX_REPORTED_TOKENS`, or more prompt tokens are cached
            than were sent; not transient (a retry would get the same answer from the same
            server).
    """
    counts: dict[str, int] = {}
    for name, value in (("prompt_tokens", prompt_tokens), ("completion_tokens", completion_tokens)):
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(
                f"the provider reported {name} as {type(value).__name__} {_short(value)}, "
                "not an integer",
                model_id=model_id,
            )
        if not 0 <= value <= MAX_REPORTED_TOKENS:
            raise ModelError(
                f"the provider reported {name}={_short(value)}, outside 0..{MAX_REPORTED_TOKENS}",
                model_id=model_id,
            )
        counts[name] = value
    cached = cached_prompt_tokens
    if cached is not None:
        if isinstance(cached, bool) or not isinstance(cached, int):
            raise ModelError(
                f"the provider reported cached_prompt_tokens as {type(cached).__name__} "
                f"{_short(cached)}, not an integer",
                model_id=model_id,
            )
        if not 0 <= cached <= counts["prompt_tokens"]:
            raise ModelError(
                f"the provider reported cached_prompt_tokens={_short(cached)}, outside "
                f"0..{counts['prompt_tokens']} (the prompt tokens it reported)",
                model_id=model_id,
            )
    return Usage(
        requests=1,
        prompt_tokens=counts["prompt_tokens"],
        completion_tokens=counts["completion_tokens"],
        cached_prompt_tokens=cached,
    )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


TextSink = Callable[[str], None]
"""Receives the pieces of a completion's text as a streaming provider gets them."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """Everything a provider needs for one call. Built from a `Prompt`, never from raw text.

    Attributes:
        prompt: The prompt from the `ContextBuilder`; providers send ``prompt.messages``.
        max_tokens: Most tokens to generate.
        temperature: Sampling temperature; 0 asks for the most likely tokens.
        json_schema: When set, ask the provider for a JSON object matching this schema
            (providers without structured output ignore it; callers validate anyway).
        seed: Sampling seed where the provider supports one.
        tools: Tools the model may call, in the OpenAI function-calling format
            (``{"type": "function", "function": {"name", "description", "parameters"}}``);
            empty for none. Providers answer with `ModelResponse.tool_calls`.
        timeout_s: Wall-clock seconds the whole call may take (connecting, waiting, reading
            every byte of the answer), or ``None`` for the provider's own default. A provider
            that cannot finish in time raises a transient `ModelError`; the deadline holds
            even against a server that trickles its answer a byte at a time. Infinity
            means no deadline of the request's own.
        top_p: Nucleus sampling mass, or ``None`` for the provider's default.
        repeat_penalty: Penalty on repeated tokens (1: none), or ``None`` for the
            provider's default.
        stop: Strings that end generation; empty for the provider's default.
        stream: When set, stream: the provider calls it with each piece of completion text
            as it arrives (untrusted text, in order), and still returns the whole
            `ModelResponse`, exactly as without streaming. ``None`` (the default) asks for
            the answer in one piece. Providers that cannot stream ignore it. It must not
            block: it runs on the event loop while the answer is being read.
    """

    prompt: Prompt
    max_tokens: int = 512
    temperature: float = 0.0
    json_schema: dict[str, Any] | None = None
    seed: int | None = 0
    tools: tuple[dict[str, Any], ...] = ()
    timeout_s: float | None = None
    top_p: float | None = None
    repeat_penalty: float | None = None
    stop: tuple[str, ...] = ()
    stream: TextSink | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not self.timeout_s > 0:  # NaN too
            raise ConfigError(
                f"must be a positive number of seconds, got {self.timeout_s}", field="timeout_s"
            )

    def parameters(self) -> dict[str, Any]:
        """What the model is asked besides the prompt, JSON-ready (the ledger records it).

        Returns:
            ``{"max_tokens", "temperature", "top_p", "seed", "stop", "repeat_penalty",
            "tools", "json_schema"}``: the sampling settings as sent (``None`` for a
            provider default), ``tools`` as ``[{"name", "sha256"}]`` (the SHA-256 of each
            tool's canonical JSON, in the order offered), ``json_schema`` whole (``None``
            for free text). The deadline and the stream say how the call is made, not what
            is asked, and are left out.
        """
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "stop": list(self.stop),
            "repeat_penalty": self.repeat_penalty,
            "tools": [
                {"name": _tool_name(tool), "sha256": sha256_text(canonical_json(tool))}
                for tool in self.tools
            ],
            "json_schema": self.json_schema,
        }


def _tool_name(tool: dict[str, Any]) -> str:
    """The name of a tool in the OpenAI function-calling format (``""`` when it has none)."""
    function = tool.get("function")
    name = function.get("name") if isinstance(function, dict) else tool.get("name")
    return name if isinstance(name, str) else ""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One tool call asked for by a model.

    Attributes:
        id: The call's id (the provider's, or one Clearance made up).
        name: The tool's name.
        arguments: The arguments, decoded from JSON (``{}`` when none were given).
    """

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelResponse:
    """What a provider returned.

    Attributes:
        text: The completion text.
        usage: Tokens of this call (``requests`` is 1).
        model_id: The ``"provider:name"`` id that answered.
        finish_reason: Why generation stopped (``"stop"``, ``"length"``...), if known.
        tool_calls: Tools the model asked to call, in order; empty for a final answer.
    """

    text: str
    usage: Usage
    model_id: str
    finish_reason: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@runtime_checkable
class ChatModel(Protocol):
    """A chat model provider.

    Attributes:
        model_id: ``"provider:name"``.
        context_window: Tokens the model can attend to (prompt plus completion), or ``None``
            when unknown.

    A provider may also have ``prompt_framing_tokens`` (optional, read by `framing_tokens`):
    the tokens its chat template adds around a prompt's system and user messages (turn
    markers and the opening of the answer), which ``count_tokens`` of the messages' text does
    not see. A prompt budget taken from the context window leaves room for them.
    """

    model_id: str
    context_window: int | None

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Run one chat completion.

        Raises:
            ModelError: The provider failed or returned nothing usable.
        """
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes for this model (its own tokenizer where it has one)."""
        ...


MAX_FRAMING_TOKENS = 1_000_000
"""The most tokens `framing_tokens` accepts from a provider (a template adds tens)."""


def framing_tokens(model: ChatModel) -> int:
    """The tokens ``model``'s chat template adds around a prompt; 0 when it declares none.

    Read from the provider's optional ``prompt_framing_tokens`` (see `ChatModel`), which may
    load the model (the embedded one counts its template with its own tokenizer).

    Raises:
        ConfigError: The provider's value is not a whole number from 0 to
            `MAX_FRAMING_TOKENS`.
    """
    value = getattr(model, "prompt_framing_tokens", 0)
    if value.__class__ is not int or not 0 <= value <= MAX_FRAMING_TOKENS:
        raise ConfigError(
            f"{model.model_id}: prompt_framing_tokens must be a whole number of tokens from 0 "
            f"to {MAX_FRAMING_TOKENS:,}, got {_short(value)}",
            field="prompt_framing_tokens",
        )
    return int(value)
