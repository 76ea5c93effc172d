import pytest

from clearance import ConfigError
from clearance.models._openai import OpenAIModel
from clearance.tokens import (
    count_tokens,
    counter_for,
    encoding_for_model,
    heuristic_tokens,
    is_exact,
    tiktoken_counter,
)

TEXT = (
    "Clearance keeps every memory private.\n<|endoftext|> naïve café 東京 ~~~~ def f(x): return x"
)


@pytest.mark.parametrize(
    ("model_id", "encoding"),
    [
        ("openai:gpt-4o", "o200k_base"),
        ("openai:gpt-4o-mini", "o200k_base"),
        ("openai:gpt-4.1-nano", "o200k_base"),
        ("openai:o3-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("openai:gpt-4", "cl100k_base"),
        ("openai:gpt-3.5-turbo", "cl100k_base"),
        ("openai:text-embedding-3-small", "cl100k_base"),
        ("openai:smollm2", None),
        ("llama-cpp:smollm2", None),
        ("anthropic:claude", None),
    ],
)
def test_encoding_follows_the_model_family(model_id, encoding):
    assert encoding_for_model(model_id) == encoding
    assert is_exact(model_id) is (encoding is not None)


def test_counts_match_tiktoken_exactly_offline():
    import tiktoken

    # Known token ids, independent of our loader: "hello world" is [15339, 1917] in cl100k_base.
    assert count_tokens("hello world", "openai:gpt-4") == 2
    for model_id in ("openai:gpt-4o-mini", "openai:gpt-4"):
        counter = counter_for(model_id)
        enc = tiktoken.get_encoding(encoding_for_model(model_id))  # from the cache we filled
        assert counter(TEXT) == len(enc.encode(TEXT, disallowed_special=()))
    cl = tiktoken_counter("cl100k_base")
    o2 = tiktoken_counter("o200k_base")
    assert cl("") == 0
    assert cl(TEXT) != o2(TEXT)  # the two encodings really differ


def test_openai_provider_counts_with_tiktoken():
    model = OpenAIModel("gpt-4o-mini", base_url="http://127.0.0.1:9/v1")
    assert model.count_tokens(TEXT) == counter_for("openai:gpt-4o")(TEXT)
    local = OpenAIModel("smollm2", base_url="http://127.0.0.1:9/v1")
    assert local.count_tokens(TEXT) == heuristic_tokens(TEXT)


def test_heuristic_only_for_unknown_models():
    assert counter_for("mystery:model") is heuristic_tokens
    assert heuristic_tokens("abcd") == 1
    assert heuristic_tokens("abcde") == 2
    assert heuristic_tokens("é") == 1
    with pytest.raises(ConfigError, match="own tokenizer"):
        counter_for("llama-cpp:smollm2")
    with pytest.raises(ConfigError):
        tiktoken_counter("p50k_base")


def test_a_model_object_counts_with_its_own_tokenizer():
    class Model:
        def count_tokens(self, text: str) -> int:
            return 42

    assert count_tokens("x", Model()) == 42


@pytest.mark.embedded
def test_embedded_model_counts_with_the_llama_cpp_tokenizer():
    from clearance.models._llama_cpp import LlamaCppModel

    model = LlamaCppModel(n_ctx=512)
    try:
        llm = model._ensure_loaded()
        expected = len(llm.tokenize(TEXT.encode(), add_bos=False, special=False))
        assert count_tokens(TEXT, model) == expected
        assert expected != heuristic_tokens(TEXT)
    finally:
        model.close()
