"""Prompt-cache reuse as each kind of server reports it: the cached prompt tokens of one call.

A server that keeps the key/value state of a prompt prefix evaluates only the rest of the next
prompt that shares it. How many prompt tokens were reused is reported differently by each:

- OpenAI-compatible servers: ``usage.prompt_tokens_details.cached_tokens``
  (https://platform.openai.com/docs/guides/prompt-caching).
- llama.cpp's ``llama-server``: the same field in recent versions, and ``timings.cache_n``
  (prompt tokens taken from the cache) in the response body. llama-cpp-python's
  ``llama_cpp.server`` (0.3.x) reports neither: its calls record none.
- Anthropic's Messages API: ``usage.cache_read_input_tokens``, where ``input_tokens`` counts
  only the tokens after the last cache breakpoint, so the prompt is
  ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens``
  (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
- The embedded llama.cpp model: computed from the prefix of its evaluated tokens that the next
  prompt shares (llama-cpp-python reuses that prefix and evaluates the rest).

Everything here returns what the server said, unchecked; `validated_usage` checks it
(an integer within ``0..prompt_tokens``, else a `ModelError`). ``None`` means "not reported",
never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["anthropic_prompt_tokens", "field_of", "reported_cached_tokens", "reused_prefix"]


def field_of(obj: Any, name: str) -> Any:
    """``obj[name]`` of a decoded JSON object, else ``obj.name``; ``None`` when absent.

    SDK objects keep unknown fields as attributes or dicts, and a body read by a provider
    itself is a dict.
    """
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def reported_cached_tokens(completion: Any) -> object:
    """The cached prompt tokens an OpenAI-compatible chat completion reports, unchecked.

    Args:
        completion: The SDK's ``ChatCompletion`` (or its JSON as a dict).

    Returns:
        ``usage.prompt_tokens_details.cached_tokens`` if present, else llama-server's
        ``timings.cache_n``, else ``None`` (not reported). Whatever the server sent: the
        caller validates it.
    """
    details = field_of(field_of(completion, "usage"), "prompt_tokens_details")
    cached = field_of(details, "cached_tokens")
    if cached is not None:
        return cached
    return field_of(field_of(completion, "timings"), "cache_n")


def anthropic_prompt_tokens(usage: Any) -> tuple[object, object]:
    """``(prompt_tokens, cached_prompt_tokens)`` from an Anthropic message's usage, unchecked.

    The prompt is ``input_tokens`` plus both cache counts when those are integers; a count
    that is not an integer is returned as it came, so validation names it.

    Args:
        usage: The message's ``usage`` (``None`` if absent).

    Returns:
        ``(prompt tokens, cache_read_input_tokens)``; either may be ``None`` (not reported)
        or, from a broken server, not an integer.
    """
    prompt = field_of(usage, "input_tokens")
    read = field_of(usage, "cache_read_input_tokens")
    written = field_of(usage, "cache_creation_input_tokens")
    for extra in (read, written):
        if extra is None:
            continue
        if not _is_count(extra):
            return extra, None  # reported as the prompt count: refused there, by name
        if _is_count(prompt):
            prompt = prompt + extra
    return prompt, read


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def reused_prefix(before: Sequence[int], after: Sequence[int], prompt_tokens: int) -> int | None:
    """Prompt tokens the embedded model reused: the prefix its state shared with the prompt.

    llama-cpp-python keeps the tokens it evaluated last; a new prompt's longest common prefix
    with them is kept in the key/value cache and only the rest is evaluated (all but the
    last token when the whole prompt is shared, so that its logits are fresh).

    Args:
        before: The tokens evaluated before the call (``input_ids[:n_tokens]``).
        after: The tokens evaluated after it, which start with the prompt.
        prompt_tokens: The prompt's length in tokens (as the model reported it).

    Returns:
        The reused tokens, in ``0..prompt_tokens``; ``None`` if ``after`` does not hold the
        whole prompt (then nothing is known).
    """
    if prompt_tokens < 0 or len(after) < prompt_tokens:
        return None
    shared = 0
    for a, b in zip(before, after[:prompt_tokens], strict=False):
        if a != b:
            break
        shared += 1
    return shared - 1 if shared == prompt_tokens and shared > 0 else shared
