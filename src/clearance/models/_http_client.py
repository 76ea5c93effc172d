"""The HTTP client both API providers (``openai:``, ``anthropic:``) send their requests with.

The SDKs' own clients follow redirects and read an error answer's body whole. A model server
is untrusted, so the client made here:

- follows no redirect: a ``3xx`` answer is an error naming its status, never a second request
  (the prompt, which holds what only this task may see, is not sent to wherever the server
  points, nor is a ``GET`` answer from there taken as the model's);
- reads at most `MAX_ERROR_BODY_BYTES` of an error answer's body (the SDK puts it in its
  error's text): a server answering 500 with gigabytes is not held in memory;
- reads at most `MAX_RESPONSE_BYTES` of any other answer's body, a stream's included (a
  server-sent event that never ends is refused there).

Everything else is the SDK's default client (its timeouts, connection limits and proxies from
the environment).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2

from clearance._core.errors import ModelError
from clearance.models._http_body import MAX_RESPONSE_BYTES

__all__ = ["MAX_ERROR_BODY_BYTES", "guarded_client", "redirect_note"]

MAX_ERROR_BODY_BYTES = 64 * 1024
"""Most bytes of an error answer's body read; the rest is dropped unread."""


def redirect_note(status: int, headers: Any) -> str:
    """For a redirect status, ``" (a redirect to <where>, not followed)"``; else ``""``."""
    if not 300 <= status <= 399:
        return ""
    where = headers.get("location") if headers is not None else None
    if not isinstance(where, str) or not where:
        return " (a redirect, not followed)"
    shown = where if len(where) <= 200 else f"{where[:200]}..."
    return f" (a redirect to {shown!r}, not followed)"


class _CappedBody(httpx2.AsyncByteStream):
    """A response body read through a cap: cut short (``truncate``) or refused past it."""

    def __init__(self, inner: Any, *, limit: int, truncate: bool, model_id: str) -> None:
        self._inner = inner
        self._limit = limit
        self._truncate = truncate
        self._model_id = model_id

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            if size + len(chunk) > self._limit:
                if self._truncate:
                    yield chunk[: self._limit - size]
                    return
                raise ModelError(
                    f"the server's answer is over {self._limit:,} bytes: refused",
                    model_id=self._model_id,
                )
            size += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


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
            response: httpx2.Response = await super().send(request, stream=True, **kwargs)
            failed = not response.is_success
            response.stream = _CappedBody(
                response.stream,
                limit=MAX_ERROR_BODY_BYTES if failed else MAX_RESPONSE_BYTES,
                truncate=failed,
                model_id=model_id,
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
