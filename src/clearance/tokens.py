"""Token counting in one place: the model's own tokenizer, tiktoken, or a stated heuristic.

`count_tokens` counts a text for a model (a `ChatModel` with its own tokenizer, or a model
id); `counter_for` returns the function it uses; `is_exact` says whether an id gets an exact
count or the heuristic (`heuristic_tokens`, one token per 4 UTF-8 bytes, rounded up).
"""

from clearance._core.tokens import (
    TIKTOKEN_ENCODINGS,
    TokenCounter,
    Tokenized,
    count_tokens,
    counter_for,
    encoding_for_model,
    heuristic_tokens,
    is_exact,
    tiktoken_counter,
)

__all__ = [
    "TIKTOKEN_ENCODINGS",
    "TokenCounter",
    "Tokenized",
    "count_tokens",
    "counter_for",
    "encoding_for_model",
    "heuristic_tokens",
    "is_exact",
    "tiktoken_counter",
]
