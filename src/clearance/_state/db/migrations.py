"""Ordered schema migrations, each declaring its tables and columns once.

The schema of a store is versioned the way simonw's ``llm`` does it: an ordered list of
migration functions (migration ``i``, 1-based, brings a database to version ``i``) and a
table recording which of them a database has had. A migration declares its change on a
`SchemaChange` (`SchemaChange.create_table`, `SchemaChange.add_column`,
`SchemaChange.drop_index`, `SchemaChange.execute`); the same declaration both upgrades a
database and builds the model the code queries with (`Schema.metadata`), so a table or column
is defined in exactly one place: the migration that made it. Adding a column is one new migration::

    @LEDGER_SCHEMA.migration
    def m007_cached_prompt_tokens(change: SchemaChange) -> None:
        change.add_column("calls", Column("cached_prompt_tokens", Integer, server_default="0"))

A migration is frozen once released: a later change is a new migration, never an edit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from functools import cached_property
from typing import Any

from sqlalchemy import Column, Integer, MetaData, Select, Table, func, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateColumn, SchemaItem

from clearance._state.db.fastpath import compiled_statement, run_on_driver
from clearance._state.db.types import UTCDateTime

__all__ = ["Migration", "Schema", "SchemaChange", "version_table"]


def version_table(name: str, metadata: MetaData | None = None) -> Table:
    """A table recording which migrations a database has had (``version``, ``applied_at``)."""
    return Table(
        name,
        MetaData() if metadata is None else metadata,
        Column("version", Integer, primary_key=True, autoincrement=False),
        Column("applied_at", UTCDateTime, nullable=False),
    )


def lock_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name`` (PostgreSQL migrations)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class SchemaChange:
    """What one migration changes: declared on the model, and applied when connected.

    Args:
        metadata: The model as earlier migrations left it; this migration's tables and
            columns are added to it.
        conn: The connection of the migration transaction, or ``None`` to build the model
            only (nothing is sent to a database).
    """

    def __init__(self, metadata: MetaData, conn: Connection | None) -> None:
        self.metadata = metadata
        self._conn = conn

    @property
    def dialect(self) -> str | None:
        """The database's dialect name when applying (``"sqlite"``...), else ``None``."""
        return None if self._conn is None else self._conn.dialect.name

    def create_table(self, name: str, *items: SchemaItem, checkfirst: bool = False) -> Table:
        """Define table ``name`` (columns, indexes, constraints) and create it.

        Args:
            name: The table's name.
            *items: Its columns, indexes and constraints, as for `sqlalchemy.Table`.
            checkfirst: Create it only if missing (a database made before versioning).

        Returns:
            The table of the model.
        """
        table = Table(name, self.metadata, *items)
        if self._conn is not None:
            table.create(self._conn, checkfirst=checkfirst)
        return table

    def add_column(self, table: str, column: Column[object], *, checkfirst: bool = False) -> None:
        """Add ``column`` to ``table`` (``ALTER TABLE ... ADD COLUMN``).

        The column's DDL is SQLAlchemy's for the database's dialect (type, ``NOT NULL``,
        ``server_default``); a ``NOT NULL`` column needs a ``server_default`` for the rows
        already there. ``checkfirst``: add it only if missing (a table a version-less
        database already has in its latest form).
        """
        model = self.metadata.tables[table]
        model.append_column(column)
        if self._conn is None:
            return
        if checkfirst and column.name in {
            c["name"] for c in inspect(self._conn).get_columns(table)
        }:
            return
        dialect = self._conn.dialect
        spec = CreateColumn(column).compile(dialect=dialect)
        quoted = dialect.identifier_preparer.format_table(model)
        self._conn.exec_driver_sql(f"ALTER TABLE {quoted} ADD COLUMN {spec}")

    def drop_index(self, table: str, name: str) -> None:
        """Drop index ``name`` of ``table`` (``DROP INDEX``) and remove it from the model.

        A database without the index (dropped by hand) is left as it is.

        Raises:
            KeyError: The model of ``table`` has no index ``name``.
        """
        model = self.metadata.tables[table]
        found = [index for index in model.indexes if index.name == name]
        if not found:
            raise KeyError(f"table {table!r} has no index {name!r}")
        model.indexes.discard(found[0])
        if self._conn is not None:
            found[0].drop(self._conn, checkfirst=True)

    def execute(self, sql: str) -> None:
        """Run ``sql`` when applying (DDL SQLAlchemy does not model: a virtual table...)."""
        if self._conn is not None:
            self._conn.exec_driver_sql(sql)


Migration = Callable[[SchemaChange], None]
"""One schema change, declared on a `SchemaChange`."""


class Schema:
    """A store's ordered migrations, the model they build and the table of versions applied.

    Args:
        versions: Name of the table recording the versions a database has had (one per
            kind of store, since several may share a database).
    """

    def __init__(self, versions: str) -> None:
        self.versions = version_table(versions)
        self._migrations: list[Migration] = []

    def migration(self, function: Migration) -> Migration:
        """Append ``function`` as the next migration (a decorator); order is version order.

        Raises:
            RuntimeError: The model was already built from the migrations.
        """
        if "metadata" in self.__dict__:
            raise RuntimeError("a migration was added after the schema's model was built")
        self._migrations.append(function)
        return function

    @property
    def latest(self) -> int:
        """The schema version the migrations bring a database to."""
        return len(self._migrations)

    @cached_property
    def metadata(self) -> MetaData:
        """The model of the latest version, built from every migration's declarations."""
        return self._model(self.latest)

    def _model(self, version: int) -> MetaData:
        metadata = MetaData()
        for migration in self._migrations[:version]:
            migration(SchemaChange(metadata, None))
        return metadata

    def current_version(self, conn: Connection) -> int:
        """The version a database has (0 when it has no table of versions)."""
        # Compiled once per process (`compiled_statement`), not once per engine opened.
        compiled = compiled_statement(self._latest_applied, conn.dialect)
        if compiled is None or conn.dialect.name != "sqlite":
            if not inspect(conn).has_table(self.versions.name):
                return 0
            return int(conn.execute(self._latest_applied).scalar() or 0)
        # On SQLite one query on the driver's connection, in the same transaction: the
        # reflection behind ``has_table`` and SQLAlchemy's execution cost more than it.
        try:
            cursor = run_on_driver(conn, compiled.sql)
        except DBAPIError as exc:
            if f"no such table: {self.versions.name}" in str(exc.orig):
                return 0
            raise
        try:
            found = cursor.fetchone()
        finally:
            cursor.close()
        return int(found[0] or 0) if found is not None else 0

    @cached_property
    def _latest_applied(self) -> Select[Any]:
        """The query of the latest version applied."""
        return select(func.max(self.versions.c.version))

    def upgrade(self, conn: Connection, current: int, applied_at: Callable[[], object]) -> None:
        """Apply the migrations after version ``current``, in order, on ``conn``.

        Args:
            conn: A connection in the migration transaction (holding the write lock).
            current: The version the database has.
            applied_at: Timestamp of each version recorded.
        """
        self.versions.create(conn, checkfirst=True)
        metadata = self._model(current)
        for version in range(current + 1, self.latest + 1):
            self._migrations[version - 1](SchemaChange(metadata, conn))
            conn.execute(self.versions.insert().values(version=version, applied_at=applied_at()))
