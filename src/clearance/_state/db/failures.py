"""How database failures are described: URLs with the password masked, one-line causes."""

from __future__ import annotations

import re

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

__all__ = ["failure_cause", "mask_url"]


def mask_url(url: str) -> str:
    """``url`` with any password replaced by ``***``, even when it does not parse."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (SQLAlchemyError, ValueError, TypeError):
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def failure_cause(exc: BaseException) -> str:
    """A one-line description of a database failure (never the SQL or its parameters)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        exc = exc.orig
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else 'no details'}"
