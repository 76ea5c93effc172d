"""Column types the stores share: aware UTC datetimes, and JSON serialized once.

`UTCDateTime` stores aware datetimes as UTC and reads them back aware (SQLite drops the
zone); `JSONText` marks text that is already JSON, stored as it is by `serialize_json`, the
engines' JSON serializer. `tolerant_columns` reads a table so that a time or JSON value no
write puts there (a row edited by hand) reads as `Unreadable` instead of failing the whole
query: the record built from the row names itself and the field (`MalformedRecord`), and a
listing keeps its other rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import JSON, ColumnElement, DateTime, Dialect, Table, type_coerce
from sqlalchemy.types import TypeDecorator

from clearance._core.clock import utc_iso_text
from clearance._core.errors import MalformedRecord

__all__ = [
    "JSONText",
    "UTCDateTime",
    "Unreadable",
    "canonical_json_text",
    "deserialize_json",
    "serialize_json",
    "tolerant_columns",
]


class UTCDateTime(TypeDecorator[datetime]):
    """Stores aware datetimes as UTC and reads them back aware (SQLite drops the zone).

    A naive datetime is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    # On SQLite each conversion is one call: the same text and values as the two methods
    # above chained with SQLAlchemy's ``DATETIME`` processors (``YYYY-MM-DD HH:MM:SS.ffffff``,
    # naive UTC), without the chain. Every other database goes through the methods above.

    def bind_processor(self, dialect: Dialect) -> Callable[[datetime | None], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        return _sqlite_time_text

    def result_processor(
        self, dialect: Dialect, coltype: object
    ) -> Callable[[Any], datetime | None] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        return _sqlite_time_value


def _sqlite_time_text(value: datetime | None) -> str | None:
    """An aware (or naive UTC) datetime as SQLite ``DATETIME`` text, naive UTC."""
    if value is None:
        return None
    if value.__class__ is datetime and value.tzinfo is UTC:  # the clock's: memoized
        return _utc_sqlite_text(value)
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(" ", "microseconds")


def _utc_sqlite_text(value: datetime) -> str:
    """`_sqlite_time_text` of an aware UTC datetime: cut from its memoized ISO text.

    ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` becomes ``YYYY-MM-DD HH:MM:SS.ffffff``: a run
    writes most times more than once, and digests each, so each is converted once.
    """
    text = utc_iso_text(value)
    return f"{text[:10]} {text[11:26]}"


def _sqlite_time_value(value: str | None) -> datetime | None:
    """SQLite ``DATETIME`` text as an aware UTC datetime.

    Raises:
        MalformedRecord: The column holds what no write puts there (a row edited by hand):
            text that is not a time (or one whose zone puts it past the calendar's ends), or
            a number or bytes.
    """
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        # A zone may put the time before the calendar's first day or after its last.
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (TypeError, ValueError, OverflowError):
        raise MalformedRecord(f"a record holds {_shown(value)} where a time belongs") from None


def _shown(value: object) -> str:
    """A stored value as an error quotes it: its ``repr``, cut to about 80 characters."""
    shown = value[:60] if isinstance(value, (str, bytes)) else value
    return f"{shown!r:.80}"


class JSONText(str):
    """Canonical JSON text (`canonical_json`): a ``JSON`` column stores it as it is.

    For a value serialized once for a digest and stored too (a call's messages and manifest,
    a run's graph); reading the column parses it like any other JSON value. The ledger's
    record digest splices it in as it is (`clearance._state.chain.payload_sha256`), which is
    the digest of the value read back only if the text is canonical.
    """

    __slots__ = ()


_ORJSON_PLAIN = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
"""orjson refuses (raises for) what the standard library's ``json`` refuses or writes otherwise:
dataclasses, dates and times, and subclasses of ``str``, ``int``, ``dict`` and ``list``."""


def deserialize_json(text: str | bytes) -> Any:
    """The engines' JSON deserializer: ``json.loads``, and a one-line error for what is not JSON.

    An SQLite ``JSON`` column holds any text: a row edited by hand (or by an attacker) may
    hold text that is not JSON, or JSON nested past the interpreter's stack. Reading it is
    a `MalformedRecord` that says so, which every command reports in one line (``verify`` as a
    finding), not a traceback.

    Raises:
        MalformedRecord: ``text`` is not JSON, or is nested too deeply to read.
    """
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        cause = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise _NotJSON(cause) from None


class _NotJSON(MalformedRecord):
    """`deserialize_json`'s error, with its cause for `Unreadable`."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"a record holds text that is not JSON ({cause})")
        self.cause = cause


class Unreadable:
    """What a tolerant column (`tolerant_columns`) reads in place of a value no write puts there.

    Attributes:
        problem: What is wrong, worded to follow the column's name: ``"is not a time
            ('yesterday')"``, ``"is not JSON (Expecting value: line 1 column 1 (char 0))"``.
    """

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def __repr__(self) -> str:
        return f"Unreadable({self.problem!r})"


class _TolerantTime(TypeDecorator[Any]):
    """`UTCDateTime`'s reading, with a value that is not a time read as `Unreadable`."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        process = UTCDateTime().result_processor(dialect, coltype)
        if process is None:
            return None

        def tolerant(value: Any) -> Any:
            try:
                return process(value)
            except (MalformedRecord, TypeError, ValueError, OverflowError, AssertionError):
                return Unreadable(f"is not a time ({_shown(value)})")

        return tolerant


class _TolerantJSON(TypeDecorator[Any]):
    """``JSON``, reading text that is not JSON as `Unreadable`."""

    impl = JSON
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        process = super().result_processor(dialect, coltype)
        if process is None:
            return None

        def tolerant(value: Any) -> Any:
            try:
                return process(value)
            except _NotJSON as exc:
                return Unreadable(f"is not JSON ({exc.cause})")
            except (MalformedRecord, TypeError, ValueError, RecursionError):
                return Unreadable(f"is not JSON ({_shown(value)})")

        return tolerant


def tolerant_columns(table: Table) -> list[ColumnElement[Any]]:
    """``table``'s columns to select, its times and JSON read tolerantly.

    A row whose time column holds what is not a time, or whose JSON column holds text that
    is not JSON (SQLite keeps whatever it is given: a row edited by hand), reads with an
    `Unreadable` in that column instead of raising out of the whole query: the reader names
    the record and the field, and a listing keeps the rows that are fine. Every other value
    reads as the table's own columns read it (on PostgreSQL, which refuses such values, the
    same values).

    Returns:
        One selectable per column, labelled with the column's name.
    """
    columns: list[ColumnElement[Any]] = []
    for column in table.c:
        if isinstance(column.type, UTCDateTime):
            columns.append(type_coerce(column, _TolerantTime()).label(column.name))
        elif isinstance(column.type, JSON):
            columns.append(type_coerce(column, _TolerantJSON()).label(column.name))
        else:
            columns.append(column)
    return columns


def serialize_json(value: Any) -> str:
    """The engines' JSON serializer: `JSONText` as it is, anything else as ``json.dumps`` would.

    Encoded by orjson, several times faster: compact and non-ASCII unescaped, so the text may
    differ from ``json.dumps``'s in spacing and escapes, never in the value read back. A
    value orjson cannot write as ``json.dumps`` would goes to ``json.dumps`` like before:
    what orjson refuses (lone surrogates, keys that are not strings, integers beyond 64 bits,
    the types `_ORJSON_PLAIN` passes through), and what its text does not read back equal
    (NaN and infinities, written ``null``; tuples; objects the standard library refuses,
    such as a UUID or an enum member). A value made only of plain JSON types (`_plain`)
    reads back equal and is not read back to check.

    Raises:
        TypeError: ``value`` holds something ``json.dumps`` cannot serialize.
    """
    kind = type(value)
    if kind is JSONText:
        # As a plain ``str``: ``sqlite3`` binds a subclass only after searching for an
        # adapter (see `clearance._state.db.sqlite`), which costs more than this copy.
        return str(value)
    try:
        text = orjson.dumps(value, option=_ORJSON_PLAIN)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value)
    if _plain(value) or orjson.loads(text) == value:
        return text.decode()
    return json.dumps(value)


def canonical_json_text(value: Any) -> JSONText | None:
    """``value`` as canonical `JSONText` (sorted keys, compact), or ``None`` if it has none.

    ``None`` when orjson refuses the value (see `serialize_json`) or when it is not made only
    of plain JSON types (`_plain`): a NaN orjson writes as ``null``, a tuple, an enum member.
    Such a value is stored by `serialize_json` as before, the standard library's way.
    """
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        return None
    return JSONText(text.decode()) if _plain(value) else None


def _plain(value: Any) -> bool:
    """Whether ``value`` (which orjson has written) holds only what both encoders write alike.

    That is dicts, lists, strings, integers, finite floats, booleans and ``None``, each of
    exactly that type (no tuple, no enum member, no subclass); orjson refused keys that are
    not strings and integers beyond 64 bits already. Walked without making an object:
    reading orjson's text back to compare it (the check for everything else) allocates the
    whole value again: several milliseconds for a 500-task graph, with the collections of
    the garbage collector that so many new objects set off.
    """
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        if kind is dict:
            extend(item.values())
        elif kind is list:
            extend(item)
        elif kind is not float or not math.isfinite(item):
            return False
    return True
