"""A streamed answer's events, read through an SDK: a malformed one named in one line.

The SDKs decode each server-sent event themselves and fail on a malformed one with whatever
their parsing raises (``JSONDecodeError`` for a ``data:`` line that is not JSON, an
``AttributeError`` or ``AssertionError`` for an event of the wrong shape or out of order),
naming neither the server nor the model. `checked_events` turns those into one `ModelError`
line naming the server and what was malformed, cut to a short printable excerpt, the API
key taken out. Only the SDK's own iteration is checked: an error in the code that consumes
each event (a stream listener's) is not mistaken for the server's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from clearance._core.errors import ModelError

__all__ = [
    "EXCERPT_CHARS", "MALFORMED", "checked_events", "described", "excerpt", "malformed_event",
]  # fmt: skip

EXCERPT_CHARS = 80
"""Most characters of a malformed event shown in an error (escaped, so it stays one line)."""

MALFORMED: tuple[type[Exception], ...] = (
    ValueError,  # JSONDecodeError, UnicodeDecodeError, pydantic's ValidationError
    TypeError,
    AttributeError,
    KeyError,
    IndexError,
    AssertionError,  # the Anthropic SDK's checks of the events' order
    RuntimeError,
)
"""What an SDK's parsing of an event raises when the event is malformed."""


def excerpt(text: str) -> str:
    """``text`` shown escaped (one printable line), cut to about `EXCERPT_CHARS` characters."""
    shown = repr(text[:EXCERPT_CHARS])
    if len(shown) > EXCERPT_CHARS + 2:
        return f"{shown[:EXCERPT_CHARS]}..."
    return f"{shown}..." if len(text) > EXCERPT_CHARS else shown


def malformed_event(server: str, what: str, *, model_id: str) -> ModelError:
    """The `ModelError` for a malformed event from ``server``: ``what`` names the problem."""
    return ModelError(
        f"the server at {server} streamed a malformed event: {what}", model_id=model_id
    )


def described(
    exc: Exception, *, server: str, model_id: str, redact: Callable[[str], str]
) -> ModelError:
    """The `ModelError` for ``exc``, raised by an SDK parsing an event from ``server``."""
    if isinstance(exc, json.JSONDecodeError):
        what = f"not JSON: {excerpt(redact(exc.doc))}"
    elif str(exc):
        what = f"{type(exc).__name__}: {excerpt(redact(str(exc)))}"
    else:
        what = f"an event out of order or of the wrong shape ({type(exc).__name__})"
    return malformed_event(redact(server), what, model_id=model_id)


async def checked_events(
    events: AsyncIterator[Any], *, server: str, model_id: str, redact: Callable[[str], str]
) -> AsyncIterator[Any]:
    """``events`` (an SDK's stream), a malformed event raised as one `ModelError` line.

    Args:
        events: The SDK's stream of parsed events.
        server: The server's base URL, named in the error.
        model_id: The ``"provider:name"`` id, for errors.
        redact: Takes the API key out of a text.

    Raises:
        ModelError: The SDK failed to parse an event (`MALFORMED`): not transient, the same
            server would answer the same. Its other errors (`ModelError` from the capped
            body, the SDK's own ``APIError``, timeouts) pass through unchanged.
    """
    iterator = aiter(events)
    while True:
        try:
            event = await anext(iterator)
        except StopAsyncIteration:
            return
        except MALFORMED as exc:
            raise described(exc, server=server, model_id=model_id, redact=redact) from exc
        yield event
