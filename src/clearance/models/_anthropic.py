"""The Anthropic provider (``anthropic:<name>``), built on the official ``anthropic`` SDK.

It talks to the Anthropic Messages API (``POST /v1/messages``): Anthropic's own, or any
server that speaks it at ``base_url``. The SDK is an optional extra:
``pip install 'clearance[anthropic]'``.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Any

import anthropic

from clearance._core.errors import ConfigError, ModelError
from clearance.models._anthropic_answer import (
    StreamedInputs,
    anthropic_response,
    exact_content,
    streamed_error,
)
from clearance.models._anthropic_format import anthropic_tool as _anthropic_tool
from clearance.models._anthropic_format import to_anthropic_messages
from clearance.models._base import (
    MAX_REPORTED_TOKENS,
    ModelRequest,
    ModelResponse,
    max_response_chars,
)
from clearance.models._counted import with_counted_usage
from clearance.models._credentials import PLACEHOLDER_API_KEY, client_settings, redacted
from clearance.models._http_body import json_object, read_capped
from clearance.models._http_client import guarded_client, redirect_note
from clearance.models._openai_stream import max_chunks
from clearance.models._stream_events import MALFORMED, checked_events, described
from clearance.models._stream_usage import ANTHROPIC_USAGE, RawStreamUsage
from clearance.models._transient import is_transient_status, parse_retry_after
from clearance.tokens import TokenCounter, tiktoken_counter

__all__ = ["ANSWER_TOOL", "PLACEHOLDER_API_KEY", "AnthropicModel", "to_anthropic_messages"]


ANSWER_TOOL = "json_answer"
"""Name of the tool a structured-output request forces the model to call (see
`AnthropicModel`); a suffix is added when one of the request's own tools has that name."""


