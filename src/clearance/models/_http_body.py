"""Reading an untrusted model server's HTTP answer body: capped in bytes, decoded as a JSON object.

Both HTTP providers (``openai:`` and ``anthropic:``) read a non-streamed answer's body
themselves rather than through their SDK's parsing, so the size is capped *while the body
arrives* (a server sending gigabytes never has them held in memory) and a body that is not a
JSON object fails the call with a one-line `ModelError` instead of an exception from deep in
the SDK.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from clearance._core.errors import ModelError
from clearance.models._base import kind_of, max_response_chars

__all__ = ["MAX_RESPONSE_BYTES", "json_object", "max_body_bytes", "read_capped"]

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""Most bytes of one HTTP answer body, whatever its ``max_tokens`` (see `max_body_bytes`)."""


def max_body_bytes(max_tokens: int) -> int:
    r"""Most bytes the body of an answer to a request for ``max_tokens`` tokens may take.

    Eight bytes per character of `max_response_chars` (a character escaped in JSON takes at
    most six, ``\uXXXX``) plus 64 KiB for the envelope, and never more than
    `MAX_RESPONSE_BYTES`.
    """
    return min(8 * max_response_chars(max_tokens) + 65_536, MAX_RESPONSE_BYTES)


async def read_capped(chunks: AsyncIterator[bytes], *, max_tokens: int, model_id: str) -> bytes:
    """The bytes of ``chunks``, refused as soon as they pass `max_body_bytes` (``max_tokens``).

    Raises:
        ModelError: The body is longer than the cap (not transient); reading stops
            there, so a server sending gigabytes never has them held in memory. Or reading
            failed (the connection broke: transient).
    """
    cap = max_body_bytes(max_tokens)
    parts: list[bytes] = []
    size = 0
    iterator = aiter(chunks)
    while True:
        try:
            chunk = await anext(iterator)
        except StopAsyncIteration:
            break
        except Exception as exc:  # the HTTP client's read error, whatever its module
            raise ModelError(
                f"reading the answer failed: {type(exc).__name__}: {exc}",
                model_id=model_id,
                transient=True,
            ) from exc
        size += len(chunk)
        if size > cap:
            raise ModelError(
                f"the server's answer is over the cap of {cap:,} bytes for max_tokens="
                f"{max_tokens} (max_body_bytes): refused",
                model_id=model_id,
            )
        parts.append(chunk)
    return b"".join(parts)


def json_object(body: bytes, *, content_type: str, model_id: str) -> dict[str, Any]:
    """The JSON object in ``body`` (an answer's whole body, as received).

    Args:
        body: The bytes (UTF-8 JSON).
        content_type: The ``Content-Type`` header, named when the body is not JSON.
        model_id: The ``"provider:name"`` id, for errors.

    Raises:
        ModelError: The body is not UTF-8, not JSON (nesting too deep for the decoder
            included), or not a JSON object. Not transient.
    """
    try:
        data: Any = json.loads(body)
    except UnicodeDecodeError as exc:
        raise ModelError(
            f"the server's answer is not UTF-8 ({exc.reason} at byte {exc.start})",
            model_id=model_id,
        ) from None
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        start = body[:60].decode("utf-8", "replace")
        raise ModelError(
            f"the server's answer is not JSON ({content_type or 'no content type'}, "
            f"{len(body):,} bytes, starting {start!r})",
            model_id=model_id,
        ) from None
    if not isinstance(data, dict):
        raise ModelError(
            f"the server's answer is not a JSON object but {kind_of(data)}", model_id=model_id
        )
    return data
