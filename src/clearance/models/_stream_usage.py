"""A streamed answer's usage, checked as the server sent it (OpenAI and Anthropic alike).

The SDKs convert a streamed event's fields as they parse them: the ``anthropic`` SDK
always, the ``openai`` one when a chunk has the shape it expects (``"7"`` becomes 7, ``5.0``
becomes 5, ``true`` becomes 1), so the usage they hand on holds counts the server never sent
as counts, and checking it cannot tell. `RawStreamUsage` reads the bytes the SDK's event
decoder reads (the response's decoded body, through its ``aiter_bytes``), splits them into
server-sent events as that decoder does, and checks the usage of
each event before the SDK sees it: an object (or absent, or ``null``), each of its token
counts (`UsageShape`) absent, ``null`` or a whole number in ``0..MAX_REPORTED_TOKENS``, as a
non-streamed answer's are. With every count as the server sent it, the usage the SDK hands
on is the server's own, and the provider checks it as a whole (cached tokens within the
prompt...). An event is decoded a second time only when its text could hold a usage that
is not null (``usage`` but in ``"usage": null``, or a backslash-u escape, which could spell
it).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from clearance._core.errors import ModelError
from clearance.models._base import MAX_REPORTED_TOKENS, kind_of

__all__ = ["ANTHROPIC_USAGE", "OPENAI_USAGE", "RawStreamUsage", "UsageShape"]


@dataclass(frozen=True)
class UsageShape:
    """Where a provider's streamed events carry a usage, and the token counts in it.

    Attributes:
        holders: ``(event type, keys)`` pairs: an event whose ``type`` is the first (any
            event, for ``None``) holds its usage at the keys' path (``("message", "usage")``).
        counts: The paths of the token counts within a usage; a path through a value that is
            not an object ends there (a non-streamed answer's is read the same way).
        last_data: An event whose data starts with this ends the stream for the SDK
            (OpenAI's ``[DONE]``): what follows is never parsed, so never checked.
    """

    holders: tuple[tuple[str | None, tuple[str, ...]], ...]
    counts: tuple[tuple[str, ...], ...]
    last_data: str | None = None


ANTHROPIC_USAGE = UsageShape(
    holders=(("message_start", ("message", "usage")), ("message_delta", ("usage",))),
    counts=(
        ("input_tokens",),
        ("output_tokens",),
        ("cache_creation_input_tokens",),
        ("cache_read_input_tokens",),
    ),
)
"""The Messages API: ``message_start``'s ``message.usage`` and ``message_delta``'s ``usage``."""

OPENAI_USAGE = UsageShape(
    holders=((None, ("usage",)),),
    counts=(
        ("prompt_tokens",),
        ("completion_tokens",),
        ("prompt_tokens_details", "cached_tokens"),
        ("total_tokens",),
    ),
    last_data="[DONE]",
)
"""Chat completions: any chunk's ``usage`` (``stream_options.include_usage``)."""


def _shown(value: object) -> str:
    """``value`` as it is named in an error: short and on one line."""
    text = repr(value) if isinstance(value, str | int | float) else ""
    return text if len(text) <= 40 else f"{text[:37]}..."


class RawStreamUsage:
    """Checks each streamed event's usage in the raw body, before the SDK converts it.

    Args:
        shape: Where the provider's events carry a usage (`ANTHROPIC_USAGE`, `OPENAI_USAGE`).
        server: The server's URL, named in errors.
        model_id: The ``"provider:name"`` id, for errors.
    """

    def __init__(self, shape: UsageShape, *, server: str, model_id: str) -> None:
        self.shape, self.server, self.model_id = shape, server, model_id
        self.read = False  # whether the body was read through `watch` at all
        self._done = False  # the SDK's last event seen: the rest is never parsed
        self._pending = bytearray()  # a line not ended yet
        self._after_cr = False  # the last piece ended with CR: an LF next is part of it
        self._data: list[str] = []
        self._keys = {keys[-1] for _, keys in shape.holders}

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

        Lines end at CR, LF or CRLF (one split across two pieces too), and a blank line ends
        an event, as both SDKs' decoders read them. The ``openai`` decoder hands on each
        event at its blank line, the ``anthropic`` one a run of events once it ends in a
        double line-end (or the body ends): checking each at its blank line is never late.

        Raises:
            ModelError: An event's usage is not an object, or a count in it is not a token
                count (not transient: the same server gives the same answer).
        """
        self.read = True
        if self._done or not chunk:
            return
        if self._after_cr and chunk[:1] == b"\n":  # the LF of a CRLF cut between pieces
            chunk = chunk[1:]
        self._after_cr = chunk.endswith(b"\r")
        for line in chunk.splitlines(keepends=True):
            if not line.endswith((b"\n", b"\r")):  # the body's last piece ends mid-line
                self._pending += line
                continue
            if self._pending:
                line, self._pending = bytes(self._pending) + line, bytearray()
            self._line(line.rstrip(b"\r\n"))
            if self._done:
                return

    def _line(self, raw: bytes) -> None:
        """One line of the event stream: a ``data:`` field kept, a blank line ends an event."""
        if not raw:
            data, self._data = "\n".join(self._data), []
            if data:
                self._event(data)
            return
        line = raw.decode("utf-8", errors="replace")  # the SDK refuses what is not UTF-8
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)

    def _event(self, data: str) -> None:
        """Check the usage of one event's data (what is not a JSON object the SDK refuses)."""
        last = self.shape.last_data
        if last is not None and data.startswith(last):
            self._done = True
            return
        if "\\u" not in data and all(_only_null(data, key) for key in self._keys):
            return  # no usage key, escaped or not, but a null one: nothing to check
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(event, dict):
            return
        for event_type, keys in self.shape.holders:
            if event_type is None or event.get("type") == event_type:
                self._usage(_at(event, keys))

    def _usage(self, usage: object) -> None:
        """Refuse ``usage`` unless absent, ``None`` or an object of token counts."""
        if usage is None:
            return
        if not isinstance(usage, dict):  # the words of a non-streamed answer's refusal
            raise ModelError(f"usage is {kind_of(usage)}, not an object", model_id=self.model_id)
        for path in self.shape.counts:
            self._count(".".join(path), _at(usage, path))

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


def _only_null(data: str, key: str) -> bool:
    """Whether each ``key`` in ``data`` (JSON, no backslash-u escape) is a key set to null.

    A ``"key": null`` (or ``"key":null``) holds one ``key``, and no two of them share one; so
    when they are as many as the ``key`` s, no other is anywhere: neither a key (an unescaped
    key is spelt as it is) with another value, nor text that would need decoding to tell.
    Honest servers send ``"usage": null`` in every chunk but the last.
    """
    hits = data.count(key)
    return not hits or hits == data.count(f'"{key}": null') + data.count(f'"{key}":null')


def _at(value: object, keys: tuple[str, ...]) -> object:
    """``value[keys[0]][keys[1]]...``; ``None`` where a step is absent or not an object."""
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value
