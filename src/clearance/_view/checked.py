"""The recorded values the run page computes with, checked first.

SQLite keeps whatever a row is given, whatever its column's type, so a ledger edited by hand
may hold a token count that is text or negative, a latency that is text or infinite, or
bytes (a BLOB) where text belongs. The page sums the counts, lays the latencies out on its
timeline, puts ids into JSON and splits subjects: a record whose values are not of their
kind is a `MalformedRecord` naming the record and the field (one line on the command line, a
one-line ``500`` from ``serve``), never a ``TypeError`` out of a template. A run's totals are
shown in the list of runs only when they are whole numbers, so one edited run does not take
the list down (its ``verify`` verdict says what is wrong with it).
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import TYPE_CHECKING, TypeVar

from clearance._core.errors import MalformedRecord
from clearance._state.ledger import CallRecord, RunRecord

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["checked", "checked_call", "is_count", "run_tokens"]

_R = TypeVar("_R", bound="DataclassInstance")


def is_count(value: object) -> bool:
    """Whether ``value`` is a whole number >= 0 (a token count): an ``int``, not a ``bool``."""
    return type(value) is int and value >= 0


def _is_seconds(value: object) -> bool:
    """Whether ``value`` is a finite number of seconds >= 0 (an ``int`` or a ``float``)."""
    if type(value) is int:
        return value >= 0
    return type(value) is float and math.isfinite(value) and value >= 0


def checked(record: _R, what: str) -> _R:
    """``record`` itself, once each of its text fields is known to hold text.

    A field declared ``str`` must hold a ``str``; one declared ``str | None``, a ``str`` or
    ``None``. Other fields are left to the ledger's reads (JSON shapes, times).

    Args:
        record: A record of the ledger (`RunRecord`, `TaskRecord`, `CallRecord`...).
        what: How the error names it (``"task a of run r"``).

    Returns:
        The same record.

    Raises:
        MalformedRecord: A text field holds something else (bytes, a number).
    """
    for field in fields(record):
        value = getattr(record, field.name)
        if (field.type == "str" and type(value) is not str) or (
            field.type == "str | None" and value is not None and type(value) is not str
        ):
            raise MalformedRecord(f"{what} is malformed: its {field.name} is not text")
    return record


def checked_call(call: CallRecord) -> CallRecord:
    """``call`` itself, once its text, token counts and latency are known to be of their kind.

    Returns:
        The same record.

    Raises:
        MalformedRecord: A text field is not text (`checked`), a token count is not a whole
            number >= 0, or ``latency_s`` is not a finite number of seconds >= 0 (the
            message names the call and the field).
    """
    what = f"call {call.call_id!s}"
    checked(call, what)
    usage = call.usage
    for name, value in (
        ("prompt_tokens", usage.prompt_tokens),
        ("completion_tokens", usage.completion_tokens),
    ):
        if not is_count(value):
            raise MalformedRecord(f"{what} is malformed: its {name} is not a whole number >= 0")
    if not _is_seconds(call.latency_s):
        raise MalformedRecord(
            f"{what} is malformed: its latency_s is not a finite number of seconds >= 0"
        )
    return call


def run_tokens(run: RunRecord) -> int | None:
    """A finished run's prompt plus completion tokens as recorded, or ``None``.

    ``None`` while the run is going (its total is written when it finishes; until then it
    would read 0), or when either count is not a whole number >= 0 (a row edited by hand).
    """
    counts = (run.usage.prompt_tokens, run.usage.completion_tokens)
    if run.finished_at is None or not all(is_count(c) for c in counts):
        return None
    return counts[0] + counts[1]