class AnthropicModel:
    """A Claude model behind the Anthropic Messages API.

    Structured output: the Messages API has no JSON mode, so with ``request.json_schema`` set
    the request offers one more tool, `ANSWER_TOOL` (``"json_answer"``), whose input schema is
    the requested schema, and forces its use (``tool_choice={"type": "tool", "name":
    "json_answer"}``; with other tools offered too, ``{"type": "any"}``: the model must call
    one of them). The input the model gives that tool is the answer: it is returned as
    `ModelResponse.text`, serialized as JSON with its members in the model's order and each
    number as the answer's body holds it (``3.14159265358979323846``, ``1.0E2``, ``-0``:
    never through a float; a structured answer is never streamed). A schema whose ``type``
    is not ``"object"`` (the API's tool inputs are objects) is wrapped as the ``"answer"``
    property of an object and unwrapped again. Callers validate the result either way.

    Token counts: `count_tokens` is an estimate (tiktoken's ``cl100k_base``; Claude's own
    tokenizer is not published, and the count must be cheap and offline), while the usage
    of each call is the server's. `count_prompt_tokens` asks the server for an exact count.

    Args:
        name: The model name the server knows (``"claude-sonnet-4-5"``...).
        base_url: Root of the API, without ``/v1`` (``"http://127.0.0.1:8080"``); ``None``
            means the ``ANTHROPIC_BASE_URL`` environment variable, else Anthropic's own API.
        api_key: API key; ``None`` means ``ANTHROPIC_API_KEY``. Without either, a server at
            an explicit base URL (argument or ``ANTHROPIC_BASE_URL``) gets the placeholder
            key ``"unused"``.
        context_window: Tokens the model can attend to, if known; ``None`` means unknown.
        timeout_s: Wall-clock seconds one call may take in all (connecting, waiting and
            reading the whole answer) before it fails; a request's own
            `ModelRequest.timeout_s`, when shorter, wins. It holds even against a server
            that trickles its answer a byte at a time.
        max_retries: How many times the SDK itself retries connection errors, timeouts, 429
            and 5xx responses. 0 by default: the orchestrator retries transient errors
            itself (per agent ``limits.retries``) and records every attempt.
        client: A ready ``anthropic.AsyncAnthropic`` client to use instead of creating one;
            then ``base_url``, ``api_key``, ``timeout_s`` (as the client's own timeout) and
            ``max_retries`` are ignored, and `aclose` leaves the client open. The client
            made otherwise follows no redirect and reads bodies to a cap (`guarded_client`).

    Raises:
        ConfigError: No API key is configured for Anthropic's own API, or an argument is out
            of range.
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
        client: anthropic.AsyncAnthropic | None = None,
    ):
        if not name:
            raise ConfigError("the model name is empty", field="model")
        if context_window is not None and (
            isinstance(context_window, bool)
            or not isinstance(context_window, int)
            or context_window < 1
        ):
            raise ConfigError(
                f"context_window must be a whole number of at least 1, got {context_window!r}",
                field="context_window",
            )
        if not 0 < timeout_s < math.inf:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}", field="timeout_s")
        if max_retries < 0:
            raise ConfigError(
                f"max_retries must be 0 or more, got {max_retries}", field="max_retries"
            )
        self.name = name
        self.model_id = f"anthropic:{name}"
        self.context_window = context_window
        self.timeout_s = timeout_s
        self._counter: TokenCounter | None = None
        self._owns_client = client is None
        if client is None:
            url, key = client_settings(
                vendor="Anthropic", env_prefix="ANTHROPIC", server="a Messages API server",
                base_url=base_url, api_key=api_key,
            )  # fmt: skip
            try:
                client = anthropic.AsyncAnthropic(
                    api_key=key,
                    base_url=url,
                    timeout=timeout_s,
                    max_retries=max_retries,
                    http_client=guarded_client(
                        anthropic.DefaultAsyncHttpxClient, model_id=self.model_id
                    ),
                )
            except (anthropic.AnthropicError, ValueError) as exc:
                raise ConfigError(f"cannot create the Anthropic client: {exc}") from exc
        self._client = client

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model_id!r}, base_url={self.base_url!r})"

    @property
    def base_url(self) -> str:
        """The API root requests go to."""
        return str(self._client.base_url)

    # -- ChatModel ---------------------------------------------------------------------

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Run one Messages API call.

        Sends the prompt's system messages as ``system`` and the rest as ``messages`` (see
        `to_anthropic_messages`), with ``max_tokens`` (tokens), ``temperature``, and ``top_p``
        and ``stop_sequences`` when set (the sampling settings in the request body itself, so
        every SDK release sends them). ``seed`` and ``repeat_penalty`` have no Messages API
        counterpart and are not sent. With ``request.tools``, sends them as Anthropic tools
        (``name``, ``description``, ``input_schema``) and returns the model's ``tool_use``
        blocks as `ToolCall` s (an input that is not an object, or nests deeper than
        `MAX_ARGUMENT_DEPTH`, becomes ``{"_raw": ...}`` so the tool reports the problem).
        With ``request.json_schema``, forces the answer tool (see the class docstring) and
        returns its input as the text. With
        ``request.stream`` (and no ``json_schema``), the answer is streamed (the SDK's
        ``messages.stream``), each text piece handed to the sink, and the final message read
        into the same response; the deadline covers the whole stream.

        Args:
            request: The prompt and sampling settings.

        Returns:
            The text blocks of the answer joined, the tool calls in order, the server's
            reported usage with ``requests=1`` (prompt tokens: ``input_tokens`` plus both
            prompt-cache counts; cached: ``cache_read_input_tokens``, ``None`` if not
            reported; completion: ``output_tokens``; when no usage, or no ``input_tokens``
            or ``output_tokens``, is reported, the tokens counted with `count_tokens` and
            marked ``usage.counted``), and ``finish_reason``
            (``"stop"``, ``"length"`` for ``max_tokens``, ``"tool_calls"``,
            ``"content_filter"`` for a refusal, or the server's own word).

        Raises:
            ModelError: The server could not be reached, did not answer in full within the
                deadline (the shorter of the model's and the request's ``timeout_s``),
                answered with an error status, with no content list, without the forced
                answer tool's call, with more than `MAX_STREAMED_TOOL_CALLS` tool calls or
                more text than `max_response_chars` allows for ``max_tokens``, or with a
                usage that is not an object or not a token count (see `validated_usage`;
                a streamed one checked as the server sent it, `RawStreamUsage`).
                Connection errors, timeouts, 408, 409, 429 and 5xx statuses are transient
                (with the server's ``Retry-After`` in ``retry_after_s``); the others are
                not.
        """
        system, messages = to_anthropic_messages(request.prompt)
        if not messages:
            raise ModelError(
                "the prompt has no user message to send (the Messages API needs one)",
                model_id=self.model_id,
            )
        options: dict[str, Any] = {}
        if system:
            options["system"] = system
        # Sampling settings go in the body itself: recent SDK releases have no typed
        # arguments for them, older ones do; the body reaches the server either way.
        sampling: dict[str, Any] = {"temperature": request.temperature}
        if request.top_p is not None:
            sampling["top_p"] = request.top_p
        if request.stop:
            options["stop_sequences"] = list(request.stop)
        tools = [_anthropic_tool(t) for t in request.tools]
        answer_tool: str | None = None
        wrapped = False
        if request.json_schema is not None:
            taken = {t["name"] for t in tools}
            answer_tool = ANSWER_TOOL
            while answer_tool in taken:
                answer_tool += "_"
            schema = request.json_schema
            if schema.get("type") != "object":
                wrapped = True
                schema = {
                    "type": "object",
                    "properties": {"answer": schema},
                    "required": ["answer"],
                }
            tools.append(
                {
                    "name": answer_tool,
                    "description": "Give your final answer as this tool's input.",
                    "input_schema": schema,
                }
            )
            only_answer = len(tools) == 1
            options["tool_choice"] = (
                {"type": "tool", "name": answer_tool} if only_answer else {"type": "any"}
            )
        elif tools:
            options["tool_choice"] = {"type": "auto"}
        if tools:
            options["tools"] = tools
        deadline_s = min(self.timeout_s, request.timeout_s or math.inf)
        # The answer is read here, not by the SDK: its body capped while it arrives
        # (`read_capped`), then checked field by field (`anthropic_response`).
        create: Any = self._client.messages.with_streaming_response.create
        arguments: dict[str, Any] = {
            "model": self.name, "messages": messages, "max_tokens": request.max_tokens,
            "extra_body": sampling, "timeout": deadline_s, **options,
        }  # fmt: skip
        exact: list[Any] | None = None
        try:
            async with asyncio.timeout(deadline_s):  # over the whole stream too
                if request.stream is not None and answer_tool is None:
                    message: Any = await self._streamed(arguments, request)
                else:
                    async with create(**arguments) as raw:  # the body read here, capped
                        body = await read_capped(
                            raw.iter_bytes(), max_tokens=request.max_tokens,
                            model_id=self.model_id,
                        )  # fmt: skip
                        content_type = raw.headers.get("content-type", "")
                    message = json_object(body, content_type=content_type, model_id=self.model_id)
                    if answer_tool is not None:  # its input written back as the model wrote it
                        exact = exact_content(body)
        except TimeoutError as exc:
            raise ModelError(
                f"request timed out: no complete answer within {deadline_s:g} s",
                model_id=self.model_id,
                transient=True,
            ) from exc
        except anthropic.AnthropicError as exc:
            raise self._error(exc) from exc
        response = anthropic_response(
            message, model_id=self.model_id, answer_tool=answer_tool, wrapped=wrapped,
            max_tokens=request.max_tokens, exact=exact,
        )  # fmt: skip
        if response.usage.requests == 0:  # no counts reported: count, so limits are not blind
            return with_counted_usage(response, request, self.count_tokens)
        return response

    async def _streamed(self, arguments: dict[str, Any], request: ModelRequest) -> Any:
        """Stream the answer (the SDK's ``messages.stream``), each text piece to the sink.

        Raises:
            ModelError: More text events than `max_chunks` allows for ``max_tokens``, or
                more text and tool input than `max_response_chars`; a content block
                started out of order (`StreamedInputs`); an event's usage that is not an
                object, or a count in it that is not a token count, as the server sent it
                (`RawStreamUsage`: the SDK converts ``"7"`` to 7); or (transient) a stream
                that ended without a ``stop_reason``: cut off, not taken as a whole answer.
        """
        assert request.stream is not None
        stream: Any = self._client.messages.stream
        cap, count = max_chunks(request.max_tokens), 0
        chars_cap, chars = max_response_chars(request.max_tokens), 0
        server, model_id, redact = self.base_url, self.model_id, self._text
        inputs = StreamedInputs(server=redact(server), model_id=model_id)
        usage = RawStreamUsage(ANTHROPIC_USAGE, server=redact(server), model_id=model_id)
        async with stream(**arguments) as events:
            usage.watch(events.response)  # each usage checked as sent, before the SDK reads it
            async for event in checked_events(
                events, server=server, model_id=model_id, redact=redact
            ):
                event_type = getattr(event, "type", None)
                piece = getattr(event, "text", None) if event_type == "text" else None
                piece = piece if isinstance(piece, str) else ""
                chars += len(piece) + inputs.add(event)  # a tool input's pieces count too
                if chars > chars_cap:
                    raise ModelError(
                        f"the server streamed more than {chars_cap:,} characters for "
                        f"max_tokens={request.max_tokens} (max_response_chars): refused",
                        model_id=self.model_id,
                    )
                if event_type not in ("text", "input_json"):
                    continue
                count += 1
                if count > cap:
                    raise ModelError(
                        f"the server streamed more than {cap} pieces for max_tokens="
                        f"{request.max_tokens}: not an honest answer",
                        model_id=self.model_id,
                    )
                if piece:
                    request.stream(piece)
            try:  # the SDK's checks of the events it gathered
                message = await events.get_final_message()
            except MALFORMED as exc:
                raise described(exc, server=server, model_id=model_id, redact=redact) from exc
        if not usage.read:  # the SDK read the body some other way: nothing was checked
            raise ModelError("the streamed answer's usage could not be checked", model_id=model_id)
        inputs.raw_unfinished(message)
        if getattr(message, "stop_reason", None) is None:  # no message_delta: cut off
            raise ModelError(
                "the stream ended before the answer was finished (no stop_reason): cut off",
                model_id=self.model_id,
                transient=True,
            )
        return message

    def _error(self, exc: anthropic.AnthropicError) -> ModelError:
        """The `ModelError` for an SDK failure, the API key taken out of its text."""
        if isinstance(exc, anthropic.APITimeoutError):
            return ModelError(
                self._text(f"request timed out: {exc}"), model_id=self.model_id, transient=True
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return ModelError(
                self._text(f"cannot reach {self.base_url}: {exc} (caused by {exc.__cause__!r})"),
                model_id=self.model_id,
                transient=True,
            )
        if isinstance(exc, anthropic.APIStatusError) and exc.status_code == 200:  # in a stream
            return streamed_error(exc.body, server=self.base_url, model_id=self.model_id,
                                  redact=self._text)  # fmt: skip
        if isinstance(exc, anthropic.APIStatusError):
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
        """An estimate of the tokens ``text`` takes for a Claude model.

        Counted with tiktoken's ``cl100k_base`` encoding, offline (Claude's tokenizer is not
        published; the server's count is `count_prompt_tokens`). Claude's tokenizer often
        needs somewhat more tokens than ``cl100k_base`` for the same text, so leave a margin
        under the context window.

        Args:
            text: Any text.

        Returns:
            The estimated number of tokens, 0 for an empty text.
        """
        counter = self._counter
        if counter is None:
            counter = self._counter = tiktoken_counter("cl100k_base")
        return counter(text)

    async def count_prompt_tokens(self, request: ModelRequest) -> int:
        """The server's exact count of the input tokens ``request`` would send.

        Calls the Messages API's token counting endpoint (``POST
        /v1/messages/count_tokens``) with the same system text, messages and tools
        `request` would send, under the same deadline.

        Args:
            request: The request to count; sampling settings are ignored.

        Returns:
            Input tokens, as the server counts them.

        Raises:
            ModelError: As `request`, or the server's count is not an integer in
                ``0..MAX_REPORTED_TOKENS``.
        """
        system, messages = to_anthropic_messages(request.prompt)
        options: dict[str, Any] = {}
        if system:
            options["system"] = system
        if request.tools:
            options["tools"] = [_anthropic_tool(t) for t in request.tools]
        deadline_s = min(self.timeout_s, request.timeout_s or math.inf)
        count: Any = self._client.messages.count_tokens
        try:
            async with asyncio.timeout(deadline_s):
                counted = await count(
                    model=self.name,
                    messages=messages,
                    timeout=deadline_s,
                    **options,
                )
        except TimeoutError as exc:
            raise ModelError(
                f"token count timed out: no complete answer within {deadline_s:g} s",
                model_id=self.model_id,
                transient=True,
            ) from exc
        except anthropic.AnthropicError as exc:
            raise self._error(exc) from exc
        tokens = getattr(counted, "input_tokens", None)
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise ModelError(
                f"the server's token count is {type(tokens).__name__}, not an integer",
                model_id=self.model_id,
            )
        if not 0 <= tokens <= MAX_REPORTED_TOKENS:
            raise ModelError(
                f"the server's token count {tokens} is outside 0..{MAX_REPORTED_TOKENS}",
                model_id=self.model_id,
            )
        return tokens

    # -- lifecycle ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP client this model created (a client passed in is left open)."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> AnthropicModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
