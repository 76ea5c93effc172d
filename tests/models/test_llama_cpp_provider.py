"""`LlamaCppModel` with the real embedded SmolLM2-135M-Instruct model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from clearance._core.errors import ConfigError, ModelError
from clearance.models import ChatModel, ModelRequest, get_model
from clearance.models._llama_cpp import LlamaCppModel, smollm2_path

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (pip install 'clearance[local]')"
)

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def model() -> Iterator[LlamaCppModel]:
    m = LlamaCppModel(n_ctx=2048, n_threads=2)
    yield m
    m.close()


def test_is_the_embedded_chat_model(model: LlamaCppModel) -> None:
    assert isinstance(model, ChatModel)
    assert model.model_id == "llama-cpp:smollm2"
    assert model.context_window == 2048
    assert model.model_path == smollm2_path()
    assert model.model_path.endswith(".gguf")


def test_registry_default_builds_this_provider() -> None:
    m = get_model("llama-cpp:smollm2", n_ctx=512)
    assert isinstance(m, LlamaCppModel)
    assert m.context_window == 512


@pytest.mark.parametrize(
    "text",
    ["hello world", "Need-to-know context: ~~~~ fences ~~~~", "naïve café 東京 🚀", "a\n\nb\tc"],
)
def test_count_tokens_uses_the_model_tokenizer(model: LlamaCppModel, text: str) -> None:
    n = model.count_tokens(text)
    llm = model._ensure_loaded()
    assert n == len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))
    assert n > 0


def test_count_tokens_of_empty_text_is_zero(model: LlamaCppModel) -> None:
    assert model.count_tokens("") == 0


async def test_request_returns_text_and_usage(model: LlamaCppModel, make_prompt) -> None:
    prompt = make_prompt(model.count_tokens)
    assert prompt.manifest.origins == ("instructions", "task:answer", "task_result:facts")

    response = await model.request(ModelRequest(prompt=prompt, max_tokens=32))

    assert response.text.strip()
    assert response.model_id == "llama-cpp:smollm2"
    assert response.usage.requests == 1
    # The chat template adds role markers, so the model sees more than the manifest counts.
    assert response.usage.prompt_tokens >= prompt.manifest.total_tokens > 0
    assert 0 < response.usage.completion_tokens <= 32
    assert response.finish_reason in {"stop", "length"}


async def test_requests_are_deterministic_at_temperature_zero(
    model: LlamaCppModel, make_prompt
) -> None:
    request = ModelRequest(prompt=make_prompt(model.count_tokens), max_tokens=16)
    first, second = await asyncio.gather(model.request(request), model.request(request))
    assert first.text == second.text


async def test_streaming_hands_out_the_text_as_it_is_generated(
    model: LlamaCppModel, make_prompt
) -> None:
    """Streamed: the pieces arrive during generation, add up to the answer, and the answer
    and usage are exactly those of the same request not streamed."""
    prompt = make_prompt(model.count_tokens)
    plain = await model.request(ModelRequest(prompt=prompt, max_tokens=24))
    pieces: list[str] = []
    streamed = await model.request(ModelRequest(prompt=prompt, max_tokens=24, stream=pieces.append))

    assert len(pieces) > 3  # token by token, not one piece at the end
    assert "".join(pieces) == streamed.text
    assert streamed.text == plain.text
    assert streamed.usage == plain.usage
    assert streamed.finish_reason == plain.finish_reason


async def test_json_schema_output_parses(model: LlamaCppModel, make_prompt) -> None:
    schema = {
        "type": "object",
        "properties": {"colour": {"type": "string"}, "confidence": {"type": "integer"}},
        "required": ["colour", "confidence"],
    }
    prompt = make_prompt(
        model.count_tokens,
        description="Reply with JSON: the colour of the sky and your confidence from 1 to 10.",
    )

    response = await model.request(ModelRequest(prompt=prompt, max_tokens=96, json_schema=schema))

    data = json.loads(response.text)
    assert set(data) == {"colour", "confidence"}
    assert isinstance(data["colour"], str)
    assert isinstance(data["confidence"], int)


def test_unknown_name_without_model_path_is_config_error() -> None:
    with pytest.raises(ConfigError, match="model_path") as info:
        LlamaCppModel("llama-3-8b")
    assert info.value.field == "model"


def test_missing_model_file_is_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        LlamaCppModel("mine", model_path=str(tmp_path / "absent.gguf"))


def test_explicit_model_path_names_the_model() -> None:
    m = LlamaCppModel("smol", model_path=smollm2_path(), n_ctx=256)
    assert m.model_id == "llama-cpp:smol"


async def test_prompt_too_long_for_n_ctx_is_model_error(make_prompt) -> None:
    small = LlamaCppModel(n_ctx=256, n_threads=2)
    try:
        prompt = make_prompt(small.count_tokens, upstream_result="word " * 400)
        assert prompt.manifest.total_tokens > 256
        with pytest.raises(ModelError, match="exceed context window") as info:
            await small.request(ModelRequest(prompt=prompt, max_tokens=8))
        assert info.value.model_id == "llama-cpp:smollm2"
    finally:
        small.close()


def test_invalid_gguf_file_is_model_error(tmp_path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file")
    m = LlamaCppModel("bogus", model_path=str(bogus))
    with pytest.raises(ModelError, match="cannot load"):
        m.count_tokens("hello")


async def test_prefill_threads_and_batch_size_reach_llama_cpp(make_prompt) -> None:
    m = get_model("llama-cpp:smollm2", n_ctx=1024, n_threads=1, n_threads_batch=1, n_batch=32)
    assert isinstance(m, LlamaCppModel)
    try:
        prompt = make_prompt(m.count_tokens)
        llm = m._ensure_loaded()
        assert llm.context_params.n_threads_batch == 1
        assert llm.context_params.n_threads == 1
        assert llm.context_params.n_batch == 32
        assert llm.n_ctx() == 1024
        # A prompt longer than one batch is evaluated in several steps and still answered.
        assert prompt.manifest.total_tokens > 32
        response = await m.request(ModelRequest(prompt=prompt, max_tokens=16))
        assert response.text.strip()
        assert response.usage.prompt_tokens > 32
    finally:
        m.close()
