"""The HTTP client both API providers (``openai:``, ``anthropic:``) send their requests with.

The SDKs' own clients follow redirects and read an error answer's body whole. A model server
is untrusted, so the client made here:

- follows no redirect: a ``3xx`` answer is an error naming its status, never a second request
  (the prompt, which holds what only this task may see, is not sent to wherever the server
  points, nor is a ``GET`` answer from there taken as the model's);
- reads at most `MAX_ERROR_BODY_BYTES` of an error answer's body (the SDK puts it in its
  error's text): a server answering 500 with gigabytes is not held in memory;
- reads at most `MAX_RESPONSE_BYTES` of any other answer's body, a stream's included (a
  server-sent event that never ends is refused there);
- asks for ``gzip`` or ``deflate`` only and decodes them itself, the caps above applying to
  the *decoded* bytes too: a small compressed body that expands to gigabytes (a "gzip bomb")
  is cut or refused at the cap, in bounded pieces. Another encoding, or one stacked on
  another (``gzip, gzip``), is refused.

Everything else is the SDK's default client (its timeouts, connection limits and proxies from
the environment).
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2

from clearance._core.errors import ModelError
from clearance.models._http_body import MAX_RESPONSE_BYTES

__all__ = ["MAX_ERROR_BODY_BYTES", "ACCEPTED_ENCODINGS", "guarded_client", "redirect_note"]

MAX_ERROR_BODY_BYTES = 64 * 1024
"""Most bytes of an error answer's body read; the rest is dropped unread."""

ACCEPTED_ENCODINGS = ("gzip", "deflate")
"""The content encodings asked for (``Accept-Encoding``) and decoded; any other is refused."""

_DECODE_PIECE = 1024 * 1024
"""Most bytes one step of decoding may produce, whatever the compressed input."""


def redirect_note(status: int, headers: Any) -> str:
    """For a redirect status, ``" (a redirect to <where>, not followed)"``; else ``""``."""
    if not 300 <= status <= 399:
        return ""
    where = headers.get("location") if headers is not None else None
    if not isinstance(where, str) or not where:
        return " (a redirect, not followed)"
    shown = where if len(where) <= 200 else f"{where[:200]}..."
    return f" (a redirect to {shown!r}, not followed)"


class _Decoder:
    """``gzip`` or ``deflate`` decoding in pieces of at most `_DECODE_PIECE` bytes."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        # gzip: its header; deflate: the zlib wrapper, else (as some servers send) raw
        self._zlib = zlib.decompressobj(31 if coding == "gzip" else 15)
        self._started = False

    def decode(self, data: bytes) -> Iterator[bytes]:
        try:
            piece = self._zlib.decompress(data, _DECODE_PIECE)
        except zlib.error:
            if self.coding != "deflate" or self._started:
                raise
            self._zlib = zlib.decompressobj(-15)
            piece = self._zlib.decompress(data, _DECODE_PIECE)
        self._started = True
        while piece:
            yield piece
            piece = self._zlib.decompress(self._zlib.unconsumed_tail, _DECODE_PIECE)


class _CappedBody(httpx2.AsyncByteStream):
    """A response body, decoded (``decoder``), read through a cap on raw and decoded bytes.

    Past the cap the body is cut short (``truncate``) or refused.
    """

    def __init__(
        self, inner: Any, *, limit: int, truncate: bool, model_id: str, server: str,
        decoder: _Decoder | None,
    ) -> None:  # fmt: skip
        self._inner = inner
        self._limit = limit
        self._truncate = truncate
        self._model_id = model_id
        self._server = server
        self._decoder = decoder

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = decoded = 0
        async for chunk in self._inner:
            if size + len(chunk) > self._limit:
                if self._truncate:
                    chunk = chunk[: self._limit - size]
                else:
                    raise ModelError(
                        f"the answer from {self._server} is over {self._limit:,} bytes: refused",
                        model_id=self._model_id,
                    )
            size += len(chunk)
            for piece in self._pieces(chunk):
                if decoded + len(piece) > self._limit:
                    if self._truncate:
                        yield piece[: self._limit - decoded]
                        return
                    assert self._decoder is not None  # else the raw cap tripped first
                    raise ModelError(
                        f"the answer from {self._server} is over {self._limit:,} bytes once "
                        f"decoded ({self._decoder.coding}): refused",
                        model_id=self._model_id,
                    )
                decoded += len(piece)
                yield piece
            if size >= self._limit and self._truncate:
                return

    def _pieces(self, chunk: bytes) -> Iterator[bytes]:
        if self._decoder is None:
            yield chunk
            return
        try:
            yield from self._decoder.decode(chunk)
        except zlib.error as exc:
            raise ModelError(
                f"the answer from {self._server} is not valid {self._decoder.coding}: {exc}",
                model_id=self._model_id,
            ) from exc

    async def aclose(self) -> None:
        await self._inner.aclose()


def _decoder_for(response: httpx2.Response, *, server: str, model_id: str) -> _Decoder | None:
    """The decoder for ``response``'s ``Content-Encoding`` (``None``: not encoded).

    Raises:
        ModelError: An encoding not in `ACCEPTED_ENCODINGS`, or more than one.
    """
    codings = [
        c.strip().lower()
        for c in response.headers.get_list("content-encoding", split_commas=True)
        if c.strip().lower() not in ("", "identity")
    ]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in ACCEPTED_ENCODINGS:
        shown = ", ".join(codings)
        shown = shown if len(shown) <= 60 else f"{shown[:60]}..."
        raise ModelError(
            f"the answer from {server} has the content encoding {shown!r}; only one of "
            f"{', '.join(ACCEPTED_ENCODINGS)} is accepted: refused",
            model_id=model_id,
        )
    return _Decoder(codings[0])


def guarded_client(base: type[httpx2.AsyncClient], *, model_id: str) -> httpx2.AsyncClient:
    """An instance of the SDK's default client class ``base``, guarded as the module says.

    Args:
        base: The SDK's ``DefaultAsyncHttpxClient``.
        model_id: The ``"provider:name"`` id, for errors.
    """

    class Guarded(base):  # type: ignore[valid-type,misc]
        async def send(
            self, request: httpx2.Request, *, stream: bool = False, **kwargs: Any
        ) -> httpx2.Response:
            request.headers["Accept-Encoding"] = ", ".join(ACCEPTED_ENCODINGS)
            response: httpx2.Response = await super().send(request, stream=True, **kwargs)
            url = request.url
            server = f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")
            try:
                decoder = _decoder_for(response, server=server, model_id=model_id)
            except ModelError:
                await response.aclose()
                raise
            # decoded here, under the cap, so httpx must not decode again
            if "content-encoding" in response.headers:
                del response.headers["content-encoding"]
            failed = not response.is_success
            response.stream = _CappedBody(
                response.stream,
                limit=MAX_ERROR_BODY_BYTES if failed else MAX_RESPONSE_BYTES,
                truncate=failed,
                model_id=model_id,
                server=server,
                decoder=decoder,
            )
            if not stream:
                try:
                    await response.aread()
                except BaseException:
                    await response.aclose()
                    raise
            return response

    client: httpx2.AsyncClient = Guarded(follow_redirects=False)
    return client
