"""The OpenAI-compatible provider (``openai:<name>``), built on the official ``openai`` SDK.

It talks to any server that speaks the OpenAI chat completions API: OpenAI itself, or a local
server such as ``python -m llama_cpp.server``, vLLM or Ollama (through ``base_url``).
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Any

import openai

from clearance._core.errors import ConfigError, ModelError
from clearance.models._base import ModelRequest, ModelResponse
from clearance.models._counted import with_counted_usage
from clearance.models._credentials import PLACEHOLDER_API_KEY, client_settings, redacted
from clearance.models._http_body import read_capped
from clearance.models._http_client import guarded_client, redirect_note
from clearance.models._openai_parse import parse_completion
from clearance.models._openai_stream import collect_stream
from clearance.models._stream_events import checked_events
from clearance.models._stream_usage import OPENAI_USAGE, RawStreamUsage
from clearance.models._transient import is_transient_status, parse_retry_after
from clearance.tokens import TokenCounter, counter_for

__all__ = ["PLACEHOLDER_API_KEY", "OpenAIModel"]


class OpenAIModel:
    """A chat model behind an OpenAI-compatible HTTP API.

    Structured output: with ``request.json_schema`` set, the request body carries
    ``"response_format": {"type": "json_object", "schema": <schema>}``. That is the form the
    llama.cpp server (and llama-cpp-python's server) turns into a grammar; both reject OpenAI's
    ``{"type": "json_schema", ...}`` form. The SDK's typed ``response_format`` argument has no
    ``schema`` key, so the field is sent through ``extra_body``. Servers that ignore the schema
    still return JSON mode output; callers validate the result either way.

    Args:
        name: The model name the server knows (``"gpt-4o-mini"``, or any name for a
            single-model local server).
        base_url: Root of the API (``"http://127.0.0.1:8080/v1"``); ``None`` means the
            ``OPENAI_BASE_URL`` environment variable, else OpenAI's own API.
        api_key: API key; ``None`` means ``OPENAI_API_KEY``. Without either, a server at an
            explicit base URL (argument or ``OPENAI_BASE_URL``) gets the placeholder key
            ``"unused"``.
        context_window: Tokens the model can attend to, if known; ``None`` means unknown.
        timeout_s: Wall-clock seconds one call may take in all (connecting, waiting and
            reading the whole answer) before it fails; a request's own
            `ModelRequest.timeout_s`, when shorter, wins. The HTTP client's timeouts alone
            would not do: they apply to each read, and a server trickling its answer a byte
            at a time never trips them.
        max_retries: How many times the SDK itself retries connection errors, timeouts, 429
            and 5xx responses before giving up. 0 by default: the orchestrator retries
            transient errors itself (per agent ``limits.retries``) and records every attempt.
        client: A ready ``openai.AsyncOpenAI`` client to use instead of creating one; then
            ``base_url``, ``api_key``, ``timeout_s`` and ``max_retries`` are ignored, and
            `aclose` leaves the client open (its owner closes it). The client made
            otherwise follows no redirect and reads bodies to a cap (`guarded_client`).

    Raises:
        ConfigError: No API key is configured for OpenAI's own API, or an argument is out of
            range.
    """

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 0,
        client: openai.AsyncOpenAI | None = None,
    ):
        if not name:
            raise ConfigError("the model name is empty", field="model")
        if context_window is not None and context_window < 1:
            raise ConfigError(
                f"context_window must be at least 1, got {context_window}", field="context_window"
            )
        if not 0 < timeout_s < math.inf:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}", field="timeout_s")
        if max_retries < 0:
            raise ConfigError(
                f"max_retries must be 0 or more, got {max_retries}", field="max_retries"
            )
        self.name = name
        self.model_id = f"openai:{name}"
        self._counter: TokenCounter | None = None
        self.context_window = context_window
        self.timeout_s = timeout_s
        self._owns_client = client is None
        if client is None:
            url, key = client_settings(
                vendor="OpenAI", env_prefix="OPENAI", server="an OpenAI-compatible server",
                base_url=base_url, api_key=api_key,
            )  # fmt: skip
            try:
                client = openai.AsyncOpenAI(
                    api_key=key,
                    base_url=url,
                    timeout=timeout_s,
                    max_retries=max_retries,
                    http_client=guarded_client(
                        openai.DefaultAsyncHttpxClient, model_id=self.model_id
                    ),
                )
            except openai.OpenAIError as exc:
                raise ConfigError(f"cannot create the OpenAI client: {exc}") from exc
        self._client = client

    def __repr__(self) -> str:
        return f"OpenAIModel({self.model_id!r}, base_url={str(self._client.base_url)!r})"

    @property
    def base_url(self) -> str:
        """The API root requests go to."""
        return str(self._client.base_url)

    # -- ChatModel ---------------------------------------------------------------------

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Run one chat completion on the server.

        Sends ``request.prompt.to_dicts()`` with ``max_tokens`` (tokens), ``temperature``,
        ``seed``, ``top_p`` and ``stop`` (each omitted when unset), and ``repeat_penalty`` in
        the request body when set. With ``request.json_schema`` set, asks for a JSON
        object matching it (see the class docstring for the wire form). With
        ``request.tools``, sends them natively (``tools``, ``tool_choice="auto"``) and returns
        the model's ``tool_calls`` (arguments decoded from JSON; arguments that are not a
        JSON object, or nest deeper than `MAX_ARGUMENT_DEPTH`, become ``{"_raw": <text>}`` so
        the tool reports the problem to the model). An empty completion is returned as an
        empty text. The answer is untrusted: its body is read at most `max_body_bytes`
        bytes (reading stops there) and checked field by field (`parse_completion`). With
        ``request.stream`` set, the answer is streamed (``stream=True`` with
        ``stream_options.include_usage``), each piece of text handed to ``request.stream``
        as it arrives, and read into the same response (see `collect_stream`); the deadline
        covers the whole stream; each chunk's usage is checked as the server sent it,
        before the SDK converts it (`RawStreamUsage`).

        Args:
            request: The prompt and sampling settings.

        Returns:
            The completion, with the server's reported ``usage`` and ``requests=1``; when the
            server reports no usage (llama.cpp's server streaming, for one), or a usage
            object without ``prompt_tokens`` or ``completion_tokens``, the tokens counted
            with `count_tokens` and marked ``usage.counted``.

        Raises:
            ModelError: The server could not be reached, did not answer in full within the
                deadline (the shorter of the model's and the request's ``timeout_s``),
                answered with an error status (the status and message are in the
                error's text), or with an unusable answer, named in one line: a body over
                `max_body_bytes`, not JSON, not a JSON object, without any choice, a field of
                the wrong type (``"choice 0's content is an int, not text"``, ``"choice 0 has
                no message"``, a tool call without a name...), more text than
                `max_response_chars` allows for ``max_tokens``, or a usage that is not an
                object or not a token count (see `validated_usage`). Connection errors,
                timeouts, 408, 409, 429 and 5xx statuses are marked ``transient`` (with the
                server's ``Retry-After`` in ``retry_after_s``); other statuses and unusable
                answers are not.
        """
        extra_body: dict[str, Any] = {}
        if request.json_schema is not None:
            extra_body["response_format"] = {"type": "json_object", "schema": request.json_schema}
        if request.repeat_penalty is not None:  # llama.cpp's and vLLM's servers accept it
            extra_body["repeat_penalty"] = request.repeat_penalty
        options: dict[str, Any] = {}
        if request.seed is not None:
            options["seed"] = request.seed
        if request.top_p is not None:
            options["top_p"] = request.top_p
        if request.stop:
            options["stop"] = list(request.stop)
        if request.tools:
            options["tools"] = list(request.tools)
        deadline_s = min(self.timeout_s, request.timeout_s or math.inf)
        if request.stream is not None:
            options["stream"] = True
            options["stream_options"] = {"include_usage": True}
        arguments: dict[str, Any] = {
            "model": self.name, "messages": request.prompt.to_dicts(),
            "max_tokens": request.max_tokens, "temperature": request.temperature,
            "extra_body": extra_body or None, "timeout": deadline_s, **options,
        }  # fmt: skip
        try:
            async with asyncio.timeout(deadline_s):  # over the whole stream too
                if request.stream is not None:
                    return await self._streamed(arguments, request)
                create: Any = self._client.chat.completions.with_streaming_response.create
                async with create(**arguments) as raw:  # the body read here, capped
                    body = await read_capped(
                        raw.iter_bytes(), max_tokens=request.max_tokens, model_id=self.model_id
                    )
                    content_type = raw.headers.get("content-type", "")
        except TimeoutError as exc:
            raise ModelError(
                f"request timed out: no complete answer within {deadline_s:g} s",
                model_id=self.model_id,
                transient=True,
            ) from exc
        except openai.OpenAIError as exc:
            raise self._error(exc) from exc
        parsed = parse_completion(
            body, content_type=content_type, model_id=self.model_id,
            max_tokens=request.max_tokens,
        )  # fmt: skip
        if not parsed.usage_reported:  # none, or no counts: count, so limits are not blind
            return with_counted_usage(parsed.response, request, self.count_tokens)
        return parsed.response

    async def _streamed(self, arguments: dict[str, Any], request: ModelRequest) -> ModelResponse:
        """Stream the answer, each chunk's usage checked as the server sent it.

        Raises:
            ModelError: As `collect_stream`; or a chunk's usage that is not an object, or a
                count in it that is not a token count, as the server sent it (`RawStreamUsage`:
                the SDK turns ``"7"`` into 7 when the chunk has the shape it expects).
        """
        assert request.stream is not None
        completion: Any = await self._client.chat.completions.create(**arguments)
        usage = RawStreamUsage(
            OPENAI_USAGE, server=self._text(self.base_url), model_id=self.model_id
        )
        async with completion:
            if getattr(completion, "response", None) is not None:
                usage.watch(completion.response)  # each usage checked before the SDK reads it
            chunks = checked_events(
                completion, server=self.base_url, model_id=self.model_id, redact=self._text
            )
            response = await collect_stream(
                chunks, request, model_id=self.model_id, sink=request.stream,
                server=self.base_url, counter=self.count_tokens,
            )  # fmt: skip
        if not usage.read:  # the SDK read the body some other way: nothing was checked
            raise ModelError(
                "the streamed answer's usage could not be checked", model_id=self.model_id
            )
        return response

    def _error(self, exc: openai.OpenAIError) -> ModelError:
        """The `ModelError` for an SDK failure, the API key taken out of its text."""
        if isinstance(exc, openai.APITimeoutError):
            return ModelError(
                self._text(f"request timed out: {exc}"), model_id=self.model_id, transient=True
            )
        if isinstance(exc, openai.APIConnectionError):
            return ModelError(
                self._text(f"cannot reach {self.base_url}: {exc} (caused by {exc.__cause__!r})"),
                model_id=self.model_id,
                transient=True,
            )
        if isinstance(exc, openai.APIStatusError):
            return ModelError(
                self._text(
                    f"HTTP {exc.status_code} from {self.base_url}: {exc.message}"
                    f"{redirect_note(exc.status_code, exc.response.headers)}"
                ),
                model_id=self.model_id,
                transient=is_transient_status(exc.status_code),
                retry_after_s=parse_retry_after(exc.response.headers),
                status_code=exc.status_code,
            )
        return ModelError(self._text(f"{type(exc).__name__}: {exc}"), model_id=self.model_id)

    def _text(self, text: str) -> str:
        """``text`` without the API key or the base URL's credentials (a server may echo them)."""
        return redacted(text, self._client.api_key, self.base_url)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` for this model, from `clearance.tokens.counter_for`.

        Exact for OpenAI-family names (tiktoken ``o200k_base`` / ``cl100k_base``, offline);
        for any other name (a local server's model) the documented heuristic of one token per
        4 UTF-8 bytes.

        Args:
            text: Any text.

        Returns:
            The number of tokens, 0 for an empty text.
        """
        counter = self._counter
        if counter is None:
            counter = self._counter = counter_for(f"openai:{self.name}")
        return counter(text)

    # -- lifecycle ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP client this model created (a client passed in is left open)."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> OpenAIModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
