"""What in a stored row of the run ledger no write puts there: a row edited by hand.

SQLite keeps whatever a row is given, whatever its column's type: bytes where text belongs,
text where a count belongs, a time that is not one. The record constructors of
`clearance._state.ledger.records` ask these checks first, so every reader (``runs``,
``inspect``, ``verify``, ``resume``, the run page) gets a `MalformedRecord` naming the record
and the field, never a ``TypeError`` deep inside it. Each check returns what is wrong, worded
to follow the record's name (``"its created_at is not a time ('yesterday')"``), or ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Row

from clearance._core.reasons import bounded_reason
from clearance._core.vocabulary import RecordKind
from clearance._state.db.types import Unreadable

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "chain_problem",
    "field_problems",
    "flag_problem",
    "graph_problem",
    "record_name",
    "row_problem",
    "shape_problem",
    "usage_problem",
]


def record_name(value: object) -> str:
    """An id read from a row as an error names it: text as it is, anything else by ``repr``.

    Cut after 100 characters: a row edited by hand may hold a megabyte of id.
    """
    return bounded_reason(value if type(value) is str else repr(value), 100)


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _is_seconds(value: object) -> bool:
    if type(value) is int:
        return value >= 0
    return type(value) is float and math.isfinite(value) and value >= 0


_FLAGS = (0, 1)
"""What an integer column holding a boolean holds (``calls.pending``, ``is_error``...)."""


def _field_problem(declared: str, name: str, value: object) -> str | None:
    """What is wrong with a record's field of declared type ``declared``, if anything."""
    if isinstance(value, Unreadable):
        return f"its {name} {value.problem}"
    optional = declared.endswith(" | None")
    if optional and value is None:
        return None
    typename = declared.removesuffix(" | None")
    if typename == "str" and type(value) is not str:
        return f"its {name} is not text"
    if typename == "datetime" and not isinstance(value, datetime):
        return f"its {name} is not a time"
    if typename == "int" and (type(value) is not int):
        return f"its {name} is not a whole number"
    if typename == "float" and not _is_seconds(value):
        return f"its {name} is not a finite number of seconds >= 0"
    return None


def field_problems(row: Row[Any], cls: type[DataclassInstance]) -> str | None:
    """What in ``row`` is not of its field's type in ``cls`` (text, time, number), if any.

    Each column of a field of ``cls`` is checked against the field's declared type (``str``,
    ``str | None``, ``datetime``, ``int``, ``float``); a column read as `Unreadable` (a
    time or JSON that is not one) is named with what is wrong with it.
    """
    columns = row._mapping
    for field in fields(cls):
        if field.name in columns and isinstance(field.type, str):
            problem = _field_problem(field.type, field.name, columns[field.name])
            if problem is not None:
                return problem
    return None


def usage_problem(row: Row[Any]) -> str | None:
    """What in a row's usage columns is not a whole number >= 0 (or a flag), if anything."""
    columns = row._mapping
    for name in ("requests", "prompt_tokens", "completion_tokens"):
        if not _is_count(columns[name]):
            return f"its {name} is not a whole number >= 0"
    cached = columns.get("cached_prompt_tokens")
    if cached is not None and not _is_count(cached):
        return "its cached_prompt_tokens is not a whole number >= 0"
    counted = columns.get("usage_counted")
    if counted is not None and counted not in _FLAGS:
        return "its usage_counted is not 0 or 1"
    return None


def flag_problem(row: Row[Any], name: str) -> str | None:
    """What is wrong with an integer column holding a boolean (0 or 1), if anything."""
    value = row._mapping[name]
    if isinstance(value, bool) or (type(value) is int and value in _FLAGS):
        return None
    return f"its {name} is not 0 or 1"


