"""What a function tool's failure becomes: one bounded, labelled error for the model.

A tool is the user's code, and may raise anything: a library's ``sys.exit`` (`SystemExit`),
`GeneratorExit`, `asyncio.CancelledError` of its own, `StopIteration`,
an exception whose ``__str__`` raises or whose message is 5 MB of text or holds a lone
surrogate. None of it may stop the run or fail the task with a raw Python error: each is a
tool error the model hears and the ledger records, at most `MAX_FAILURE_CHARS` characters
and valid UTF-8. A plain tool's thread hands what it raised back as a value (`Raised`),
never into the event loop (where a `SystemExit` would stop it, and a `StopIteration` cannot
be set on a future at all). Only a `KeyboardInterrupt` goes on (`goes_on`): it is taken for
the person's Ctrl-C, which stops the run, left interrupted and resumable.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from clearance._core.reasons import bounded_reason

__all__ = [
    "Raised",
    "as_text",
    "caught",
    "described",
    "goes_on",
    "tool_error_text",
    "utf8_text",
]


@dataclass(frozen=True, slots=True)
class Raised:
    """What a plain tool's thread raised, handed back as a value (see `caught`)."""

    error: BaseException


def caught(function: Callable[[], Any], *, convert: bool = True) -> Callable[[], Any]:
    """``function`` made to return what it raises as `Raised`, never raise it (but Ctrl-C).

    With ``convert``, its value is made text in the thread too (`as_text`), unless it is
    awaitable (awaited on the event loop by the caller).
    """

    def called() -> Any:
        try:
            value = function()
            if convert and not _awaitable(value):
                return as_text(value)
            return value
        except KeyboardInterrupt:  # the caller takes it as Ctrl-C (see `goes_on`)
            raise
        except BaseException as exc:  # every other kind: the caller makes it a tool error
            return Raised(exc)

    return called


def _awaitable(value: Any) -> bool:
    return hasattr(type(value), "__await__")


def as_text(value: Any) -> str:
    """A tool's return value as the text the model gets: text as is, anything else as JSON.

    A ``str`` subclass becomes a plain ``str`` (its own ``len`` or ``splitlines`` could lie
    to the offloading thresholds).

    Raises:
        Exception: The value cannot be made JSON (nested too deeply, a ``__str__`` that
            raises).
    """
    if isinstance(value, str):
        return str.__str__(value)
    return json.dumps(value, default=str)


def tool_error_text(name: str, exc: BaseException) -> str:
    """The error the model gets for tool ``name`` raising ``exc``: one bounded line's worth.

    An ordinary exception with a message is ``error: <message>``; any other (a `SystemExit`,
    no message, a message that cannot be read) names the tool and the exception's type.
    Cut at `MAX_FAILURE_CHARS` characters; text that is not valid UTF-8 gets ``?`` instead.
    """
    kind = type(exc).__name__
    message = _message(exc)
    if message is None:
        text = f"the tool {name!r} raised {kind} (its message cannot be shown)"
    elif message.strip() and isinstance(exc, Exception):
        text = message
    else:
        text = f"the tool {name!r} raised {kind}" + (f": {message}" if message.strip() else "")
    return utf8_text(bounded_reason(f"error: {text}"))


def utf8_text(text: str) -> str:
    """``text`` with what is not valid UTF-8 (a lone surrogate) replaced by ``?``.

    A lone surrogate (as a file name read with surrogate escapes holds) is text no ledger,
    offloading or prompt accepts.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def goes_on(exc: BaseException) -> bool:
    """Whether ``exc``, raised through a tool call, stops the run instead of failing the call.

    `KeyboardInterrupt` is the person's Ctrl-C (the run stops, left interrupted and
    resumable), and `asyncio.CancelledError` while the running task is being cancelled is
    the run's own cancellation (Ctrl-C, a sibling's failure). A tool's own
    `asyncio.CancelledError` (its task not being cancelled) is its failure, like any other.
    """
    if isinstance(exc, KeyboardInterrupt):
        return True
    task = asyncio.current_task()
    cancelling = task is not None and task.cancelling() > 0
    return isinstance(exc, asyncio.CancelledError) and cancelling


def described(exc: BaseException) -> str:
    """``Type: message`` of ``exc``, bounded, valid UTF-8, whatever its ``__str__`` does."""
    kind, message = type(exc).__name__, _message(exc)
    if message is None:
        text = f"{kind} (its message cannot be shown)"
    else:
        text = f"{kind}: {message}" if message.strip() else kind
    return utf8_text(bounded_reason(text))


def _message(exc: BaseException) -> str | None:
    """``str(exc)`` as plain text, or ``None`` when its own ``__str__`` fails."""
    try:
        return str.__str__(str(exc))
    except BaseException:  # its own __str__ raised (or returned no text)
        return None
