"""Failure reasons kept short: what reaches a prompt, the ledger or a terminal about a failure.

A failure's text can be anything an exception carried: a provider's error body, the repr of
a request holding a whole prompt. It is recorded with the task and shown to dependents that
proceed after failures and to the synthesis, so it is bounded where it is made.
"""

from __future__ import annotations

from clearance._core.errors import ClearanceError

__all__ = ["MAX_FAILURE_CHARS", "bounded_reason", "failure_reason"]

MAX_FAILURE_CHARS = 1000
"""Most characters of a failure reason (a longer one is cut, with a note of its length)."""


def bounded_reason(text: str, limit: int = MAX_FAILURE_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters, else its start and a note of the cut.

    The result has at most ``limit`` plus 40 characters.
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [cut: {len(text)} characters]"


def failure_reason(exc: BaseException) -> str:
    """Why a task failed, bounded: a Clearance error's message, else ``Type: message``."""
    text = str(exc) if isinstance(exc, ClearanceError) else f"{type(exc).__name__}: {exc}"
    return bounded_reason(text)
