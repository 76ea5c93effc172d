"""A streamed Anthropic answer's usage, checked as the server sent it.

The ``anthropic`` SDK converts each event's fields as it parses them (``"7"`` becomes 7,
``5.0`` becomes 5, ``true`` becomes 1), so the final message it gathers holds counts the
server never sent as counts, and checking that message cannot tell. `RawStreamUsage` reads
the bytes the SDK's event decoder reads (the response's decoded body, through its
``aiter_bytes``), splits them into server-sent events as that decoder does, and checks the
``usage`` of every ``message_start`` (``message.usage``) and ``message_delta`` event before
the SDK sees it: an object (or absent, or ``null``), each of its token counts absent,
``null`` or a whole number in ``0..MAX_REPORTED_TOKENS``, as a non-streamed answer's are.
With every count as the server sent it, the SDK's gathered usage is the server's own, and
`anthropic_response` checks it as a whole (cached tokens within the prompt...).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from clearance._core.errors import ModelError
from clearance.models._base import MAX_REPORTED_TOKENS, kind_of

__all__ = ["USAGE_COUNTS", "RawStreamUsage"]

USAGE_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
"""The token counts of a Messages API usage that a call's `Usage` is made of."""

_EVENT_ENDS = (b"\r\r", b"\n\n", b"\r\n\r\n")
"""How the SDK's decoder knows a run of lines ends an event (a blank line)."""


def _shown(value: object) -> str:
    """``value`` as it is named in an error: short and on one line."""
    text = repr(value) if isinstance(value, str | int | float) else ""
    return text if len(text) <= 40 else f"{text[:37]}..."


class RawStreamUsage:
    """Checks each streamed event's usage in the raw body, before the SDK converts it.

    Args:
        server: The server's URL, named in errors.
        model_id: The ``"provider:name"`` id, for errors.
    """

    def __init__(self, *, server: str, model_id: str) -> None:
        self.server, self.model_id = server, model_id
        self.read = False  # whether the body was read through `watch` at all
        self._pending = bytearray()
        self._data: list[str] = []

    def watch(self, response: Any) -> None:
        """Have ``response`` (the stream's ``httpx`` response) hand its body through `feed`.

        The SDK reads a stream's body with ``response.aiter_bytes()``; that method is
        replaced on this one response by one that feeds each piece here before handing it
        on, so a hostile count is refused before the SDK reads it.
        """
        inner: Callable[..., AsyncGenerator[bytes, None]] = response.aiter_bytes

        async def aiter_bytes(chunk_size: int | None = None) -> AsyncIterator[bytes]:
            async with contextlib.aclosing(inner(chunk_size)) as pieces:
                async for piece in pieces:
                    self.feed(piece)
                    yield piece

        setattr(response, "aiter_bytes", aiter_bytes)  # noqa: B010 (assigning a method)

    def feed(self, chunk: bytes) -> None:
        """Take the next piece of the body; check each event it completes.

        Raises:
            ModelError: An event's usage is not an object, or a count in it is not a token
                count (not transient: the same server gives the same answer).
        """
        self.read = True
        for line in chunk.splitlines(keepends=True):  # as the SDK's decoder cuts events
            self._pending += line
            if self._pending.endswith(_EVENT_ENDS):
                lines, self._pending = bytes(self._pending).splitlines(), bytearray()
                for raw in lines:
                    self._line(raw)

    def _line(self, raw: bytes) -> None:
        """One line of the event stream: a ``data:`` field kept, a blank line ends an event."""
        if not raw:
            data, self._data = "\n".join(self._data), []
            if data:
                self._check(data)
            return
        line = raw.decode("utf-8", errors="replace")  # the SDK refuses what is not UTF-8
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)

    def _check(self, data: str) -> None:
        """Check the usage of one event's data (what is not a JSON object the SDK refuses)."""
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            return
        event_type = event.get("type") if isinstance(event, dict) else None
        if event_type == "message_start":
            holder = event.get("message")
        elif event_type == "message_delta":
            holder = event
        else:
            return
        usage = holder.get("usage") if isinstance(holder, dict) else None
        if usage is None:
            return
        if not isinstance(usage, dict):  # the words of a non-streamed answer's refusal
            raise ModelError(f"usage is {kind_of(usage)}, not an object", model_id=self.model_id)
        for name in USAGE_COUNTS:
            self._count(name, usage.get(name))

    def _count(self, name: str, value: object) -> None:
        """Refuse ``value`` (usage's ``name``) unless ``None`` or a token count."""
        if value is None:
            return
        where = f"the server at {self.server} streamed usage.{name}"
        if isinstance(value, bool) or not isinstance(value, int):
            shown = _shown(value)
            what = f"{kind_of(value)} {shown}" if shown else kind_of(value)
            raise ModelError(f"{where} as {what}, not an integer", model_id=self.model_id)
        if not 0 <= value <= MAX_REPORTED_TOKENS:
            raise ModelError(
                f"{where}={_shown(value)}, outside 0..{MAX_REPORTED_TOKENS}",
                model_id=self.model_id,
            )