def shape_problem(messages: Any, manifest: Any) -> str | None:
    """What in a call's messages or manifest is not of the shape the ledger writes, if any."""
    if isinstance(messages, Unreadable):
        return f"its messages {messages.problem}"
    if isinstance(manifest, Unreadable):
        return f"its manifest {manifest.problem}"
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in messages
    ):
        return "its messages are not a list of {role, content} texts"
    if not isinstance(manifest, dict):
        return "its manifest is not an object"
    items = manifest.get("items", [])
    if not isinstance(items, list) or not all(
        isinstance(i, dict)
        and isinstance(i.get("origin"), str)
        and isinstance(i.get("title"), str)
        and type(i.get("tokens")) is int
        for i in items
    ):
        return "its manifest's items are not a list of {origin, title, tokens}"
    for key, kinds in (("subject", str), ("agent", str), ("prompt_sha256", str),
                       ("total_tokens", int), ("clearance", (dict, type(None)))):  # fmt: skip
        if key in manifest and (
            not isinstance(manifest[key], kinds) or isinstance(manifest[key], bool)
        ):
            return f"its manifest's {key} is not of its type"
    return None


def chain_problem(chain: Any) -> str | None:
    """What in a tool call's delegation chain is not `DelegationChain.to_dict`'s shape, if any.

    ``None`` (not a ``delegate`` call) is fine; otherwise an object with an integer
    ``max_depth`` and ``steps``, a list of objects each with a text ``from`` and ``to``.
    """
    if chain is None:
        return None
    steps = chain.get("steps") if isinstance(chain, dict) else None
    if not (
        isinstance(chain, dict)
        and type(chain.get("max_depth")) is int
        and isinstance(steps, list)
        and all(
            isinstance(s, dict) and type(s.get("from")) is str and type(s.get("to")) is str
            for s in steps
        )
    ):
        return "its chain is not a delegation chain ({max_depth, steps: [{from, to}]})"
    return None


def graph_problem(graph: Any) -> str | None:
    """What in a run's recorded graph is not of the shape `TaskGraph.to_dict` writes, if any.

    ``None`` (not planned yet) is fine; otherwise a list of tasks, each an object with a
    text ``id`` and, where given, text ``title``, ``description``, ``assignee`` and
    ``memory_scope`` and a list of task ids ``depends_on``: what the readers of a graph take
    from it (a task without a row reads from its graph entry).
    """
    if graph is None:
        return None
    if not isinstance(graph, list) or not all(isinstance(t, dict) for t in graph):
        return "its graph is not a list of tasks"
    for position, task in enumerate(graph, 1):
        if type(task.get("id")) is not str:
            return f"its graph's task {position} has no text id"
        for key in ("title", "description", "assignee", "memory_scope"):
            if key in task and type(task[key]) is not str:
                return f"its graph's task {position} has a {key} that is not text"
        depends_on = task.get("depends_on", [])
        if not isinstance(depends_on, list) or not all(type(d) is str for d in depends_on):
            return f"its graph's task {position} has a depends_on that is not a list of task ids"
    return None


def row_problem(kind: str, row: Mapping[str, Any]) -> str | None:
    """What in a stored row of any table no write puts there (bytes, an `Unreadable`), if any.

    For rows read as they are stored (``verify``'s and ``resume``'s chain check digests
    them), after their record's own checks: a kind that has no record class (a task's
    reasons) and the columns no record holds (a run's owner, lease and key id) are checked
    here. A column that may hold bytes is a text column (a key, an integer primary key or a
    time never reads as bytes), so bytes are named as not text.

    Args:
        kind: The chain kind of the row (``"run"``, ``"task_reason"``, ``"message"``...).
        row: The row's columns.

    Returns:
        ``"<kind> <id> of run <run> is malformed: its <column> ..."``, or ``None``.
    """
    for name, value in row.items():
        if isinstance(value, Unreadable):
            problem = f"its {name} {value.problem}"
        elif isinstance(value, (bytes, bytearray, memoryview)):
            problem = f"its {name} is not text"  # every column bytes could be in is text
        else:
            continue
        return f"{_row_name(kind, row)} is malformed: {problem}"
    return None


def _row_name(kind: str, row: Mapping[str, Any]) -> str:
    """How an error names a stored row: ``run <id>``, ``message <id> of run <id>``..."""
    run = f"run {record_name(row.get('run_id'))}"
    if kind == RecordKind.RUN:
        return run
    ident = next((row[k] for k in _ID_COLUMNS if k in row), row.get("ordinal"))
    return f"{kind.replace('_', ' ')} {record_name(ident)} of {run}"


_ID_COLUMNS = ("call_id", "tool_call_id", "event_id", "message_id", "task_id")
