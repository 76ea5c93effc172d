"""How database failures are described: URLs with the password masked, one-line causes."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from clearance._core.masking import mask_text, mask_url

__all__ = ["CommitUnknown", "commit_unknown", "failure_cause", "mask_url"]


def failure_cause(exc: BaseException) -> str:
    """A one-line description of a database failure (never the SQL or its parameters).

    A URL the driver quotes has its password and secret query values masked (`mask_text`).
    """
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {mask_text(lines[0]) if lines else 'no details'}"


class CommitUnknown(Exception):
    """The cause of a write's error when the connection was lost while it committed.

    The server may have committed the transaction before the connection went, or not:
    its writes must not be sent again as if they had not been (`commit_unknown`).
    """


def commit_unknown(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a write whose commit is unknown."""
    seen: BaseException | None = exc
    for _ in range(8):  # a short chain of causes
        if seen is None:
            return False
        if isinstance(seen, CommitUnknown):
            return True
        seen = seen.__cause__
    return False
