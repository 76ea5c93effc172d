"""The storage fast path: SQLAlchemy's compiled SQL run on the DB-API connection.

`DriverStatement` holds a Core statement compiled once for a dialect, and its parameters'
bind processors; `DatabaseBase` runs it on the thread's held connection (`HeldConnections`)
for a store's hottest statements. Only SQLAlchemy's execution machinery is skipped: the SQL
and the parameters are the ones SQLAlchemy would send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Dialect
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

__all__ = ["DriverStatement", "compiled_statement", "run_on_driver"]


class DriverStatement:
    """A Core statement compiled once by SQLAlchemy, for running on a DB-API connection.

    On an SQLite file a short statement costs SQLite a few microseconds, and SQLAlchemy's
    execution machinery (cache-key lookup, execution context, parameter construction, result
    object) several times that. For the hottest statements of a store, `DatabaseBase` runs
    this form on the thread's held connection (`HeldConnections`) instead: the SQL text is
    SQLAlchemy's own compilation for the engine's dialect, byte for byte what its execution
    would send, and each parameter goes through the type's own bind processor. Only the
    execution machinery is skipped. Positional paramstyles only (``qmark`` for ``sqlite3``).

    Args:
        statement: The statement, with named bound parameters.
        dialect: The engine's dialect.
        column_keys: For an ``INSERT``, the columns given (as SQLAlchemy compiles an
            execution with parameters for these keys); ``None`` for every column.

    Raises:
        ValueError: The statement is not a SQL statement (DDL, say), the dialect's
            paramstyle is not positional, or the statement has parameters rendered at
            execution time (``expanding`` or literal-execute ones).
    """

    __slots__ = ("_binds", "_names", "_processors", "_values", "sql")

    def __init__(
        self,
        statement: ClauseElement,
        dialect: Dialect,
        column_keys: Sequence[str] | None = None,
    ) -> None:
        # ``column_keys`` only when given: a DDL compiler takes no such argument.
        compiled = (
            statement.compile(dialect=dialect)
            if column_keys is None
            else statement.compile(dialect=dialect, column_keys=list(column_keys))
        )
        if not isinstance(compiled, SQLCompiler):
            raise ValueError(f"not a SQL statement: {type(statement).__name__}")
        names = compiled.positiontup
        if names is None:
            raise ValueError(f"paramstyle {dialect.paramstyle!r} is not positional")
        if compiled.literal_execute_params or compiled.post_compile_params:
            raise ValueError("the statement has parameters rendered at execution time")
        self.sql: str = compiled.string
        """The SQL text sent to the database."""
        binds = compiled.binds
        self._binds = tuple(
            (
                name,
                binds[name].value,
                binds[name].type.dialect_impl(dialect).bind_processor(dialect),
            )
            for name in names
        )
        self._names = tuple(names)
        # The values in order, in one call (``itemgetter`` of one name returns no tuple).
        self._values = (
            itemgetter(*names) if len(names) > 1 else lambda values: tuple(values[n] for n in names)
        )
        self._processors = tuple(
            (i, process) for i, (_, _, process) in enumerate(self._binds) if process is not None
        )

    def parameters(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for ``values``, each through its bind processor.

        Args:
            values: Values by bound name; a name missing takes the value the statement
                bound, as SQLAlchemy's execution does.

        Returns:
            One value per ``?`` of `sql`, in order.
        """
        try:
            out = list(self._values(values))
        except KeyError:
            out = [values.get(name, default) for name, default, _ in self._binds]
        for i, process in self._processors:
            out[i] = process(out[i])
        return tuple(out)

    def parameters_many(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """`parameters` of each of ``rows``, in order, for ``executemany``.

        Column by column: the values of all rows are taken at once, and each bind processor
        is mapped over its column, so no Python function runs per row (but the processors).
        """
        try:
            values = list(map(self._values, rows))
        except KeyError:  # a row leaves a name out: each row the slow way
            return [self.parameters(row) for row in rows]
        if not self._processors or not values:
            return values
        columns: list[Any] = list(zip(*values, strict=True))
        for i, process in self._processors:
            columns[i] = map(process, columns[i])
        return list(zip(*columns, strict=True))


_COMPILED: dict[tuple[Any, ...], tuple[ClauseElement, DriverStatement | None]] = {}
"""`compiled_statement`'s cache: the statement (kept alive, so its ``id`` stays its own) and
its compiled form, or ``None`` when it has none."""


def compiled_statement(
    statement: ClauseElement, dialect: Dialect, column_keys: Sequence[str] | None = None
) -> DriverStatement | None:
    """The `DriverStatement` of ``statement``, compiled once per process for this kind of dialect.

    SQLAlchemy caches compiled statements per engine (its cache key holds the dialect
    object), so each store opened anew compiled its statements again: about 3 ms of every
    run with a ledger. This cache is keyed by what the compilation depends on: the statement, the
    dialect's class, paramstyle, server version and JSON serializer, and ``column_keys``.

    Returns:
        The compiled statement, or ``None`` if it cannot run as one (`DriverStatement`
        raised ``ValueError``, or SQLAlchemy could not compile it).
    """
    key = (
        id(statement),
        type(dialect),
        dialect.paramstyle,
        dialect.server_version_info,
        getattr(dialect, "_json_serializer", None),
        None if column_keys is None else tuple(column_keys),
    )
    found = _COMPILED.get(key)
    if found is not None and found[0] is statement:
        return found[1]
    driver: DriverStatement | None
    try:
        driver = DriverStatement(statement, dialect, column_keys)
    except (ValueError, SQLAlchemyError):
        driver = None
    _COMPILED[key] = (statement, driver)
    return driver


def run_on_driver(conn: Connection, sql: str, parameters: Any = (), *, many: bool = False) -> Any:
    """Run ``sql`` on the DB-API connection under ``conn``, in ``conn``'s transaction.

    For statements SQLAlchemy would cost several times what the database does (a
    `DriverStatement`'s SQL, a short fixed query), on a driver whose connections execute
    statements themselves (``sqlite3``).

    Args:
        conn: The connection whose transaction the statement joins.
        sql: The SQL text, in the driver's paramstyle.
        parameters: Its parameters; with ``many``, a sequence of them.
        many: Run it once per parameters given (``executemany``).

    Returns:
        The driver's cursor (the caller reads it and closes it).

    Raises:
        DBAPIError: The driver failed; its error wrapped as SQLAlchemy wraps its own
            (parameters hidden), so the store names the operation as for any other failure.
    """
    dbapi = conn.connection.driver_connection
    assert dbapi is not None
    error = conn.dialect.loaded_dbapi.Error
    try:
        return dbapi.executemany(sql, parameters) if many else dbapi.execute(sql, parameters)
    except error as exc:
        raise DBAPIError.instance(sql, None, exc, error, hide_parameters=True) from exc
