r"""`NulText`: a text column that keeps a NUL character on every database.

A model's answer, a tool's result or an error may hold NUL (``\x00``): it is untrusted text,
and it reaches the agents that depend on it byte for byte. SQLite stores it; PostgreSQL's
``text`` cannot (psycopg refuses the value, and the run failed with records missing). So on
PostgreSQL a value that holds NUL is stored escaped, behind a mark, and read back as it was;
its digests are over the original text, which is what every read returns. On SQLite, and for
any value without NUL that does not start with the mark, the column stores the text as it is:
rows written before `NulText` read back unchanged, and so does every ordinary value.

The escaped form is `MARK` followed by the text with each backslash doubled and each NUL
written ``\0``. A value that starts with `MARK` is escaped too, so that reading is lossless
whatever the text; a stored value after the mark that is not such an escaped form (a row
written before `NulText`) reads as it is stored.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import Dialect, Text
from sqlalchemy.types import TypeDecorator

__all__ = ["MARK", "NulText", "escaped", "unescaped"]

MARK = "\uffffnul\uffff"
"""What starts the escaped form of a value on PostgreSQL (U+FFFF is a noncharacter)."""

_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)


def escaped(value: str) -> str:
    """``value`` as PostgreSQL's ``text`` can hold it: as it is, or `MARK` and escaped."""
    if "\x00" not in value and not value.startswith(MARK):
        return value
    return MARK + value.replace("\\", "\\\\").replace("\x00", "\\0")


def unescaped(stored: str) -> str:
    """The text `escaped` gave ``stored`` for; ``stored`` itself if it is no escaped form."""
    if not stored.startswith(MARK):
        return stored
    well_formed = True

    def one(match: re.Match[str]) -> str:
        nonlocal well_formed
        after = match.group(1)
        if after == "0":
            return "\x00"
        if after == "\\":
            return "\\"
        well_formed = False
        return match.group(0)

    text = _ESCAPE.sub(one, stored[len(MARK) :])
    return text if well_formed else stored


class NulText(TypeDecorator[str]):
    """``Text`` that holds NUL on PostgreSQL too (`escaped` there); as it is on SQLite.

    The column's DDL is ``Text``'s: a database made before reads and writes as it did.
    """

    impl = Text
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name == "sqlite":
            return super().bind_processor(dialect)
        return _bind

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name == "sqlite":
            return super().result_processor(dialect, coltype)
        return _result


def _bind(value: Any) -> Any:
    return escaped(value) if isinstance(value, str) else value


def _result(value: Any) -> Any:
    return unescaped(value) if isinstance(value, str) else value
