"""`OpenAIModel` against a real llama.cpp server (llama-cpp-python's) started on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from clearance._core.errors import ConfigError, ModelError
from clearance.models import ChatModel, ModelRequest
from clearance.models._llama_cpp import smollm2_path
from clearance.models._openai import OpenAIModel

pytestmark = pytest.mark.network

STARTUP_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ready(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:P/v1``) of a llama.cpp server running the embedded model."""
    pytest.importorskip(
        "llama_cpp.server",
        reason="llama-cpp-python[server] is not installed (pip install 'clearance[local]')",
    )
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    log_path: Path = tmp_path_factory.mktemp("llama_server") / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", smollm2_path(),
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", "2", "--n_threads_batch", "2",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not _ready(base_url):
            if process.poll() is not None:
                log_text = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama.cpp server exited with {process.returncode}:\n{log_text}")
            if time.monotonic() > deadline:
                log_text = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama.cpp server not ready in {STARTUP_TIMEOUT_S} s:\n{log_text}")
            time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
async def model(server_url: str) -> AsyncIterator[OpenAIModel]:
    async with OpenAIModel("smollm2", base_url=server_url, timeout_s=120.0) as m:
        yield m


async def test_is_a_chat_model(model: OpenAIModel) -> None:
    assert isinstance(model, ChatModel)
    assert model.model_id == "openai:smollm2"
    assert model.context_window is None
    assert model.count_tokens("abcdefgh") == 2


async def test_request_returns_text_and_usage(model: OpenAIModel, make_prompt) -> None:
    prompt = make_prompt(model.count_tokens)
    assert prompt.manifest.origins == ("instructions", "task:answer", "task_result:facts")

    response = await model.request(ModelRequest(prompt=prompt, max_tokens=32))

    assert response.text.strip()
    assert response.model_id == "openai:smollm2"
    assert response.usage.requests == 1
    assert response.usage.prompt_tokens > 0
    assert 0 < response.usage.completion_tokens <= 32
    assert response.finish_reason in {"stop", "length"}


async def test_json_schema_request_returns_matching_json(model: OpenAIModel, make_prompt) -> None:
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
    assert isinstance(data, dict)
    assert set(data) == {"colour", "confidence"}
    assert isinstance(data["colour"], str)
    assert isinstance(data["confidence"], int)


async def test_http_error_status_becomes_model_error(server_url: str, make_prompt) -> None:
    wrong_root = server_url.removesuffix("/v1") + "/no-such-api/v1"
    async with OpenAIModel("smollm2", base_url=wrong_root, max_retries=0) as m:
        with pytest.raises(ModelError, match="HTTP 404") as info:
            await m.request(ModelRequest(prompt=make_prompt(m.count_tokens), max_tokens=4))
    assert info.value.model_id == "openai:smollm2"


async def test_prompt_too_long_for_server_becomes_model_error(
    model: OpenAIModel, make_prompt
) -> None:
    prompt = make_prompt(model.count_tokens, upstream_result="word " * 3000)
    with pytest.raises(ModelError, match=r"HTTP 4\d\d"):
        await model.request(ModelRequest(prompt=prompt, max_tokens=8))


async def test_nothing_listening_becomes_model_error(make_prompt) -> None:
    port = _free_port()  # closed again at once: nothing listens there
    async with OpenAIModel(
        "smollm2", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=5.0
    ) as m:
        with pytest.raises(ModelError, match="cannot reach") as info:
            await m.request(ModelRequest(prompt=make_prompt(m.count_tokens), max_tokens=4))
    assert info.value.model_id == "openai:smollm2"


async def test_timeout_becomes_model_error(make_prompt) -> None:
    # A socket that accepts connections (backlog) but never answers.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        async with OpenAIModel(
            "smollm2", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=0.5
        ) as m:
            with pytest.raises(ModelError, match="timed out"):
                await m.request(ModelRequest(prompt=make_prompt(m.count_tokens), max_tokens=4))


def test_missing_key_without_base_url_is_config_error() -> None:
    # tests/conftest.py removes OPENAI_API_KEY and OPENAI_BASE_URL from the environment.
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIModel("gpt-4o-mini")


async def test_base_url_from_environment_gets_placeholder_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    async with OpenAIModel("local") as m:
        assert m.base_url == "http://127.0.0.1:9/v1/"
        assert m._client.api_key == "unused"


async def test_injected_client_is_left_open() -> None:
    import openai

    client = openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    m = OpenAIModel("x", client=client)
    await m.aclose()
    assert not client.is_closed()
    await client.close()


async def test_llama_cpp_server_reports_no_cached_tokens_so_none_is_recorded(
    model: OpenAIModel, make_prompt
) -> None:
    """llama-cpp-python's server (0.3.x) reuses a shared prefix but does not report it.

    Its usage has no ``prompt_tokens_details`` and its body no ``timings``: the count is
    recorded as unknown (``None``), never as 0. A server version that reports it fails
    this test, which then should assert the reported count.
    """
    prompt = make_prompt(model.count_tokens)
    first = await model.request(ModelRequest(prompt=prompt, max_tokens=4))
    second = await model.request(ModelRequest(prompt=prompt, max_tokens=4))
    assert first.usage.prompt_tokens == second.usage.prompt_tokens > 0
    assert first.usage.cached_prompt_tokens is None
    assert second.usage.cached_prompt_tokens is None
